"""GTO tags for registered versions, so ``dvc artifacts get REPO NAME`` works from a fresh clone.

``dvc artifacts get`` resolves a name from dvc.yaml's ``artifacts:`` through a Git tag in
GTO's format, ``<artifact>@v<semver>`` (annotated), checks out the commit the tag points at
and downloads that commit's ``dvc.lock`` entry from the DVC remote. Without such a tag it
fails (Studio aside). MLflow numbers the registered versions; this module gives the
commit that holds exactly those bytes the matching tag, ``v<mlflow version>.0.0``, so a
GTO version and an MLflow version of the same artifact are the same number.

The tag is a claim ("these are the bytes registered as version N"), so it is written only
when the commit proves it:

* the files it rests on (dvc.yaml, dvc.lock, the registration receipt, the registry
  declarations) are committed unchanged at HEAD, the commit the tags point at;
* the receipt is the one this ``dvc.lock`` recorded as the ``register`` stage's output
  (same md5), not a copy from another run;
* for every registered model, the committed ``dvc.lock`` records its artifact folder with
  exactly the md5 the receipt says was registered, and dvc.yaml declares that folder as an
  artifact (otherwise no tag name exists and ``dvc artifacts get`` cannot reach it).

An existing tag for the same version is kept when its commit's ``dvc.lock`` records the same
md5 (an unchanged registration on a later commit adds no version); a tag of that name over
other bytes is refused: the version numbers then come from another registry.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reappreg.errors import InputError, ReappregError


class TagRefused(ReappregError):
    """The commit does not hold what was registered; no tag was written."""

    exit_code = 1


@dataclass(frozen=True)
class ArtifactTag:
    artifact: str         # name in dvc.yaml `artifacts:`
    path: str             # its path (the registered model's artifact folder)
    model: str            # MLflow registered model name
    version: str          # MLflow version number
    md5: str              # DVC md5 recorded in dvc.lock and in the receipt
    commit: str           # commit the tag points at
    existing_commit: str | None = None  # an existing tag for this version: the commit it points at

    @property
    def semver(self) -> str:
        return f"v{self.version}.0.0"

    @property
    def tag(self) -> str:
        return f"{self.artifact}@{self.semver}"

    @property
    def message(self) -> str:
        return (f"{self.artifact} {self.semver}: MLflow registered model {self.model} version {self.version}; "
                f"{self.path} with DVC md5 {self.md5} (dvc.lock at this commit)")


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise InputError(f"git {' '.join(args)} failed in {root}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _committed(root: Path, commit: str, rel: str) -> str:
    proc = _git(root, "show", f"{commit}:{rel}", check=False)
    if proc.returncode != 0:
        raise TagRefused(f"{rel} is not committed at {commit[:12]}: commit the pipeline's results first")
    return proc.stdout


def _lock_outs(lock_text: str, source: str) -> dict[str, str]:
    """path -> md5 of every output recorded in a dvc.lock."""
    try:
        stages = (yaml.safe_load(lock_text) or {}).get("stages") or {}
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML: {exc}") from exc
    outs: dict[str, str] = {}
    for entry in stages.values():
        for out in entry.get("outs") or []:
            if "md5" in out:
                outs[out["path"]] = out["md5"]
    return outs


def _artifacts(dvc_yaml_text: str, source: str) -> dict[str, list[str]]:
    """artifact path -> the names dvc.yaml's `artifacts:` declares for it."""
    try:
        declared = (yaml.safe_load(dvc_yaml_text) or {}).get("artifacts") or {}
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML: {exc}") from exc
    by_path: dict[str, list[str]] = {}
    for name, spec in declared.items():
        if not isinstance(spec, dict) or "path" not in spec:
            raise InputError(f"{source}: artifact '{name}' has no path")
        by_path.setdefault(str(spec["path"]).rstrip("/"), []).append(str(name))
    return by_path


