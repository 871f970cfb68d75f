"""Registration: preconditions (guard certificate, metrics describe the artifact), then one signed MLflow Model version.

A version is identified by its *registration key*: the md5 of the artifact folder's DVC
hash plus the DVC hashes of its training inputs. Registering an unchanged key adds no
version. Otherwise the artifact folder is packaged as an MLflow Model (the RM ensemble as
a scoring pyfunc, the policy as a generating pyfunc), that folder is signed with
model-signing, uploaded, and registered; then an in-toto/SLSA statement naming the new
version, its files' sha256, every input and the evidence is signed (DSSE) and stored
beside it as ``<name>/attestations/v<version>.provenance.dsse.json`` in the registration
run, its sha256 in the tag ``reappreg.provenance_sha256``.

Concurrency and failure. Registration runs under a file lock and re-checks the existing
versions' keys after taking it, so two runs on one host create exactly one version. A run
on another host is caught after the fact: once its version exists, a registration looks at
every version with the same key and the lowest number wins (the loser deletes its own).
A version is created with ``reappreg.status=registering`` and marked ``complete`` once it is
signed and its alias set; that tag is for people only. What registration decides on is the
signature: an existing version with this key that is the signed registration of these bytes
is "unchanged"; one with a valid signed statement of anything else is refused by name and
never deleted; only an unsigned leftover older than ``stale_registration_s`` (by the store's
clock) is deleted. Nothing signed is ever deleted, whatever its tags say.

The card is signed too: the statement records the sha256 of the card artifact
(``<name>/README.md`` in the registration run) and of the version's description (the card as
the UI shows it), so ``pull`` prints only the signed card and a description rewritten in the
store is tampering.
"""

from __future__ import annotations

import datetime as dt

import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.errors import GateFailed, InputError
from reappreg.hashing import dir_entries
from reappreg.registry.connection import RegistryUnavailable, short
from reappreg.evidence.declarations import ModelDecl
from reappreg.registry.history import Chain, ChainRace, append, retract_entry, settle
from reappreg.trust.keys import SigningKey, sign_folder, sign_statement
from reappreg.registry.layout import ENVELOPE_TAG, MAX_DESCRIPTION, attestation_paths, fit_description, for_ui, subject_digests
from reappreg.registry.provenance import AttestedVersion

if TYPE_CHECKING:
    from reappreg.settings.registry import RegistrySettings

STATUS_TAG = "reappreg.status"
KEY_TAG = "reappreg.registration_key"
CONTENT_TAG = "reappreg.content_md5"
MANIFEST_TAG = "reappreg.manifest"
KEYID_TAG = "reappreg.signing_keyid"
GATE_TAG_PREFIX = "gate."
# Every policy version (kept checkpoints and the final model) names its GRPO step, the MLflow run
# of the training stage and its row of the results table (metrics/results.json rows[*].row_id).
CHECKPOINT_STEP_TAG = "reappreg.checkpoint_step"
FINAL_STEP_TAG = "reappreg.final_step"
TRAINING_RUN_TAG = "reappreg.training_run_id"
RESULTS_ROW_TAG = "reappreg.results_row"
# MLflow's limit on a model-version tag value; the manifest must fit in one tag.
MAX_TAG_VALUE = 100_000


def model_folder_path(name: str) -> str:
    return f"{name}/model"


# --------------------------------------------------------------------------- preconditions

def require_passed(cert: Any, *, model: str) -> None:
    """Refuse a failed guard certificate (``cert`` is a ``reappreg.card.build.Certificate``)."""
    if not cert.passed:
        raise GateFailed(f"{model}: guard certificate {cert.path} did not pass (result: {cert.result!r}); refusing to register")


def check_metrics_describe(model: ModelDecl, metrics: Mapping[str, Any], artifact_md5: str, *, name: str) -> None:
    """Refuse an artifact whose training metrics were computed on another folder."""
    if model.artifact_md5_metric is None:
        return
    recorded = metrics.get(model.artifact_md5_metric)
    if recorded is None:
        raise GateFailed(f"{name}: training metrics have no '{model.artifact_md5_metric}' naming the artifact they describe")
    if recorded != artifact_md5:
        raise GateFailed(f"{name}: {model.artifact} has md5 {artifact_md5} but its training metrics describe {recorded} "
                         f"('{model.artifact_md5_metric}'); rerun the training stage or restore the artifact")


