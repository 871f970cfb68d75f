"""The prompt files under pipelines/prompts/ (the GRPO prompt and the judge prompt): one
format, one loader.

A prompt file is YAML with exactly the keys ``version`` (an integer), ``system`` and
``user_template`` (non-empty strings); the template holds each of its placeholders exactly
once. :func:`read_prompt_file` checks all of that and returns the three values as written;
each caller builds its own prompt object (the GRPO prompt strips the texts, the judge's
is used verbatim).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.io import read_yaml

KEYS = ("version", "system", "user_template")


def read_prompt_file(path: str | os.PathLike, what: str, placeholders: tuple[str, ...]) -> dict[str, Any]:
    """``{version, system, user_template}`` of a checked prompt file; ``what`` names the file
    in the not-found message (e.g. "judge prompt")."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: {what} file not found")
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: top level must be a mapping with keys {', '.join(KEYS)}")
    missing = [key for key in KEYS if key not in raw]
    if missing:
        raise InputError(f"{path}: missing key(s) {', '.join(missing)}")
    unknown = sorted(str(key) for key in set(raw) - set(KEYS))
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(unknown)}")
    for key in ("system", "user_template"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise InputError(f"{path}: '{key}' must be a non-empty string")
    if not isinstance(raw["version"], int) or isinstance(raw["version"], bool):
        raise InputError(f"{path}: 'version' must be an integer (got {raw['version']!r})")
    template = raw["user_template"]
    if len(placeholders) == 1:
        count = template.count(placeholders[0])
        if count != 1:
            raise InputError(f"{path}: 'user_template' must contain {placeholders[0]} exactly once (found {count})")
    else:
        wrong = [p for p in placeholders if template.count(p) != 1]
        if wrong:
            raise InputError(f"{path}: 'user_template' must contain each of {', '.join(placeholders)} exactly once "
                             f"(wrong: {', '.join(wrong)})")
    return {key: raw[key] for key in KEYS}
