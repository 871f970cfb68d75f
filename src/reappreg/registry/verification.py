"""Checking a version against its signed statement: signature, bytes, tags, then the gates from the signed evidence.

:func:`verify_version` is the one check ``verify``, ``promote``, ``pull`` and ``watch``
share. In order:

1. fetch ``<name>/attestations/v<version>.provenance.dsse.json`` from the version's run
   and open it: a threshold of ``registration`` keys under the trust version it names
   (:mod:`reappreg.trust`: the team root, or this clone's local one-key root);
2. the statement must name this model, this version number, this run and this source
   (an envelope copied from another version is refused);
3. download the version's files, hash every byte (sha256) and compare the set and each
   digest with the statement's subjects; then model-signing verifies the folder against
   its own bundle with a trusted key;
4. every readable tag the statement recorded must still hold its signed value (an edited
   or deleted tag is reported as tampering), and the envelope's sha256 tag must match; the
   card artifact and the version's description must be the signed card (their sha256);
5. only then do the gates read the signed evidence. A version without a valid envelope,
   or whose bytes differ, fails every gate.

One file may be in the store without being signed: ``registered_model_meta``, which MLflow
writes into a local store's model folder whenever anyone loads ``models:/NAME/...`` (an
honest bare load must not make a version fail). It is accepted only by content -- exactly
MLflow's two keys naming this model and this version -- and dropped from the verified copy;
any other content is an unexpected file like any other.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.evidence.declarations import Gate, RegistryDecl
from reappreg.registry.gates import GateCheck, check_gate, evaluate_gates, failed
from reappreg.trust.keys import SignatureInvalid, verify_folder
from reappreg.trust import Signer, Trust, trust_version_of
from reappreg.registry.provenance import (
    CARD_BYPRODUCT,
    EVIDENCE_BYPRODUCT,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    TAGS_BYPRODUCT,
    byproduct,
)
from reappreg.registry.layout import ENVELOPE_TAG, attestation_paths, fit_description, for_ui, subject_digests
from reappreg.registry.slsa import check_statement


class NotFound(InputError):
    """A registered model, version or alias that does not exist (one line, exit 1)."""

    exit_code = 1


@dataclass
class VersionCheck:
    name: str
    version: str
    signer: Signer | None
    unsigned_reason: str | None            # why there is no valid signed evidence (None: there is)
    byte_problems: list[str] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)
    gates: list[GateCheck] = field(default_factory=list)
    evidence: dict[str, Any] | None = None
    statement: dict[str, Any] | None = None
    files: int = 0
    # Readable tags that differ from (or were deleted from) their signed copy: key -> signed value.
    tag_changes: dict[str, str] = field(default_factory=dict)
    # The signed card (its artifact matched the signed sha256); None when it could not be verified.
    card: str | None = None
    # The signed description, when the store's differs and the signed card lets it be rebuilt.
    description_restore: str | None = None

    @property
    def failed_gates(self) -> list[GateCheck]:
        return failed(self.gates)

    @property
    def ok(self) -> bool:
        return not self.failed_gates and not self.tampering

    def problem_list(self) -> list[str]:
        return [f"{c.gate} ({c.detail})" for c in self.failed_gates] + [f"TAMPERING: {t}" for t in self.tampering]

    def problems(self) -> str:
        return "; ".join(self.problem_list())


def _quiet() -> None:
    # One progress bar per file per version would bury the findings.
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def _download(run_id: str, path: str, dst: Path, tracking_uri: str) -> Path | None:
    _quiet()
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=str(dst), tracking_uri=tracking_uri))
    except (MlflowException, OSError):
        return None


def download_source(mv: Any, dst: Path, tracking_uri: str) -> Path:
    _quiet()
    import mlflow

    # A folder URI downloads into dst/<its last component>; the returned path says where.
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=mv.source, dst_path=str(dst), tracking_uri=tracking_uri))


MLFLOW_LOAD_MARKER = "registered_model_meta"  # mlflow.store.artifact.models_artifact_repo writes it on load


def drop_mlflow_load_marker(local: Path, mv: Any) -> str | None:
    """Remove MLflow's load marker from the downloaded copy when its content is exactly what MLflow
    writes for this version; returns why it was kept (then it counts as an unexpected file), or None."""
    import yaml

    marker = local / MLFLOW_LOAD_MARKER
    if not marker.is_file() or marker.is_symlink():
        return None if not marker.exists() else f"{MLFLOW_LOAD_MARKER} is not a regular file"
    if marker.stat().st_size > 1024:
        return f"{MLFLOW_LOAD_MARKER} is {marker.stat().st_size} bytes, not MLflow's two-line marker"
    try:
        content = yaml.safe_load(marker.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return f"{MLFLOW_LOAD_MARKER} is not MLflow's marker ({type(exc).__name__})"
    want = {"model_name": str(mv.name), "model_version": str(mv.version)}
    if not isinstance(content, dict) or {k: str(v) for k, v in content.items()} != want or set(content) != set(want):
        return f"{MLFLOW_LOAD_MARKER} holds {content!r}, not MLflow's marker for this version {want!r}"
    marker.unlink()
    return None


def _superseded(stmt: dict[str, Any], mv: Any, trust: Trust) -> list[str]:
    """A statement signed under a trust version that a newer one had replaced before the store created
    the version (the store's clock: a writer of the store's API cannot set it): the signing key's
    authority had ended, whatever date the statement writes."""
    import datetime as dt

    version = trust_version_of(stmt)
    origin = trust.origins.get(version.origin) if version is not None else None
    created = getattr(mv, "creation_timestamp", None)
    if origin is None or not isinstance(created, (int, float)):
        return []
    replaced = origin.published(version.targets + 1)
    when = dt.datetime.fromtimestamp(created / 1000, tz=dt.timezone.utc)
    if replaced is not None and when > replaced + trust.skew:
        return [f"signed under {version}, but the store created this version on {when.isoformat(timespec='seconds')}, "
                f"after targets v{version.targets + 1} replaced that version ({replaced.isoformat()}): a key's authority "
                "ends with the version that drops it"]
    return []


def _statement_mismatch(stmt: dict[str, Any], mv: Any) -> str | None:
    if stmt.get("_type") != STATEMENT_TYPE or stmt.get("predicateType") != PREDICATE_TYPE:
        return f"statement type {stmt.get('_type')!r}/{stmt.get('predicateType')!r} is not in-toto v1 / SLSA provenance v1"
    try:
        check_statement(stmt)
    except InputError as exc:
        return str(exc)
    params = stmt.get("predicate", {}).get("buildDefinition", {}).get("externalParameters", {})
    want = {"model": mv.name, "version": str(mv.version), "mlflow_run_id": mv.run_id, "source": mv.source}
    wrong = [f"{k}={params.get(k)!r} (this version: {v!r})" for k, v in want.items() if params.get(k) != v]
    return "signed statement describes another version: " + ", ".join(wrong) if wrong else None


def verify_version(
    mv: Any,
    gates: list[Gate],
    trust: Trust,
    *,
    tracking_uri: str,
    download_to: Path | None = None,
    gated: bool | None = None,
) -> VersionCheck:
    """The full check of one model version (see the module docstring). ``download_to``: keep the verified files there.
    ``gated`` (default: any ``gates`` given): the signed gate table applies too (:func:`signed_table_checks`),
    also when today's declarations list no gate at all."""
    check = VersionCheck(str(mv.name), str(mv.version), None, None)
    stmt = None
    with tempfile.TemporaryDirectory(prefix="reappreg-verify-") as tmp:
        tmp_path = Path(tmp)
        envelope_rel, bundle_rel = attestation_paths(mv.name, str(mv.version))
        envelope_file = _download(mv.run_id, envelope_rel, tmp_path / "env", tracking_uri) if mv.run_id else None
        if envelope_file is None or not envelope_file.is_file():
            check.unsigned_reason = f"no provenance envelope ({envelope_rel} not found in the version's run)"
        else:
            data = envelope_file.read_bytes()
            recorded = mv.tags.get(ENVELOPE_TAG)
            if recorded != hashlib.sha256(data).hexdigest():
                check.tampering.append(f"envelope digest tag {ENVELOPE_TAG}={recorded} but the stored envelope has sha256 "
                                       f"{hashlib.sha256(data).hexdigest()}")
            try:
                stmt, signers = trust.open(data, role="registration")
                check.signer = signers[0]
                mismatch = _statement_mismatch(stmt, mv)
                if mismatch:
                    check.unsigned_reason, stmt = mismatch, None
                else:
                    check.tampering += _superseded(stmt, mv, trust)
            except SignatureInvalid as exc:
                check.unsigned_reason = f"provenance envelope rejected: {exc}"
        files_dir = tmp_path / "files"
        files_dir.mkdir()
        try:
            local = download_source(mv, files_dir, tracking_uri)
        except Exception as exc:  # missing or unreadable artifact store: reported, never a pass
            local = None
            check.byte_problems.append(f"cannot download the version's files from {mv.source} ({type(exc).__name__}: {exc})")
        if local is not None and stmt is not None:
            want = {s["name"]: s.get("digest", {}).get("sha256") for s in stmt.get("subject", [])}
            kept_marker = None if MLFLOW_LOAD_MARKER in want else drop_mlflow_load_marker(local, mv)
            have = subject_digests(local)
            check.files = len(have)
            check.byte_problems += [f"missing {rel}" for rel in sorted(set(want) - set(have))]
            check.byte_problems += [f"unexpected file {rel}" + (f" ({kept_marker})" if rel == MLFLOW_LOAD_MARKER and kept_marker
                                                                else "") for rel in sorted(set(have) - set(want))]
            check.byte_problems += [f"{rel}: sha256 {have[rel][:16]}… != signed {str(want[rel])[:16]}…"
                                    for rel in sorted(set(want) & set(have)) if have[rel] != want[rel]]
            bundle = _download(mv.run_id, bundle_rel, tmp_path / "bundle", tracking_uri)
            if bundle is None:
                check.byte_problems.append(f"model-signing bundle {bundle_rel} not found")
            elif not check.byte_problems:
                try:
                    verify_folder(local, bundle, trust, trust_version_of(stmt))
                except SignatureInvalid as exc:
                    check.byte_problems.append(str(exc))
        if stmt is not None:
            signed_tags = byproduct(stmt, TAGS_BYPRODUCT)
            for key, value in sorted(signed_tags.items()):
                now = mv.tags.get(key)
                if now is None:
                    check.tampering.append(f"tag {key} was deleted (signed value {_clip(value)})")
                    check.tag_changes[key] = str(value)
                elif now != value:
                    check.tampering.append(f"tag {key}={_clip(now)} but the signed statement says {_clip(value)}")
                    check.tag_changes[key] = str(value)
            _check_card(check, stmt, mv, tmp_path, tracking_uri)
            _check_custody_links(check, stmt, mv, tmp_path, tracking_uri, trust)
            check.statement = stmt
            if not check.byte_problems:
                check.evidence = byproduct(stmt, EVIDENCE_BYPRODUCT)
            elif check.unsigned_reason is None:
                check.unsigned_reason = "stored files do not match the signed digests: " + "; ".join(check.byte_problems)
        elif check.unsigned_reason is None:
            check.unsigned_reason = "no valid signed evidence"
        check.gates = evaluate_gates(gates, check.evidence, unsigned_reason=check.unsigned_reason)
        if (bool(gates) if gated is None else gated) and stmt is not None and check.evidence is not None:
            check.gates += signed_table_checks(stmt, gates, check.evidence)
        if download_to is not None and local is not None and check.evidence is not None:
            download_to.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(local), str(download_to))
    return check


