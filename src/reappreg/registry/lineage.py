"""Claims are registered only as the pipeline drew them: bound to ``dvc.lock``.

A claim records (``inputs``, reappreg.stats.looks) the DVC md5 of every file the stats stage
read, by its command-line role (``judgments``, ``generations``, ``answers``, ...). Before
anything is registered, :func:`check_claims_lineage` derives what those files must be from
``dvc.lock`` instead of accepting the claims' word:

* the claims file on disk is the one the ``stats`` stage wrote (its md5 in the lock's outs);
* the role -> path map comes from the stats command the lock recorded (``--judgments PATH``),
  and every role whose path is a dependency of that stage is in each claim, with the md5 the
  lock recorded for that dependency;
* the judgments are the output of the stage that judged them (an ``outs`` entry of another
  stage in the lock, same md5): not a file edited or dropped in beside the pipeline.

A claims file edited by hand, drawn from other judgments, or from a stats run DVC never
recorded is refused, naming each difference.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reappreg.errors import GateFailed, InputError


def _lock(lock_path: Path) -> dict[str, Any]:
    from reappreg.io import read_yaml

    if not lock_path.is_file():
        raise InputError(f"{lock_path}: not found; claims are registered only as `dvc repro` recorded them "
                         "(run the pipeline, or pass --lock)")
    lock = read_yaml(lock_path)
    if not isinstance(lock, dict) or not isinstance(lock.get("stages"), dict):
        raise InputError(f"{lock_path}: not a dvc.lock (no 'stages:' mapping)")
    return lock["stages"]


def _roles(cmd: str) -> dict[str, str]:
    """``--role value`` pairs of a recorded command."""
    tokens = shlex.split(cmd)
    return {tok[2:]: tokens[i + 1] for i, tok in enumerate(tokens[:-1])
            if tok.startswith("--") and not tokens[i + 1].startswith("--")}


def check_claims_lineage(claims_path: Path, claims: Sequence[Mapping[str, Any]], lock_path: Path, *,
                         claims_md5: str, stage: str = "stats") -> str:
    """Raise GateFailed naming every way ``claims`` differ from what ``dvc.lock`` says the ``stage``
    stage drew them from; returns a one-line account of what was checked."""
    stages = _lock(lock_path)
    entry = stages.get(stage)
    if not isinstance(entry, dict) or not isinstance(entry.get("cmd"), str):
        raise GateFailed(f"{lock_path}: no '{stage}' stage with a command: the claims were not drawn by `dvc repro`")
    outs = {o.get("path"): o.get("md5") for o in entry.get("outs") or []}
    deps = {d.get("path"): d.get("md5") for d in entry.get("deps") or []}
    problems: list[str] = []
    key = claims_path.as_posix()
    if key not in outs:
        problems.append(f"{key} is not an output of the '{stage}' stage in {lock_path}")
    elif outs[key] != claims_md5:
        problems.append(f"{key} has md5 {claims_md5}, but the '{stage}' stage wrote {outs[key]} ({lock_path}): "
                        "edited after the stage ran")
    read = {role: path for role, path in _roles(entry["cmd"]).items() if path in deps}
    produced = {o.get("path"): (name, o.get("md5")) for name, e in stages.items() if name != stage and isinstance(e, dict)
                for o in e.get("outs") or []}
    judgments = read.get("judgments")
    if judgments is None:
        problems.append(f"the '{stage}' command in {lock_path} reads no --judgments dependency")
    elif judgments not in produced:
        problems.append(f"{judgments} is not the output of any stage in {lock_path} (the judge stage writes it)")
    elif produced[judgments][1] != deps[judgments]:
        problems.append(f"{judgments}: the '{stage}' stage read md5 {deps[judgments]}, the '{produced[judgments][0]}' "
                        f"stage wrote {produced[judgments][1]}")
    for claim in claims:
        cid = claim.get("claim_id", "?")
        inputs = claim.get("inputs")
        if not isinstance(inputs, Mapping):
            problems.append(f"{cid}: records no inputs (md5 of each file the stats stage read)")
            continue
        for role, path in sorted(read.items()):
            if inputs.get(role) != deps[path]:
                problems.append(f"{cid}: {role} md5 {inputs.get(role)} but the '{stage}' stage read {path} with md5 "
                                f"{deps[path]}")
    if problems:
        shown = problems[:12] + ([f"... and {len(problems) - 12} more"] if len(problems) > 12 else [])
        raise GateFailed(f"claims not as the pipeline drew them ({lock_path}): " + "; ".join(shown))
    return (f"{len(claims)} claims: {key} is the '{stage}' stage's output and every claim read "
            f"{', '.join(sorted(read))} at the md5s {lock_path} records")
