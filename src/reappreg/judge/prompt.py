"""The judge prompt, read from its file (pipelines/prompts/judge_prompt.yaml), and the labels."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from reappreg.errors import InputError

Messages = list[dict[str, str]]
PLACEHOLDERS = ("{scenario}", "{answer_a}", "{answer_b}", "{choices}")
TIE = "tie"


def verdict_labels(allow_tie: bool) -> tuple[str, ...]:
    """The labels a judge may answer with, in prompt order."""
    return ("A", "B", TIE) if allow_tie else ("A", "B")


def choices_text(labels: tuple[str, ...]) -> str:
    return " or ".join(labels) if len(labels) == 2 else f"{', '.join(labels[:-1])} or {labels[-1]}"


@dataclass(frozen=True)
class JudgePrompt:
    system: str
    user_template: str
    version: int
    source: str

    def messages(self, scenario: str, answer_a: str, answer_b: str, labels: tuple[str, ...]) -> Messages:
        # str.replace, not str.format: scenarios and answers may contain braces. The answers
        # go in last so that a placeholder-looking text inside an answer is left alone.
        user = (self.user_template.replace("{scenario}", "\0S").replace("{choices}", choices_text(labels))
                .replace("{answer_a}", "\0A").replace("{answer_b}", "\0B"))
        user = user.replace("\0S", scenario).replace("\0A", answer_a).replace("\0B", answer_b)
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


def load_judge_prompt(path: str | os.PathLike) -> JudgePrompt:
    """Read and check the judge prompt file (keys ``version``, ``system``, ``user_template``)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: judge prompt file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict) or set(raw) != {"version", "system", "user_template"}:
        keys = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise InputError(f"{path}: expected exactly the keys version, system, user_template (got {keys})")
    for key in ("system", "user_template"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise InputError(f"{path}: '{key}' must be a non-empty string")
    if not isinstance(raw["version"], int):
        raise InputError(f"{path}: 'version' must be an integer, got {raw['version']!r}")
    template = raw["user_template"]
    wrong = [p for p in PLACEHOLDERS if template.count(p) != 1]
    if wrong:
        raise InputError(f"{path}: user_template must contain each of {', '.join(PLACEHOLDERS)} exactly once "
                         f"(wrong: {', '.join(wrong)})")
    return JudgePrompt(system=raw["system"], user_template=template, version=raw["version"], source=str(path))