def _check_card(check: VersionCheck, stmt: dict[str, Any], mv: Any, tmp: Path, tracking_uri: str) -> None:
    """The card artifact and the version's description against the signed card digests."""
    signed = byproduct(stmt, CARD_BYPRODUCT)
    if not signed:
        return  # registered before cards were signed: there is no signed card to print or compare
    artifact = str(signed.get("artifact", ""))
    card_file = _download(mv.run_id, artifact, tmp / "card", tracking_uri) if artifact and mv.run_id else None
    if card_file is None or not card_file.is_file():
        check.tampering.append(f"card artifact {artifact!r} not found in the version's run")
    else:
        text = card_file.read_text(encoding="utf-8")
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != signed.get("sha256"):
            check.tampering.append(f"card artifact {artifact} is not the signed card (sha256 differs)")
        else:
            check.card = text
    description = mv.description or ""
    if hashlib.sha256(description.encode("utf-8")).hexdigest() != signed.get("description_sha256"):
        check.tampering.append("the version's description (the card the MLflow UI shows) is not the signed card")
        if check.card is not None:
            rebuilt = fit_description(for_ui(check.card), f"{artifact} of run {mv.run_id}")
            if hashlib.sha256(rebuilt.encode("utf-8")).hexdigest() == signed.get("description_sha256"):
                check.description_restore = rebuilt


