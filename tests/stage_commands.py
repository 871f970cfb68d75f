"""The command line each DVC stage runs, read from dvc.yaml.

The pipeline's paths are required options stated once, in the stages' ``cmd:``; a test that
runs a stage's command (in a folder laid out like the repository) takes its arguments from
there, overriding only what it changes, so it runs exactly what ``dvc repro`` runs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# dvc.yaml's interpolations (${item.seed}, ${rm.ensemble.objective}, ...): a stand-in value that
# every option type accepts (paths, names, integers).
PLACEHOLDER = "0"


def stage_cmds(repo: Path = REPO) -> dict[str, str]:
    """Stage name -> its ``cmd`` (one line; folded YAML already is)."""
    stages = yaml.safe_load((repo / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {name: spec["cmd"] if isinstance(spec["cmd"], str) else " ".join(spec["cmd"]) for name, spec in stages.items()}


def cmd_argv(cmd: str) -> list[str]:
    """The arguments after ``reappreg`` of a stage's ``cmd``, interpolations replaced by :data:`PLACEHOLDER`."""
    words = shlex.split(re.sub(r"\$\{[^}]*\}", PLACEHOLDER, cmd))
    assert words[0] == "reappreg", cmd
    return words[1:]


def stage_argv(stage: str, **values: str) -> list[str]:
    """The arguments of stage ``stage``'s command, each option in ``values`` (``out_dir`` for
    ``--out-dir``) given that value instead (appended when the stage does not pass it)."""
    argv = cmd_argv(stage_cmds()[stage])
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if flag in argv:
            argv[argv.index(flag) + 1] = str(value)
        else:
            argv += [flag, str(value)]
    return argv
