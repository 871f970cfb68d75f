"""Every stage run signs an in-toto link, and checks the links of what it consumes before it runs.

:func:`reappreg.custody.step.begin_step` and :meth:`~reappreg.custody.step.StepRun.finish` wrap a stage
command that ``dvc repro`` runs (DVC sets ``DVC_STAGE``; the CLI calls them, so every stage does this by
construction); this module holds what they are made of:

1. **verify on consume**: every material the layout says another step produced must carry a
   valid link from that step -- signed by a ``pipeline`` key under the trust version the link
   names -- whose products hold the material's current sha256; otherwise the stage refuses to
   run, naming the file and the step (so ``stats`` refuses judgments no signed ``judge`` step
   produced, whatever the tracking store says);
2. the materials (every dep: code, params file, data, models) are hashed before the command;
3. after it, the products (every out), and the link -- name, materials, products, command, an
   ``environment`` with the trust version, the params sections the stage reads (their values),
   the profile and the package versions, and ``byproducts``: what custody cost and what the stage
   noted about its run (:mod:`reappreg.custody.notes`: the stats step's looks) -- is signed (DSSE)
   and written to ``custody/links/<stage>.link``, the stage's DVC out, so it travels with the data.

Outside ``dvc repro`` (a stage command typed by hand, a library call in a test) nothing is
recorded: a link states what a pipeline step consumed and produced.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from reappreg.custody.plan import DECLARATIONS, DECLARATIONS_LINK, StepPlan, Template, custody_dir, link_path
from reappreg.errors import ReappregError

STAGE_ENV = "DVC_STAGE"
ROOT_ENV = "DVC_ROOT"
PACKAGES = ("reappreg", "torch", "transformers", "trl", "mlflow", "dvc", "in-toto", "tuf")


class CustodyError(ReappregError):
    """A consumed file carries no valid signed link from the step that must have produced it."""

    exit_code = 1


# DVC's own bookkeeping: `dvc repro` writes a .gitignore beside every out, inside folders that other
# steps consume whole (models/rm/multidim/), so no step "produces" it; it is not data either.
UNRECORDED = [".gitignore"]


def record(paths: list[str]) -> dict[str, dict[str, str]]:
    """in-toto's own artifact recording (sha256 per file; folders walked; DVC's .gitignore files excluded)."""
    from in_toto.runlib import record_artifacts_as_dict

    return record_artifacts_as_dict([p for p in paths if Path(p).exists()], exclude_patterns=UNRECORDED)


@dataclass(frozen=True)
class Signing:
    """Who signs the links of this clone's stages and under which trust version."""

    trust: Any
    keys: list[Any]
    version: Any


def pipeline_signing(root: Path) -> Signing:
    """The ``pipeline`` role's signer for a stage run in ``root``: ``$REAPPREG_SIGNING_KEY`` or this
    clone's local key (made on first use, with its one-key root), under the current trust version."""
    from reappreg.trust.keys import signing_keys
    from reappreg.trust.local import clone_trust
    from reappreg.settings import load_params

    local_keys = root / "work/registry/keys"
    trust = clone_trust(load_params(root / "params.yaml").registry, root / "registry/keys", local_keys, create_local=True)
    keys = signing_keys(local_keys, create=True)
    return Signing(trust, keys, trust.current_for([k.keyid for k in keys], "pipeline"))


def load_link(root: Path, stage: str, origin: str = "local") -> tuple[Any, dict[str, Any]]:
    """(the DSSE envelope, the link's payload) of ``stage``'s signed link (``declarations``: the one
    signed with ``origin``'s layout)."""
    from in_toto.models.metadata import Metadata

    path = custody_dir(root, origin) / DECLARATIONS_LINK if stage == DECLARATIONS else root / link_path(stage)
    if not path.is_file():
        hint = ("a `layout` key holder signs them: `reappreg registry keys sign-layout --reason ...`"
                if stage == DECLARATIONS else f"run `dvc repro {stage}`")
        raise CustodyError(f"no signed link of step '{stage}' ({path}): {hint}")
    envelope = Metadata.load(str(path))
    return envelope, json.loads(envelope.payload)