def _check_custody_links(check: VersionCheck, stmt: dict[str, Any], mv: Any, tmp: Path, tracking_uri: str,
                         trust: Trust) -> None:
    """The in-toto links the registration verified, re-checked now: each stored beside the statement
    (``custody/`` in the version's run) with the sha256 the statement names, and still signed by a key
    of its role under the trust version it names."""
    import json as _json

    from reappreg.custody.links import CustodyError, verify_link
    from reappreg.trust import trust_version_of

    named = [m for m in stmt.get("predicate", {}).get("buildDefinition", {}).get("resolvedDependencies", [])
             if (m.get("annotations") or {}).get("role") == "custody_link"]
    signed_under = trust_version_of(stmt)
    origin = signed_under.origin if signed_under is not None else None
    for item in named:
        rel = str(item.get("name", ""))
        stored = _download(mv.run_id, f"custody/{Path(rel).name}", tmp / "custody", tracking_uri) if mv.run_id else None
        if stored is None or not stored.is_file():
            check.tampering.append(f"custody link {rel} the statement names is not in the version's run")
            continue
        data = stored.read_bytes()
        if hashlib.sha256(data).hexdigest() != item.get("digest", {}).get("sha256"):
            check.tampering.append(f"custody link {rel} in the store is not the one the statement names (sha256 differs)")
            continue
        try:
            from in_toto.models.metadata import Metadata

            envelope = Metadata.from_dict(_json.loads(data))
            payload = _json.loads(envelope.payload)
            # the chain is the statement's: links are verified under the root it was signed under
            verify_link(trust, envelope, payload, str(payload.get("name")), origin)
        except (CustodyError, ValueError, KeyError) as exc:
            check.tampering.append(f"custody link {rel}: {exc}")


