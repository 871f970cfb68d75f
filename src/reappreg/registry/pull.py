"""Pulling one version: verified against its signed statement, refused when it fails its gates.

:func:`pull` downloads into a temporary folder beside the target, runs the full
:func:`~reappreg.registry.verification.verify_version` on those very bytes, and only then
moves them into place. A version whose envelope does not verify, whose bytes differ from
the signed digests, whose tags were edited, or which fails its gates (for ``NAME@ALIAS``
the alias's gates, for ``NAME/VERSION`` the model's promotion gates) is refused and the
partial download deleted -- unless ``allow_failing_gates``, which is recorded on the
version (tag ``reappreg.pulled_failing.<time>``) and still refuses bytes that do not match.
This is the way to get a model without the pipeline; the DVC side moves with ``dvc pull``.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reappreg.errors import GateFailed, InputError, ReappregError
from reappreg.evidence.declarations import parse_spec
from reappreg.registry.verification import VersionCheck, gates_for, get_version, is_gated, verify_version


class IntegrityError(ReappregError):
    """A downloaded artifact does not match its signed statement, or the statement is not trusted."""

    exit_code = 1


@dataclass
class Pulled:
    name: str
    version: str
    folder: Path
    files: int
    card: str
    check: VersionCheck
    allowed_failing: bool = False
    tags: dict[str, str] = field(default_factory=dict)


def resolve_version(client: Any, spec: str) -> Any:
    name, version, alias = parse_spec(spec)
    return get_version(client, name, version=version, alias=alias)


def signed_alias_target(session: Any, name: str, alias: str, store_version: str) -> None:
    """Refuse unless the store's ``alias`` is the signed alias state: a chain that does not verify (or
    is shorter than this clone saw) is refused, and an alias set in the store but not yet decided by
    the registry is a pending request, served by no pull."""
    from reappreg.registry.history import read_history

    history = read_history(session.client, name, session.chain)
    if history.problems:
        raise IntegrityError(f"{name}@{alias}: the signed promotion history does not check out "
                             f"({'; '.join(history.problems)}); refused, nothing was downloaded")
    session.memory.remember(history)
    signed_to = history.signed_state().get(alias)
    if signed_to != store_version:
        said = f"v{signed_to}" if signed_to else "no version"
        raise IntegrityError(
            f"{name}@{alias} points at v{store_version} in the store, but the signed alias state is {said}: a PENDING "
            "request (set in the MLflow UI or by a store writer) that no key holder has accepted yet. `reappreg registry "
            f"watch --enforce` decides it; until then nothing is downloaded. Pull {name}/{store_version} by number to take "
            "that version knowingly.")


def pull(session: Any, spec: str, to: str | os.PathLike, *, allow_failing_gates: bool = False,
         actor: str = "unknown") -> Pulled:
    """Download exactly the version ``spec`` names into ``to``, verified byte by byte against its signed
    statement (``session``: a ``RegistrySession``, which says whose signatures count and remembers
    the chains' heads)."""
    client, decl = session.client, session.decl
    name, _, alias = parse_spec(spec)
    mv = resolve_version(client, spec)
    if alias is not None:
        signed_alias_target(session, name, alias, str(mv.version))
    target = Path(to)
    if target.exists() and any(target.iterdir()):
        raise InputError(f"{target}: already exists and is not empty; pull into a new folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial-{secrets.token_hex(4)}")
    try:
        check = verify_version(mv, gates_for(decl, name, alias), session.trust, tracking_uri=session.tracking_uri,
                               download_to=partial / "model", gated=is_gated(decl, name, alias))
        if check.evidence is None:
            raise IntegrityError(f"{mv.name} version {mv.version}: {check.unsigned_reason}. Refused; the partial download was deleted.")
        if not check.ok:
            if not allow_failing_gates or check.tampering:
                hint = "" if check.tampering else " (--allow-failing-gates takes it anyway, and records that)"
                raise IntegrityError(f"{mv.name} version {mv.version} refused: {check.problems()}{hint}. "
                                     "The partial download was deleted.")
            _record_failing_pull(client, mv, actor, check)
        if target.exists():
            target.rmdir()
        os.replace(partial / "model", target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    # Only the signed card is printed (never the store's description, which any store writer can edit).
    card = check.card if check.card is not None else "(this version was registered before cards were signed: no signed card)"
    return Pulled(mv.name, str(mv.version), target, check.files, card, check, not check.ok, dict(mv.tags))


def _record_failing_pull(client: Any, mv: Any, actor: str, check: VersionCheck) -> None:
    """Taking a failing version is allowed only when it is recorded on the version; an account
    the server lets only read (a training-side READ account on a team server) cannot record
    it, so it cannot take the version either."""
    from mlflow.exceptions import MlflowException

    when = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    try:
        client.set_model_version_tag(mv.name, str(mv.version), f"reappreg.pulled_failing.{when}",
                                     f"pulled by {actor} with --allow-failing-gates despite: {check.problems()}")
    except MlflowException as exc:
        if exc.get_http_status_code() not in (401, 403):
            raise
        raise GateFailed(f"{mv.name} version {mv.version} fails {check.problems()}; --allow-failing-gates must record that on the "
                         "version, and this account may not write to it (HTTP "
                         f"{exc.get_http_status_code()}). Ask a maintainer with EDIT on '{mv.name}'. "
                         "The partial download was deleted.") from exc