def check_certificate(cert: Any, inputs: Mapping[str, str], *, model: str) -> None:
    """Refuse unless the certificate passed and certifies every training input's current hash.

    ``cert`` is a ``reappreg.card.build.Certificate``; ``inputs`` maps each training input path
    to its md5 as hashed now.
    """
    require_passed(cert, model=model)
    problems = []
    for path, md5 in inputs.items():
        want = cert.certified.get(path)
        if path in cert.heldout:
            problems.append(f"{path} is the held-out set, never a training input")
        elif want is None:
            problems.append(f"{path} is not covered by the certificate")
        elif want != md5:
            problems.append(f"{path} has md5 {md5} but the certificate records {want}")
    if problems:
        raise GateFailed(f"{model}: training inputs do not match the guard certificate {cert.path}: " + "; ".join(problems)
                         + "; refusing to register")


def check_checkpoint_describes(checkpoint: Mapping[str, Any], artifact_md5: str, *, name: str) -> None:
    """Refuse a kept checkpoint folder whose md5 is not the one its training metrics recorded."""
    if checkpoint["model_md5"] != artifact_md5:
        raise GateFailed(f"{name}: {checkpoint['folder']} has md5 {artifact_md5} but the training metrics recorded "
                         f"{checkpoint['model_md5']} for step {checkpoint['step']}; rerun the training stage or restore it")


def version_tags(checkpoint: Mapping[str, Any] | None, *, final_step: Any, training_run_id: Any,
                 results_rows: list[Mapping[str, Any]]) -> dict[str, str]:
    """Tags naming which step of which training run a policy version is, and its results rows.

    ``checkpoint`` is a kept checkpoint (``reappreg.card.build.kept_checkpoints``) or None for the final model.
    """
    step = checkpoint["step"] if checkpoint is not None else final_step
    return {CHECKPOINT_STEP_TAG: str(step), FINAL_STEP_TAG: str(final_step),
            TRAINING_RUN_TAG: str(training_run_id), RESULTS_ROW_TAG: ", ".join(r["row_id"] for r in results_rows) or "none"}


def checkpoint_evidence(flat: Mapping[str, Any], rows: list[Mapping[str, Any]], *, checkpoint: Mapping[str, Any],
                        bar_opponent: str, selected: Any) -> dict[str, Any]:
    """The signed evidence of a kept checkpoint's version: the run's evidence, with the bar evidence
    (``eval.bar.*``, which eval.json holds for the final model) replaced by the checkpoint's own
    results row against the bar opponent, and ``results.selection.promotable`` true only when this
    checkpoint is the selected, fresh-pool-confirmed candidate. No row: the bar keys are null, so
    the bar gates fail rather than read the final model's numbers.
    """
    out = {k: v for k, v in flat.items() if not k.startswith("eval.bar.")}
    row = next((r for r in rows if r.get("opponent") == bar_opponent and r.get("pool") == "policy"
                and r.get("status") == "evaluated"), None)
    get = (lambda key: row.get(key)) if row is not None else (lambda key: None)
    out.update({"eval.bar.reference": bar_opponent, "eval.bar.threshold": get("bar"), "eval.bar.n": get("n"),
                "eval.bar.win_rate": get("win_rate"), "eval.bar.iid_low": get("iid_screening_low"),
                "eval.bar.cluster_low": get("cluster_low"), "eval.bar.n_eff": get("n_eff"),
                "eval.bar.claim.status": get("bar_status"), "eval.bar.claim.supported": get("bar_supported"),
                "eval.bar.row_id": get("row_id")})
    out["results.selection.promotable"] = bool(flat.get("results.selection.promotable")) and \
        selected == checkpoint["condition"]
    out["checkpoint.step"] = checkpoint["step"]
    out["checkpoint.condition"] = checkpoint["condition"]
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------- packaging