def _receipt(text: str, source: str) -> list[dict[str, Any]]:
    try:
        registered = json.loads(text)["registered"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(f"{source}: not a registration receipt (a JSON object with 'registered'): {exc}") from exc
    for i, entry in enumerate(registered):
        missing = [k for k in ("name", "version", "content_md5") if not entry.get(k)]
        if missing:
            raise InputError(f"{source}: registered[{i}] has no {', '.join(missing)}")
        if not str(entry["version"]).isdigit():
            raise InputError(f"{source}: registered[{i}] version {entry['version']!r} is not an MLflow version number")
    return registered


def plan_tags(root: str | Path, *, receipt: str, models: str, dvc_yaml: str = "dvc.yaml", lock: str = "dvc.lock") -> list[ArtifactTag]:
    """The tags HEAD earns (see the module docstring); raises TagRefused when it earns none of them.

    Paths are relative to ``root``, the repository root."""
    from reappreg.hashing import file_md5
    from reappreg.evidence.declarations import load_declarations

    root = Path(root)
    top = Path(_git(root, "rev-parse", "--show-toplevel").stdout.strip())
    if top.resolve() != root.resolve():
        raise InputError(f"{root} is not the root of its git repository ({top}); run from the repository root")
    commit = _git(root, "rev-parse", "HEAD").stdout.strip()
    files = [dvc_yaml, lock, receipt, models]
    dirty = _git(root, "status", "--porcelain", "--", *files).stdout.strip()
    if dirty:
        raise TagRefused("uncommitted changes to what the tags rest on:\n" + dirty +
                         "\ncommit the pipeline's results (`git add dvc.lock ...; git commit`), then tag")
    lock_outs = _lock_outs(_committed(root, commit, lock), f"{lock} at {commit[:12]}")
    receipt_text = _committed(root, commit, receipt)
    if receipt not in lock_outs:
        raise TagRefused(f"{lock} at {commit[:12]} records no output {receipt}: the receipt was not written by this lock's "
                         "`register` stage")
    if file_md5(root / receipt) != lock_outs[receipt]:
        raise TagRefused(f"{receipt} has md5 {file_md5(root / receipt)} but {lock} records {lock_outs[receipt]}: "
                         "it is not the receipt of the run this lock describes")
    decl = load_declarations(root / models)
    artifacts = _artifacts(_committed(root, commit, dvc_yaml), f"{dvc_yaml} at {commit[:12]}")
    plans, problems = [], []
    for entry in _receipt(receipt_text, receipt):
        name = entry["name"]
        if name not in decl.models:
            problems.append(f"{name}: registered but not declared in {models}")
            continue
        path = decl.models[name].artifact.rstrip("/")
        checkpoints = (decl.models[name].checkpoints or "").rstrip("/")
        if lock_outs.get(path) != entry["content_md5"] and checkpoints:
            # a kept checkpoint's version: tag the checkpoints folder it was published in
            found = _checkpoint_version(root, checkpoints, entry["content_md5"], lock_outs.get(checkpoints))
            if found is not None:
                if checkpoints not in artifacts:
                    problems.append(f"{name} version {entry['version']}: a checkpoint in {checkpoints}, which is not "
                                    f"declared in {dvc_yaml} `artifacts:` (no name to tag)")
                    continue
                plans += [ArtifactTag(artifact, checkpoints, name, str(entry["version"]), lock_outs[checkpoints], commit)
                          for artifact in artifacts[checkpoints]]
                continue
        if path not in artifacts:
            problems.append(f"{name}: its artifact {path} is not declared in {dvc_yaml} `artifacts:` (no name to tag)")
            continue
        recorded = lock_outs.get(path)
        if recorded != entry["content_md5"]:
            problems.append(f"{name} version {entry['version']}: registered {path} with md5 {entry['content_md5']} but "
                            f"{lock} at {commit[:12]} records {recorded or 'no such output'}")
            continue
        for artifact in artifacts[path]:
            plans.append(ArtifactTag(artifact, path, name, str(entry["version"]), recorded, commit))
    if problems:
        raise TagRefused("refusing to tag; the commit does not hold what was registered:\n  " + "\n  ".join(problems))
    return [_with_existing(root, p, lock) for p in plans]


def _checkpoint_version(root: Path, folder: str, content_md5: str, recorded: str | None) -> str | None:
    """The step folder of ``folder`` (a policy's kept checkpoints, e.g. ``models/policy/checkpoints``)
    whose md5 in its manifest is ``content_md5``, if the workspace folder is the one the committed
    lock records (``recorded``); None when no listed step has that md5."""
    from reappreg.hashing import dvc_md5

    manifest_path = root / folder / "manifest.json"
    if recorded is None or not manifest_path.is_file():
        return None
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    steps = [e for e in manifest.get("checkpoints", []) if isinstance(e, dict) and e.get("md5") == content_md5]
    if not steps:
        return None
    if dvc_md5(root / folder) != recorded:
        raise TagRefused(f"{folder} in the workspace is not the folder the committed lock records ({recorded}); "
                         "`dvc checkout` it, then tag")
    return str(steps[0].get("path"))


def _with_existing(root: Path, plan: ArtifactTag, lock: str) -> ArtifactTag:
    proc = _git(root, "rev-list", "-n", "1", f"refs/tags/{plan.tag}", check=False)
    if proc.returncode != 0:
        return plan
    tagged = proc.stdout.strip()
    then = _lock_outs(_committed(root, tagged, lock), f"{lock} at {tagged[:12]}").get(plan.path)
    if then != plan.md5:
        raise TagRefused(f"tag {plan.tag} already points at {tagged[:12]}, whose {lock} records {plan.path} as {then}, not "
                         f"the registered {plan.md5}: version {plan.version} was numbered by another registry")
    return ArtifactTag(**{**plan.__dict__, "existing_commit": tagged})


def write_tags(root: str | Path, plans: list[ArtifactTag]) -> list[ArtifactTag]:
    """Write the GTO tags not written yet (annotated, GTO's `simple` format); returns those written."""
    from gto.api import register
    from gto.exceptions import GTOException

    written = []
    for plan in plans:
        if plan.existing_commit is not None:
            continue
        try:
            register(str(root), plan.artifact, plan.commit, version=plan.semver, message=plan.message, simple=True)
        except GTOException as exc:
            raise TagRefused(f"gto refused {plan.tag} at {plan.commit[:12]}: {exc}") from exc
        written.append(plan)
    return written