def has_signed_statement(mv: Any, trust: Trust, *, tracking_uri: str) -> bool:
    """Whether ``mv`` carries a provenance envelope a trusted key signed for exactly this version (its
    files are not looked at): such a version is never deleted by registration."""
    if not mv.run_id:
        return False
    with tempfile.TemporaryDirectory(prefix="reappreg-signed-") as tmp:
        envelope_file = _download(mv.run_id, attestation_paths(mv.name, str(mv.version))[0], Path(tmp), tracking_uri)
        if envelope_file is None or not envelope_file.is_file():
            return False
        try:
            stmt, _ = trust.open(envelope_file.read_bytes(), role="registration")
        except SignatureInvalid:
            return False
    return _statement_mismatch(stmt, mv) is None


def registration_squat(mv: Any, registration_key_: str, trust: Trust, *, tracking_uri: str) -> str | None:
    """Why an existing version that carries ``registration_key_`` is NOT the signed result of
    that registration, or None when it is: a trusted key signed its statement, the statement
    names this version and this registration key, its files match the signed digests and no
    signed tag was changed. Anyone with MLflow write access can create a version with the
    key's tag and ``status=complete``; only this check lets ``register`` call it unchanged."""
    check = verify_version(mv, [], trust, tracking_uri=tracking_uri)
    problems = []
    if check.unsigned_reason:
        problems.append(check.unsigned_reason)
    problems += check.tampering + [p for p in check.byte_problems if p not in (check.unsigned_reason or "")]
    if check.statement is not None:
        params = check.statement.get("predicate", {}).get("buildDefinition", {}).get("externalParameters", {})
        if params.get("registration_key") != registration_key_:
            problems.append(f"its signed statement names registration key {params.get('registration_key')!r}, "
                            f"not {registration_key_!r}")
    return "; ".join(problems) or None


def signed_table_checks(stmt: dict[str, Any], gates: list[Gate], evidence: dict[str, Any]) -> list[GateCheck]:
    """The gates the version was judged under at registration (signed in its statement),
    checked again wherever today's ``registry/models.yaml`` removed or changed one: a gate
    deleted or loosened in git does not let a version pass what it was signed to need. A
    signed table that cannot be read is itself a failure."""
    raw = stmt.get("predicate", {}).get("buildDefinition", {}).get("externalParameters", {}).get("gates")
    if not isinstance(raw, list):
        return [GateCheck("signed_gate_table", False, "the signed statement records no gate table to compare with")]
    try:
        signed = [Gate.model_validate(g) for g in raw]
    except Exception as exc:  # pydantic's ValidationError: a table this code cannot read
        return [GateCheck("signed_gate_table", False, f"the signed gate table does not parse: {exc}")]
    now = {g.name: g for g in gates}
    checks = []
    for gate in signed:
        if now.get(gate.name) == gate:
            continue
        result = check_gate(gate, evidence)
        change = "removed from" if gate.name not in now else "changed in"
        checks.append(GateCheck(f"{gate.name}@registration", result.passed,
                                f"{result.detail} (as signed; {change} registry/models.yaml since, and the signed gate "
                                "still applies)"))
    return checks


def _clip(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def is_gated(decl: RegistryDecl, name: str, alias: str | None) -> bool:
    """A declared model's alias other than the ungated ones (``candidate``): gates apply."""
    return name in decl.models and not (alias is not None and alias in decl.ungated_aliases)


def gates_for(decl: RegistryDecl, name: str, alias: str | None) -> list[Gate]:
    """The gates an alias needs: none (besides signed evidence) for ungated aliases or undeclared models."""
    if name not in decl.models or (alias is not None and alias in decl.ungated_aliases):
        return []
    return list(decl.models[name].gates)


def get_version(client: Any, name: str, version: str | None = None, alias: str | None = None) -> Any:
    """A model version by number or alias; a missing model, version or alias is one clear line."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException as exc:
        raise NotFound(f"no registered model '{name}'") from exc
    try:
        return client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, version)
    except MlflowException as exc:
        what = f"alias '{alias}'" if alias else f"version {version}"
        raise NotFound(f"registered model '{name}' has no {what}") from exc