def package_model(kind: str, artifact_dir: Path, dest: Path) -> Path:
    """The artifact folder as an MLflow Model at ``dest``: the RM ensemble scores, the policy generates."""
    if kind == "reward-model":
        from reappreg.rm.pyfunc import save_pyfunc
    else:
        from reappreg.policy.pyfunc import save_pyfunc
    return save_pyfunc(artifact_dir, dest)


# --------------------------------------------------------------------------- registration

def manifest_of(folder: str | os.PathLike) -> list[dict[str, str]]:
    """Per-file (relpath, md5) entries of an artifact folder: hashed once, reused for its DVC hash."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: model artifact folder not found")
    entries = dir_entries(folder)
    if not entries:
        raise InputError(f"{folder}: model artifact folder is empty")
    return entries


def folder_md5(entries: list[dict[str, str]]) -> str:
    """The DVC ``.dir`` hash from already computed entries (same serialisation as reappreg.hashing.dvc_md5),
    so a multi-gigabyte checkpoint is read once, not once per hash."""
    listing = json.dumps(sorted(entries, key=lambda e: e["relpath"]), sort_keys=True).encode("utf-8")
    return hashlib.md5(listing).hexdigest() + ".dir"


def registration_key(content_md5: str, training_md5s: Mapping[str, str]) -> str:
    payload = json.dumps({"artifact": content_md5, "training_inputs": dict(sorted(training_md5s.items()))}, sort_keys=True)
    return hashlib.md5(payload.encode("utf-8")).hexdigest()


@dataclass
class Registration:
    name: str
    version: str
    created: bool
    content_md5: str
    key: str
    note: str = ""
    keyid: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "created": self.created, "content_md5": self.content_md5,
                "registration_key": self.key, "note": self.note, "signing_keyid": self.keyid}


def _versions_with_key(client: Any, name: str, key: str) -> list[Any]:
    found = client.search_model_versions(f"name='{name}' and tags.`{KEY_TAG}` = '{key}'")
    return sorted(found, key=lambda v: int(v.version))


def _is_old(version: Any, stale_after_s: float, now_ms: float) -> bool:
    """Older than the lease by the store's clock (the version's creation time, not a tag)."""
    return now_ms - version.creation_timestamp > stale_after_s * 1000


def _ensure_model(client: Any, name: str, description: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        try:
            client.create_registered_model(name, description=description, tags={"reappreg.kind": "declared"})
        except MlflowException as exc2:  # created concurrently by another registration: fine
            if exc2.error_code != "RESOURCE_ALREADY_EXISTS":
                raise


# the version just created -> the in-toto statement to sign
Attest = Callable[[AttestedVersion], dict[str, Any]]


@dataclass(frozen=True)
class VersionContent:
    """The folder a version is made of and what the version records about it: ``manifest`` is
    :func:`manifest_of` the folder (hashed once: its DVC hash, its manifest tag), ``training_md5s``
    the training inputs' DVC md5s (with the folder's hash, the registration key), ``tags`` the
    readable tags and ``card`` the card (the version's description). One object because the
    registration plan computes them together for one folder, and all of them must describe it."""

    artifact_dir: str | os.PathLike
    manifest: list[dict[str, str]]
    training_md5s: Mapping[str, str]
    tags: Mapping[str, str]
    card: str
    # Where the card is logged in the registration run (``<name>/README.md``): the statement names it.
    card_artifact: str = ""


def _now_ms() -> float:
    return time.time() * 1000


@dataclass(frozen=True)
class RegistrationHooks:
    """What registration leaves to its caller: the I/O of the run it registers from and the
    statement only the caller can write, plus the packaging and the clock, which tests replace
    to stage a race, a stale leftover or a failure.

    ``log_artifacts(folder, artifact_path)`` uploads a folder into the registration run and
    returns its artifact URI. ``attest(attested)`` builds the statement from the
    :class:`AttestedVersion` once the version number is known.
    ``squat(version, registration_key)`` says why an existing version with this key is not the
    signed result of this registration (None when it is;
    ``reappreg.registry.verification.registration_squat``); ``signed(version)`` whether it carries
    any statement a trusted key signed for it (such a version is never deleted). ``package`` makes the MLflow Model
    folder; ``now_ms`` is the clock stale registrations are judged by."""

    log_artifacts: Callable[[Path, str], str]
    attest: Attest
    squat: Callable[[Any, str], str | None]
    signed: Callable[[Any], bool]
    package: Callable[[str, Path, Path], Path] = package_model
    now_ms: Callable[[], float] = _now_ms


def register_version(client: Any, *, name: str, model: ModelDecl, content: VersionContent, keys: list[SigningKey],
                     hooks: RegistrationHooks, settings: RegistrySettings, chain: Chain) -> Registration:
    """Register ``content.artifact_dir`` as a new, signed MLflow Model version of ``name`` unless its key already exists.

    The statement ``hooks.attest`` builds names the trust version under which ``keys`` hold the
    ``registration`` role, and is signed with them (the folder with the first). The new version gets the alias
    ``settings.candidate_alias`` through an entry appended to the model's signed history
    (``chain``: refused when that history does not verify). An existing version with this key
    is "unchanged" only when ``hooks.squat`` finds it is the signed registration of these bytes;
    one signed for anything else is refused by name; an unsigned one older than
    ``settings.stale_registration_s`` is deleted. Call this while holding :func:`registration_lock`.
    """
    candidate_alias, stale_after_s = settings.candidate_alias, settings.stale_registration_s
    content_md5 = folder_md5(content.manifest)
    reg_key = registration_key(content_md5, content.training_md5s)
    manifest_json = json.dumps([[e["relpath"], e["md5"]] for e in content.manifest], separators=(",", ":"))
    if len(manifest_json) > MAX_TAG_VALUE:
        raise InputError(f"{content.artifact_dir}: {len(content.manifest)} files give a manifest too long for one registry tag; "
                         "pack the folder")

    key = keys[0]
    trust_version = chain.trust.current_for([k.keyid for k in keys], "registration")  # before anything is written
    _ensure_model(client, name, model_description(model))
    unsigned = []
    for version in _versions_with_key(client, name, reg_key):
        reason = hooks.squat(version, reg_key)
        if reason is None:  # the signed registration of exactly these bytes
            return Registration(name, str(version.version), False, content_md5, reg_key, "unchanged: same registration key",
                                version.tags.get(KEYID_TAG, ""))
        if hooks.signed(version):
            raise InputError(
                f"{name} version {version.version} carries registration key {reg_key[:16]}… and a statement a trusted key "
                f"signed, but it is not a signed registration of these bytes: {reason}. Registration refuses to call it "
                "unchanged, to delete it or to register beside it; find out who changed it (`reappreg registry verify`)"
            )
        unsigned.append((version, reason))
    for version, reason in unsigned:
        if _is_old(version, stale_after_s, hooks.now_ms()):
            # Unsigned and older than the lease: a registration that died before signing (or a squatter).
            client.delete_model_version(name, version.version)
            continue
        # Unsigned and fresh: another host's registration still in flight, or a version pre-created with
        # the next key (it is a tag, computable from public md5s). Neither is "unchanged"; registering
        # beside it would let a squatter win the lowest-number race.
        raise InputError(
            f"{name} version {version.version} carries registration key {reg_key[:16]}… but it is not a signed "
            f"registration of these bytes: {reason}. Another registration may still be in flight "
            f"(re-run once it completes), or the version was planted: registration refuses to call it unchanged or to "
            f"register beside it. An unsigned version is deleted once older than registry.stale_registration_s "
            f"({stale_after_s:g} s by the store's clock), or delete it now after finding out who made it"
        )

    with tempfile.TemporaryDirectory(prefix="reappreg-register-") as tmp:
        folder = hooks.package(model.kind, Path(content.artifact_dir), Path(tmp) / "model")
        subjects = subject_digests(folder)
        signatures = Path(tmp) / "attestations"
        signatures.mkdir()
        sign_folder(folder, signatures / "model.sig.json", key)
        source = hooks.log_artifacts(folder, model_folder_path(name))
        hooks.log_artifacts(signatures, f"{name}/attestations")
    readable = {
        **{k: str(v) for k, v in content.tags.items()},
        CONTENT_TAG: content_md5,
        KEY_TAG: reg_key,
        MANIFEST_TAG: manifest_json,
        KEYID_TAG: key.keyid,
    }
    run_id = _run_id_of(source)
    if run_id is None:
        raise InputError(f"{source}: the model was not logged into an MLflow run; cannot store its attestations")
    description = fit_description(for_ui(content.card), f"{name}/README.md of run {run_id}")
    mv = client.create_model_version(name, source=source, run_id=run_id, tags={**readable, STATUS_TAG: "registering"},
                                     description=description)
    card = {"artifact": content.card_artifact, "sha256": hashlib.sha256(content.card.encode("utf-8")).hexdigest(),
            "description_sha256": hashlib.sha256(description.encode("utf-8")).hexdigest()}
    version = str(mv.version)
    history_tag = None
    try:
        # Cross-host race: every registration that created a version with this key sees
        # the same set; the lowest number wins and the others delete themselves.
        rivals = [v for v in _versions_with_key(client, name, reg_key) if not _is_old(v, stale_after_s, hooks.now_ms())]
        winner = min(rivals, key=lambda v: int(v.version)) if rivals else mv
        if int(winner.version) < int(version):
            client.delete_model_version(name, version)
            return Registration(name, str(winner.version), False, content_md5, reg_key,
                                f"duplicate of concurrent version {winner.version}; removed {version}", key.keyid)
        attested = AttestedVersion(name=name, version=version, run_id=run_id, source=source, subjects=subjects, tags=readable,
                                   card=card, trust=trust_version.as_dict())
        envelope = sign_statement(hooks.attest(attested), keys)
        client.log_text(run_id, envelope.decode("utf-8"), attestation_paths(name, version)[0])
        client.set_model_version_tag(name, version, ENVELOPE_TAG, hashlib.sha256(envelope).hexdigest())
        # The alias state is the signed history (registry.audit): a registration's alias
        # move is an entry like any promotion's.
        from reappreg.registry.promotion import current_target

        for attempt in range(5):
            # A promotion may take the next entry number first: read the alias again and take the one after.
            previous = current_target(client, name, candidate_alias)
            try:
                history_tag = append(client, name, {
                    "kind": "register", "alias": candidate_alias, "from": previous, "to": version, "by": key.keyid[:16],
                    "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "reason": f"registered with key {reg_key[:16]}", "forced": False, "gates": [], "tampering": [],
                    "signed_by_registration": key.keyid}, keys, chain)
                break
            except ChainRace:
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        client.set_registered_model_alias(name, candidate_alias, version)
        client.set_model_version_tag(name, version, STATUS_TAG, "complete")
        settle(client, name, chain)
    except BaseException as exc:
        if history_tag is not None:  # no signed record of an alias move that did not happen
            retract_entry(client, name, history_tag)
        _rollback(client, name, version, exc)
        raise
    return Registration(name, version, True, content_md5, reg_key, f"new version, signed by key {key.keyid[:16]}; alias '{candidate_alias}'",
                        key.keyid)


def model_description(model: ModelDecl) -> str:
    return " ".join(model.description.split())


_RUN_ID = re.compile(r"/([0-9a-f]{32})/artifacts/")


def _run_id_of(source: str) -> str | None:
    match = _RUN_ID.search(source)
    return match.group(1) if match else None


def _rollback(client: Any, name: str, version: str, cause: BaseException) -> None:
    try:
        client.delete_model_version(name, version)
    except Exception as exc:
        raise RegistryUnavailable(
            f"{name} version {version} was created but could not be completed ({short(cause if isinstance(cause, Exception) else None)}) "
            f"nor rolled back ({short(exc)}); it stays tagged {STATUS_TAG}=registering and has no signed provenance, so it fails "
            "every gate, and the next registration deletes it once stale"
        ) from cause