def verify_link(trust: Any, envelope: Any, payload: dict[str, Any], stage: str, origin: str | None = None) -> bool:
    """The link is ``stage``'s, signed by a ``pipeline`` key (``declarations``: a ``layout`` key) under
    the trust version it names. Returns whether ``origin`` adopted it (see below).

    In a chain verified under ``origin`` (the team's, say), a link signed under another root -- the
    runner's local one-key root, before the team root named the runner's key -- counts only when keys
    ``origin`` names for the role *now* (its current version) signed it: the team adopts a runner by
    naming its key (``keys init|role --role pipeline=...``); a key it does not name, or no longer names,
    cannot sign for it, whatever root the link claims."""
    from reappreg.trust.keys import SignatureInvalid
    from reappreg.trust import trust_version_of

    if payload.get("_type") != "link" or payload.get("name") != stage:
        raise CustodyError(f"{link_path(stage)} is not step '{stage}''s link (it names {payload.get('name')!r})")
    version = trust_version_of(payload)
    if version is None:
        raise CustodyError(f"{link_path(stage)} names no trust version: not trusted")
    role = "layout" if stage == DECLARATIONS else "pipeline"
    adopted = origin is not None and version.origin != origin
    try:
        if adopted:
            if origin not in trust.origins:
                raise SignatureInvalid(f"the chain is verified under the {origin} root, which this clone does not trust")
            trust.verify_envelope(envelope, role, trust.origins[origin].current)
        else:
            trust.verify_envelope(envelope, role, version)
    except SignatureInvalid as exc:
        claimed = f" (signed under the {version.origin} root; for the {origin} chain its key must be a '{role}' key of " \
                  f"the {origin} root now)" if adopted else ""
        raise CustodyError(f"the link of step '{stage}' ({link_path(stage)}) does not verify{claimed}: {exc}") from None
    return adopted


def check_consumed(root: Path, template: Template, step: StepPlan, materials: dict[str, dict[str, str]], trust: Any,
                   origin: str, only: set[str] | None = None) -> list[str]:
    """Every material a MATCH rule ties to a producing step must equal, by sha256, a product of that
    step's valid link. Returns one line per checked producer; raises CustodyError naming what differs."""
    checked, problems = [], []
    cache: dict[str, dict[str, Any]] = {}
    for pattern, producer in template.producers(step.name).items():
        files = {p: h for p, h in materials.items() if fnmatch(p, pattern) and (only is None or p in only)}
        if not files:
            continue
        if producer not in cache:
            envelope, payload = load_link(root, producer, origin)
            verify_link(trust, envelope, payload, producer, origin)
            cache[producer] = payload.get("products", {})
        products = cache[producer]
        wrong = [p for p, h in sorted(files.items()) if products.get(p, {}).get("sha256") != h.get("sha256")]
        if wrong:
            shown = ", ".join(wrong[:5]) + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else "")
            problems.append(f"{shown} is not what step '{producer}' produced (its signed link "
                            f"{link_path(producer) if producer != DECLARATIONS else DECLARATIONS_LINK} records other "
                            "sha256, or none)")
        checked.append(f"{len(files)} file(s) from '{producer}'")
    if problems:
        raise CustodyError(f"step '{step.name}' refused: " + "; ".join(problems) + ": edited, copied in, or from another "
                           "run (the step that wrote it signs what it produced; re-run the pipeline, or find who changed it)")
    return checked


def _environment(root: Path, step: StepPlan, version: Any) -> dict[str, Any]:
    import yaml

    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8")) or {}
    values = {}
    for key in step.params:
        node: Any = params
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        values[key] = node
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    return {"trust": version.as_dict(), "params": values, "profile": params.get("profile", "cpu"), "packages": packages}


def canonical_values(value: Any) -> Any:
    """``value`` as in-toto's canonical JSON can hold it: that encoding has no floats (securesystemslib
    refuses a link with one, so a link whose params or byproducts held ``0.95`` could not be signed), so
    every float is written as its shortest decimal string (``"0.95"``; ``float()`` reads it back
    exactly); everything else is kept."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): canonical_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical_values(v) for v in value]
    return value


def sign_link(signing: Signing, name: str, *, materials: dict, products: dict, command: list[str],
              environment: dict[str, Any], byproducts: dict[str, Any] | None = None) -> bytes:
    """An in-toto link as a DSSE envelope signed by every key of ``signing`` (floats in ``environment`` and
    ``byproducts`` as decimal strings: :func:`canonical_values`)."""
    from in_toto.models.link import Link
    from in_toto.models.metadata import Envelope

    from reappreg.trust.keys import crypto_signer

    link = Link(name=name, materials=materials, products=products, byproducts=canonical_values(byproducts or {}),
                command=command, environment=canonical_values(environment))
    envelope = Envelope.from_signable(link)
    for key in signing.keys:
        envelope.create_signature(crypto_signer(key))
    return json.dumps(envelope.to_dict(), sort_keys=True, indent=1).encode("utf-8")


@contextlib.contextmanager
def _in(folder: Path) -> Iterator[None]:
    """Paths are recorded relative to the repository root (as dvc.yaml names them)."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _log_to_run(path: Path) -> None:
    """The link beside the stage's MLflow run (the run this process tracked last), as ``custody/``."""
    import mlflow

    run = mlflow.last_active_run()
    if run is not None:
        mlflow.MlflowClient().log_artifact(run.info.run_id, str(path), "custody")


__all__ = ["CustodyError", "Signing", "canonical_values", "check_consumed", "load_link", "pipeline_signing", "record",
           "sign_link", "verify_link"]
