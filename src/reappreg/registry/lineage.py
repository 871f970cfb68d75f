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

``dvc.lock`` is a text file: judgments edited together with a lock rewritten to agree pass
the checks above. :func:`check_tracked_lineage` asks a second, independent record: the
tracking store, where every stage run tags the md5 of what it wrote when it finished
(``tracking.stage_run(outputs=...)``). The claims must be the output of a finished ``stats``
run that read exactly the claimed inputs, and the judgments and generations it read the
outputs of finished ``judge`` and ``generate`` runs. Forging that needs write access to the
tracking store as well as the repository.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import GateFailed, InputError


@dataclass(frozen=True)
class DvcLock:
    """``dvc.lock``'s stages, parsed once for every check of one registration."""

    path: Path
    stages: Mapping[str, Any]

    @classmethod
    def read(cls, lock_path: Path) -> "DvcLock":
        from reappreg.io import read_yaml

        if not lock_path.is_file():
            raise InputError(f"{lock_path}: not found; claims are registered only as `dvc repro` recorded them "
                             "(run the pipeline, or pass --lock)")
        lock = read_yaml(lock_path)
        if not isinstance(lock, dict) or not isinstance(lock.get("stages"), dict):
            raise InputError(f"{lock_path}: not a dvc.lock (no 'stages:' mapping)")
        return cls(lock_path, lock["stages"])


def _roles(cmd: str) -> dict[str, str]:
    """``--role value`` pairs of a recorded command."""
    tokens = shlex.split(cmd)
    return {tok[2:]: tokens[i + 1] for i, tok in enumerate(tokens[:-1])
            if tok.startswith("--") and not tokens[i + 1].startswith("--")}


def check_claims_lineage(claims_path: Path, claims: Sequence[Mapping[str, Any]], lock: DvcLock, *,
                         claims_md5: str, stage: str = "stats") -> str:
    """Raise GateFailed naming every way ``claims`` differ from what ``dvc.lock`` says the ``stage``
    stage drew them from; returns a one-line account of what was checked."""
    stages, lock_path = lock.stages, lock.path
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


def _finished_runs(client: Any, experiment_id: str, stage: str, output: str, md5: str) -> list[Any]:
    query = (f"tags.stage = '{stage}' and tags.`output.{output}.md5` = '{md5}' "
             "and attributes.status = 'FINISHED'")
    found, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=query, max_results=1000, page_token=token)
        found += list(page)
        token = page.token
        if not token:
            return found


def check_tracked_lineage(client: Any, experiment: str, claims: Sequence[Mapping[str, Any]], *,
                          claims_md5: str, where: str = "the tracking store") -> str:
    """Raise GateFailed unless finished runs in the tracking store wrote these claims (from
    exactly their recorded inputs) and the judgments and generations they read.

    ``client`` is an ``mlflow.MlflowClient`` on the stages' tracking store, ``experiment`` its
    experiment name. Returns a one-line account of what was checked."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise GateFailed(f"{where}: no experiment {experiment!r}, so no stage run wrote these claims; register from "
                         "the clone (or tracking server) where `dvc repro` ran the stats stage")
    problems: list[str] = []
    stats_runs = _finished_runs(client, exp.experiment_id, "stats", "claims", claims_md5)
    inputs = [c.get("inputs") for c in claims if isinstance(c.get("inputs"), Mapping)]
    claimed = inputs[0] if inputs else {}
    if not stats_runs:
        problems.append(f"no finished 'stats' run wrote claims with md5 {claims_md5}")
    elif not any(all(r.data.tags.get(f"input.{role}.md5") == md5 for role, md5 in claimed.items()) for r in stats_runs):
        problems.append(f"the 'stats' run(s) that wrote claims md5 {claims_md5} ({', '.join(r.info.run_id for r in stats_runs[:3])}) "
                        "read other inputs than the claims record")
    for stage, role in (("judge", "judgments"), ("generate", "generations")):
        md5 = claimed.get(role)
        if md5 is None:
            problems.append(f"the claims record no {role} md5")
        elif not _finished_runs(client, exp.experiment_id, stage, role, md5):
            problems.append(f"no finished '{stage}' run wrote {role} with md5 {md5}")
    if problems:
        raise GateFailed(f"claims not drawn by runs recorded in {where} (experiment {experiment!r}): "
                         + "; ".join(problems) + ". dvc.lock and the files agree, but no tracked run of the pipeline "
                         "made them: a lock rewritten to match edited files, or outputs copied in from elsewhere")
    return (f"claims md5 {claims_md5} written by finished stats run {stats_runs[0].info.run_id} from the judgments and "
            f"generations finished judge and generate runs wrote ({where})")


def _files_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    return []


def check_outputs_in_lock(paths: Mapping[str, Path], lock: DvcLock) -> str:
    """Raise GateFailed unless every file under ``paths`` (role -> file or folder, relative to the
    repository root) is, byte for byte, what a stage wrote according to ``dvc.lock``: each file is an
    output of a stage, or inside a folder that is one, and that output's md5 now equals the md5 the
    lock recorded. A metric edited by hand, a card rewritten after the card stage, or a file dropped
    into a metrics folder beside the stages' own is refused, naming the file and the stage.
    Returns a one-line account of what was checked."""
    from reappreg.hashing import dvc_md5

    stages, lock_path = lock.stages, lock.path
    outs = {str(o.get("path")): (name, o.get("md5")) for name, entry in stages.items() if isinstance(entry, dict)
            for o in entry.get("outs") or []}
    problems: list[str] = []
    owners: dict[str, str] = {}
    for role, path in sorted(paths.items()):
        files = _files_under(Path(path))
        if not files:
            problems.append(f"{Path(path).as_posix()} ({role}) not found")
        for file in files:
            key = file.as_posix()
            owner = next((out for out in ([key] + [p.as_posix() for p in file.parents]) if out in outs), None)
            if owner is None:
                problems.append(f"{key} ({role}) is not the output of any stage in {lock_path}: written beside the "
                                "pipeline, or left by a stage a params change removed (DVC never deletes those: "
                                "`git rm` it)")
                continue
            owners[owner] = role
    for owner in sorted(owners):
        stage, recorded = outs[owner]
        now = dvc_md5(owner)
        if now != recorded:
            problems.append(f"{owner} ({owners[owner]}) has md5 {now}, but the '{stage}' stage wrote {recorded} "
                            f"({lock_path}): edited after the stage ran")
    if problems:
        shown = problems[:12] + ([f"... and {len(problems) - 12} more"] if len(problems) > 12 else [])
        raise GateFailed("evidence not as the pipeline wrote it: " + "; ".join(shown))
    return (f"{len(owners)} output(s) of {len({outs[o][0] for o in owners})} stage(s) equal what {lock_path} recorded: "
            + ", ".join(sorted(owners)))
