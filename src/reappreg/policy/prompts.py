"""The GRPO prompt: loading the single prompt file and rendering it for a tokenizer.

A prompt file (``policy.prompt.file``) is the only place a system prompt and user-turn
template live: ``pipelines/prompts/grpo_prompt.yaml`` (the CPU profile's restatement) or
``pipelines/prompts/grpo_prompt_reference.yaml`` (the reference card's verbatim text, the
full profile's). Training (`reappreg policy prompts`) and generation both render through
:func:`render_prompt`, so the text a policy is trained on and the text it is evaluated
on are produced by the same code from the same file. :meth:`PromptTemplate.identity` is
what a trained policy records about the prompt it was trained with.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reappreg.errors import InputError
from reappreg.prompt_file import read_prompt_file

SCENARIO_PLACEHOLDER = "{scenario}"


@dataclass(frozen=True)
class PromptTemplate:
    system: str
    user_template: str
    version: int
    source: str

    def user_turn(self, scenario: str) -> str:
        # str.replace, not str.format: scenarios may contain braces.
        return self.user_template.replace(SCENARIO_PLACEHOLDER, scenario)

    @property
    def sha256(self) -> str:
        """Hash of the wording (system + user template), whatever the file's comments say."""
        payload = json.dumps({"system": self.system, "user_template": self.user_template}, sort_keys=True)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def identity(self) -> dict[str, Any]:
        """``{file, version, sha256}``: which prompt a policy was trained with."""
        return {"file": self.source, "version": self.version, "sha256": self.sha256}

    def messages(self, scenario: str) -> list[dict[str, str]]:
        """Chat messages (system + user) for one scenario."""
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.user_turn(scenario)},
        ]


def load_prompt_template(path: str | os.PathLike) -> PromptTemplate:
    """Read and check the prompt file (keys ``version``, ``system``, ``user_template``; see
    :mod:`reappreg.prompt_file`). The texts are stripped."""
    raw = read_prompt_file(path, "prompt", (SCENARIO_PLACEHOLDER,))
    return PromptTemplate(
        system=raw["system"].strip(),
        user_template=raw["user_template"].strip(),
        version=raw["version"],
        source=str(path),
    )


def _as_template(template: PromptTemplate | str | os.PathLike) -> PromptTemplate:
    return template if isinstance(template, PromptTemplate) else load_prompt_template(template)


def render_prompt(
    tokenizer: Any,
    scenario: str,
    template: PromptTemplate | str | os.PathLike,
    *,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The exact prompt string a policy sees for ``scenario``.

    The tokenizer's own chat template renders the system + user turns with the generation
    prompt appended (for Qwen3-Thinking that includes the opening ``<think>``), so the
    string can be fed to the model as plain text.
    """
    if not isinstance(scenario, str) or not scenario.strip():
        raise InputError("render_prompt: scenario must be a non-empty string")
    if getattr(tokenizer, "chat_template", None) is None:
        raise InputError(
            f"render_prompt: tokenizer {getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)!r} "
            "has no chat template"
        )
    rendered = tokenizer.apply_chat_template(
        _as_template(template).messages(scenario),
        tokenize=False,
        add_generation_prompt=True,
        **dict(chat_template_kwargs or {}),
    )
    return rendered


def prompt_id_for(vignette_id: str) -> str:
    return f"grpo-{vignette_id}"


def render_prompt_records(
    vignettes: Iterable[Mapping[str, Any]],
    tokenizer: Any,
    template: PromptTemplate | str | os.PathLike,
    *,
    source: str = "vignettes",
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[dict[str, str]]:
    """One {prompt_id, vignette_id, prompt} record per vignette, in vignette order."""
    template = _as_template(template)
    records: list[dict[str, str]] = []
    seen: set[str] = set()
    for row_number, vignette in enumerate(vignettes, start=1):
        for key in ("vignette_id", "scenario"):
            if not isinstance(vignette.get(key), str) or not vignette[key].strip():
                raise InputError(f"{source}: row {row_number} has no non-empty string '{key}'")
        vignette_id = vignette["vignette_id"]
        if vignette_id in seen:
            raise InputError(f"{source}: row {row_number} repeats vignette_id '{vignette_id}'")
        seen.add(vignette_id)
        records.append(
            {
                "prompt_id": prompt_id_for(vignette_id),
                "vignette_id": vignette_id,
                "prompt": render_prompt(
                    tokenizer, vignette["scenario"], template, chat_template_kwargs=chat_template_kwargs
                ),
            }
        )
    if not records:
        raise InputError(f"{source}: no vignettes to render prompts for")
    return records


def check_rendered_with(template: PromptTemplate, rows: Iterable[Mapping[str, str]], *, source: str) -> None:
    """Refuse training prompts that were not rendered from ``template`` (rows carry the
    rendered ``prompt`` and its ``scenario``): the system prompt and the user turn must
    appear in each, verbatim."""
    for number, row in enumerate(rows, start=1):
        prompt = row["prompt"]
        if template.system not in prompt or template.user_turn(row["scenario"]) not in prompt:
            raise InputError(
                f"{source}: line {number} ({row.get('prompt_id', '?')}) was not rendered from {template.source} "
                "(policy.prompt.file): its system prompt or user turn is not in the prompt; re-run `reappreg policy prompts`"
            )
