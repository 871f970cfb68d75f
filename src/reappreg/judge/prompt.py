"""The judge prompt, read from its file (pipelines/prompts/judge_prompt.yaml), and the labels."""

from __future__ import annotations

import os
from dataclasses import dataclass

from reappreg.prompt_file import read_prompt_file

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
    """Read and check the judge prompt file (keys ``version``, ``system``, ``user_template``;
    see :mod:`reappreg.prompt_file`). The texts are used as written."""
    raw = read_prompt_file(path, "judge prompt", PLACEHOLDERS)
    return JudgePrompt(system=raw["system"], user_template=raw["user_template"], version=raw["version"],
                       source=str(path))
