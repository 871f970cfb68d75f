"""The model registry on MLflow: registration with provenance, gated promotion, alias audit, verified pulls.

Declarations. ``registry/models.yaml`` names every registered model (the RM ensemble and
the GRPO policy), the folder that is its artifact, the training inputs that must match a
passing guard certificate, the card front matter, and the promotion gates. Aliases listed
under ``ungated_aliases`` (``candidate``) carry no gates; every other alias -- ``champion``
or one typed into the MLflow UI -- must point at a version that passes the model's gates.

Versions. A version is identified by its *registration key*: the md5 of the artifact
folder's DVC hash plus the DVC hashes of its training inputs. Registering an unchanged key
adds no version. Each version carries tags (git commit, ``md5.<path>`` of every input,
guard certificate hash and result, eval summary, judge trust, training health), the
per-file hash manifest of the artifact, and the model card as its description. Gates are
evaluated from those tags, so ``verify`` needs nothing but the registry.

Concurrency and failure. Registration runs under a file lock and re-checks the existing
versions' keys after taking it, so two runs on one host create exactly one version. A run
on another host is caught after the fact: once its version exists, a registration looks at
every version with the same key and the lowest number wins (the loser deletes its own).
A version is created with ``reappreg.status=registering`` and marked ``complete`` only
after its alias is set; anything else is treated as not registered (rolled back when
possible, ignored by pull/promote, cleaned up by the next registration once stale).
A tracking server that does not answer is retried a bounded number of times, then the
command fails with :class:`RegistryUnavailable` before anything is written.

Watching. The installed MLflow (3.17) has registry webhooks (``MlflowClient.create_webhook``,
event ``model_version_alias.created``), delivered by ``mlflow server`` only and signed with
HMAC-SHA256. :func:`watch_webhook` registers one, receives the events on a local HTTP
listener, checks each signature and each new alias, and deletes its webhook when done. The
server's SSRF policy accepts only public https URLs unless it runs with
``MLFLOW_WEBHOOK_ALLOWED_SCHEMES=http,https`` and ``MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS=true``,
and it caches each event's webhook list for ``MLFLOW_WEBHOOK_CACHE_TTL`` seconds (60), so a
new webhook may miss events in its first minute; the watcher runs one full check after
subscribing to cover that gap. A sqlite store has no server to send
webhooks, so :func:`watch_poll` re-runs :func:`verify_aliases` at a bounded interval, a
bounded number of times.

Pulling. :func:`pull` downloads exactly one version's artifact into a temporary folder
beside the target, checks every file against the manifest tag (same file set, same md5s,
same folder hash), and only then moves it into place; on any mismatch the partial
download is deleted and :class:`IntegrityError` names the files. This is the way to get a
model without the pipeline; the DVC side (data, intermediate artifacts) moves with
``dvc push`` / ``dvc pull`` to and from the configured DVC remote.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reappreg.errors import GateFailed, InputError, ReappregError
from reappreg.hashing import dir_entries, dvc_md5

STATUS_TAG = "reappreg.status"
KEY_TAG = "reappreg.registration_key"
CONTENT_TAG = "reappreg.content_md5"
MANIFEST_TAG = "reappreg.manifest"
# MLflow's limit on a model-version tag value; the manifest must fit in one tag.
MAX_TAG_VALUE = 100_000
# MLflow's SQL schema stores a version description in VARCHAR(5000) (enforced by
# PostgreSQL/MySQL, not by sqlite), so the card is cut at a section boundary to fit.
MAX_DESCRIPTION = 5000


class RegistryUnavailable(ReappregError):
    """The MLflow tracking/registry server did not answer within the bounded retries."""


class IntegrityError(ReappregError):
    """A downloaded artifact does not match the hashes recorded at registration."""


# --------------------------------------------------------------------------- declarations


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GateSpec(_Strict):
    """Promotion gates; each is checked against the version's tags."""

    guard_pass: bool = False
    judge_trusted: bool = False
    min_n: int | None = Field(None, ge=1)
    cluster_ci_low_above_bar: bool = False
    healthy_training: bool = False


class FrontMatter(_Strict):
    license: str
    language: list[str]
    pipeline_tag: str
    library_name: str
    tags: list[str] = []


class ModelDecl(_Strict):
    kind: str = Field(pattern="^(reward-model|policy)$")
    description: str
    artifact: str
    # Text the model was trained on: each must be hashed in a passing guard certificate.
    training_inputs: list[str] = Field(min_length=1)
    # Other inputs recorded as provenance (ratings, the RM a policy was trained against).
    other_inputs: list[str] = []
    card: FrontMatter
    # Card facts: the params key naming the base model, the method in words, the
    # registered RM a policy was trained against, the params shown as hyperparameters
    # (dotted prefixes) and the metrics shown (fnmatch patterns on "<file stem>.<key>").
    base_model_param: str
    method: str
    # Flattened metrics key ("<file stem>.<key>") holding the md5 of the artifact the
    # model's training metrics were computed on (checked at registration).
    artifact_md5_metric: str | None = None
    reward_model: str | None = None
    hyperparameters: list[str] = []
    card_metrics: list[str] = ["*"]
    gates: GateSpec = GateSpec()


class RegistryDecl(_Strict):
    ungated_aliases: list[str] = ["candidate"]
    models: dict[str, ModelDecl] = Field(min_length=1)
    # Hub names of models shipped inside Python packages (``pkg:...`` params values).
    known_models: dict[str, str] = {}


def load_declarations(path: str | os.PathLike) -> RegistryDecl:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: registry declarations not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {exc}") from exc
    try:
        decl = RegistryDecl.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"'{'.'.join(str(p) for p in e['loc'])}': {e['msg']}" for e in exc.errors())
        raise InputError(f"{path}: invalid registry declarations: {problems}") from exc
    for name in decl.models:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise InputError(f"{path}: model name '{name}' may only use letters, digits, '.', '_' and '-'")
        rm = decl.models[name].reward_model
        if rm is not None and rm not in decl.models:
            raise InputError(f"{path}: models.{name}.reward_model '{rm}' is not a declared model")
    return decl


def declared(decl: RegistryDecl, name: str) -> ModelDecl:
    if name not in decl.models:
        raise InputError(f"model '{name}' is not declared in the registry (declared: {', '.join(sorted(decl.models))})")
    return decl.models[name]


def parse_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``NAME@ALIAS`` -> (name, None, alias); ``NAME/VERSION`` -> (name, version, None)."""
    if "@" in spec:
        name, alias = spec.split("@", 1)
        if name and alias:
            return name, None, alias
    elif "/" in spec:
        name, version = spec.rsplit("/", 1)
        if name and version.isdigit():
            return name, version, None
    raise InputError(f"'{spec}': expected NAME@ALIAS or NAME/VERSION (e.g. reappraisal-policy-grpo@champion)")


# --------------------------------------------------------------------------- guard certificate


def require_passed(cert: Any, *, model: str) -> None:
    """Refuse a failed guard certificate (``cert`` is a ``reappreg.card.Certificate``)."""
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

    ``cert`` is a ``reappreg.card.Certificate``; ``inputs`` maps each training input path
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


# --------------------------------------------------------------------------- connection


@contextlib.contextmanager
def bounded_http(retries: int, timeout_s: int) -> Iterator[None]:
    """Cap MLflow's own per-request retries/timeout (its defaults retry for minutes)."""
    keys = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries),
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_s),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    }
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def connect(uri: str, *, attempts: int, backoff_s: float, sleep: Callable[[float], None] = time.sleep) -> Any:
    """An ``MlflowClient`` for ``uri`` that has answered a request.

    Tries ``attempts`` times with exponential backoff; then raises RegistryUnavailable,
    before the caller has written anything.
    """
    from mlflow import MlflowClient

    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    last: Exception | None = None
    for attempt in range(attempts):
        try:
            client.search_registered_models(max_results=1)
            return client
        except Exception as exc:  # any transport/server error counts as "not answering"
            last = exc
            if attempt + 1 < attempts:
                sleep(backoff_s * (2**attempt))
    raise RegistryUnavailable(
        f"MLflow registry at {uri} did not answer after {attempts} attempt(s): {_short(last)}. "
        "Nothing was registered; start the server (or fix MLFLOW_TRACKING_URI) and rerun."
    )


def _short(exc: Exception | None) -> str:
    text = f"{type(exc).__name__}: {exc}" if exc else "no error"
    return text if len(text) < 300 else text[:300] + "..."


@contextlib.contextmanager
def registration_lock(lock_file: str | os.PathLike, timeout_s: float) -> Iterator[None]:
    """Serialise registrations on this host (a re-check inside makes the second a no-op)."""
    from filelock import FileLock, Timeout

    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout as exc:
        raise RegistryUnavailable(f"{lock_file}: another registration held the lock for more than {timeout_s:g}s") from exc
    try:
        yield
    finally:
        lock.release()


# --------------------------------------------------------------------------- provenance


def _tag_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def provenance_tags(
    model: ModelDecl,
    evidence: Any,
    *,
    input_md5s: Mapping[str, str],
    git: Mapping[str, str],
) -> dict[str, str]:
    """Version tags: git state, md5 of every input, guard certificate, eval summary, judge trust, health.

    ``evidence`` is a ``reappreg.card.Evidence``; ``input_md5s`` maps each declared
    input path (training and other inputs, the artifact itself excluded) to its DVC md5.
    """
    tags: dict[str, str] = {"git.commit": git.get("git.commit", "none"), "git.dirty": git.get("git.dirty", "unknown"),
                            "model.kind": model.kind}
    for path, md5 in sorted(input_md5s.items()):
        tags[f"md5.{path}"] = md5
    for path in sorted(str(p) for p in evidence.sources.values()):
        tags[f"md5.{path}"] = dvc_md5(path)
    cert = evidence.certificate
    tags["guard.result"] = cert.result
    tags["guard.certificate_md5"] = cert.md5
    if model.kind == "policy":
        claim = evidence.bar_claim("policy")
        if claim is not None:
            prefix = f"policy/{claim['opponent']}"
            metrics = evidence.eval_metrics
            tags.update({
                "eval.reference": claim["opponent"],
                "eval.bar": _tag_value(claim.get("threshold")),
                "eval.bar_claim_status": claim["status"],
                "eval.n": _tag_value(metrics.get(f"{prefix}/n")),
                "eval.win_rate": _tag_value(metrics.get(f"{prefix}/win_rate")),
                "eval.iid_ci_low": _tag_value(metrics.get(f"{prefix}/iid_low")),
                "eval.cluster_ci_low": _tag_value(metrics.get(f"{prefix}/cluster_low")),
                "eval.n_eff": _tag_value(metrics.get(f"{prefix}/n_eff")),
            })
        summary = {f"{r['condition']}/{r['opponent']}": {k: r[k] for k in ("win_rate", "n", "cluster_low", "n_eff")}
                   for r in evidence.comparisons()}
        tags["eval.summary"] = json.dumps(summary, sort_keys=True, separators=(",", ":"))
        tags["eval.supported_claims"] = ", ".join(c["claim_id"] for c in evidence.claims if c.get("supported")) or "none"
        tags["judge.trusted"] = _tag_value(evidence.judge_trusted)
        tags["judge.model"] = _tag_value(evidence.judge_model)
        healthy = evidence.training_healthy
        tags["training.healthy"] = "unknown" if healthy is None else _tag_value(healthy)
    return tags


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


def for_ui(card: str) -> str:
    """The card as the MLflow UI renders it well: the YAML front matter as a fenced block.

    (A bare ``---`` front matter renders as rules and a stray heading in the UI's markdown.)
    """
    if card.startswith("---\n"):
        end = card.find("\n---\n", 4)
        if end > 0:
            return "```yaml\n" + card[4:end] + "\n```\n" + card[end + 5:]
    return card


def fit_description(card: str, full_card_at: str, limit: int = MAX_DESCRIPTION) -> str:
    """The card, cut at the last section heading that fits when it exceeds ``limit``."""
    if len(card) <= limit:
        return card
    note = f"\n\n_(Cut to the registry's {limit}-character description limit; the full card is the artifact `{full_card_at}`.)_\n"
    head = card[: limit - len(note)]
    cut = head.rfind("\n## ")
    return (head[:cut] if cut > 0 else head) + note


@dataclass
class Registration:
    name: str
    version: str
    created: bool
    content_md5: str
    key: str
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "created": self.created,
                "content_md5": self.content_md5, "registration_key": self.key, "note": self.note}


def _versions_with_key(client: Any, name: str, key: str) -> list[Any]:
    found = client.search_model_versions(f"name='{name}' and tags.`{KEY_TAG}` = '{key}'")
    return sorted(found, key=lambda v: int(v.version))


def _is_stale(version: Any, stale_after_s: float, now_ms: float) -> bool:
    return version.tags.get(STATUS_TAG) != "complete" and now_ms - version.creation_timestamp > stale_after_s * 1000


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


def register_version(
    client: Any,
    *,
    name: str,
    model_description: str,
    artifact_dir: str | os.PathLike,
    manifest: list[dict[str, str]],
    training_md5s: Mapping[str, str],
    tags: Mapping[str, str],
    card: str,
    log_artifacts: Callable[[Path, str], str],
    candidate_alias: str,
    stale_after_s: float,
    now_ms: Callable[[], float] = lambda: time.time() * 1000,
) -> Registration:
    """Register ``artifact_dir`` as a new version of ``name`` unless its key already exists.

    ``manifest`` is :func:`manifest_of` the folder. ``log_artifacts(folder, artifact_path)`` uploads a folder into the registration run
    and returns its artifact URI (the version's source). Call this while holding
    :func:`registration_lock`.
    """
    content_md5 = folder_md5(manifest)
    key = registration_key(content_md5, training_md5s)
    manifest_json = json.dumps([[e["relpath"], e["md5"]] for e in manifest], separators=(",", ":"))
    if len(manifest_json) > MAX_TAG_VALUE:
        raise InputError(f"{artifact_dir}: {len(manifest)} files give a manifest too long for one registry tag; pack the folder")

    _ensure_model(client, name, model_description)
    existing = _versions_with_key(client, name, key)
    for stale in [v for v in existing if _is_stale(v, stale_after_s, now_ms())]:
        # A registration that died before completing (e.g. the server went away).
        client.delete_model_version(name, stale.version)
    complete = [v for v in existing if v.tags.get(STATUS_TAG) == "complete"]
    if complete:
        return Registration(name, str(complete[0].version), False, content_md5, key, "unchanged: same registration key")

    source = log_artifacts(Path(artifact_dir), f"{name}/model")
    all_tags = {
        **{k: str(v) for k, v in tags.items()},
        CONTENT_TAG: content_md5,
        KEY_TAG: key,
        MANIFEST_TAG: manifest_json,
        STATUS_TAG: "registering",
    }
    run_id = _run_id_of(source)
    description = fit_description(for_ui(card), f"{name}/README.md" + (f" of run {run_id}" if run_id else ""))
    mv = client.create_model_version(name, source=source, run_id=run_id, tags=all_tags, description=description)
    version = str(mv.version)
    try:
        # Cross-host race: every registration that created a version with this key sees
        # the same set; the lowest number wins and the others delete themselves.
        rivals = [v for v in _versions_with_key(client, name, key) if not _is_stale(v, stale_after_s, now_ms())]
        winner = min(rivals, key=lambda v: int(v.version)) if rivals else mv
        if int(winner.version) < int(version):
            client.delete_model_version(name, version)
            return Registration(name, str(winner.version), False, content_md5, key, f"duplicate of concurrent version {winner.version}; removed {version}")
        client.set_registered_model_alias(name, candidate_alias, version)
        client.set_model_version_tag(name, version, STATUS_TAG, "complete")
    except BaseException as exc:
        _rollback(client, name, version, exc)
        raise
    return Registration(name, version, True, content_md5, key, f"new version; alias '{candidate_alias}'")


_RUN_ID = re.compile(r"/([0-9a-f]{32})/artifacts/")


def _run_id_of(source: str) -> str | None:
    match = _RUN_ID.search(source)
    return match.group(1) if match else None


def _rollback(client: Any, name: str, version: str, cause: BaseException) -> None:
    try:
        client.delete_model_version(name, version)
    except Exception as exc:
        raise RegistryUnavailable(
            f"{name} version {version} was created but could not be completed ({_short(cause if isinstance(cause, Exception) else None)}) "
            f"nor rolled back ({_short(exc)}); it stays tagged {STATUS_TAG}=registering, which pull/promote/verify "
            "treat as not registered and the next registration deletes once stale"
        ) from cause


# --------------------------------------------------------------------------- gates


@dataclass
class GateCheck:
    gate: str
    passed: bool
    detail: str


def _num(tags: Mapping[str, str], key: str) -> float | None:
    try:
        return float(tags[key])
    except (KeyError, ValueError):
        return None


def evaluate_gates(spec: GateSpec, tags: Mapping[str, str]) -> list[GateCheck]:
    """Every declared gate, checked against a version's tags (a missing tag fails)."""
    checks = [GateCheck("registered", tags.get(STATUS_TAG) == "complete", f"{STATUS_TAG}={tags.get(STATUS_TAG, 'missing')}")]
    if spec.guard_pass:
        checks.append(GateCheck("guard_pass", tags.get("guard.result") == "pass", f"guard.result={tags.get('guard.result', 'missing')}"))
    if spec.judge_trusted:
        checks.append(GateCheck("judge_trusted", tags.get("judge.trusted") == "true", f"judge.trusted={tags.get('judge.trusted', 'missing')}"))
    if spec.min_n is not None:
        n = _num(tags, "eval.n")
        checks.append(GateCheck("min_n", n is not None and n >= spec.min_n, f"eval.n={tags.get('eval.n', 'missing')} (needs >= {spec.min_n})"))
    if spec.cluster_ci_low_above_bar:
        low, bar = _num(tags, "eval.cluster_ci_low"), _num(tags, "eval.bar")
        ok = low is not None and bar is not None and low > bar
        checks.append(GateCheck("cluster_ci_low_above_bar", ok,
                                f"eval.cluster_ci_low={tags.get('eval.cluster_ci_low', 'missing')} vs eval.bar={tags.get('eval.bar', 'missing')}"))
    if spec.healthy_training:
        checks.append(GateCheck("healthy_training", tags.get("training.healthy") == "true", f"training.healthy={tags.get('training.healthy', 'missing')}"))
    return checks


def failed(checks: list[GateCheck]) -> list[GateCheck]:
    return [c for c in checks if not c.passed]


# --------------------------------------------------------------------------- promotion


@dataclass
class Promotion:
    name: str
    version: str
    alias: str
    forced: bool
    failed_gates: list[GateCheck]
    record: dict[str, str]


def promote(
    client: Any,
    decl: RegistryDecl,
    *,
    name: str,
    version: str,
    alias: str,
    reason: str,
    actor: str,
    force: bool = False,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
) -> Promotion:
    """Point ``alias`` at ``version`` if it passes the model's gates (or ``force``), recording who/when/why."""
    model = declared(decl, name)
    if not reason.strip():
        raise InputError("promote: --reason must say why (it is recorded on the version)")
    mv = client.get_model_version(name, version)
    checks = evaluate_gates(model.gates, mv.tags) if alias not in decl.ungated_aliases else evaluate_gates(GateSpec(), mv.tags)
    bad = failed(checks)
    if bad and not force:
        lines = "; ".join(f"{c.gate} ({c.detail})" for c in bad)
        raise GateFailed(f"{name} version {version} fails its gates for alias '{alias}': {lines}. Not promoted (use --force to override; it is recorded).")
    when = now().isoformat(timespec="seconds")
    prefix = f"promotion.{alias}"
    record = {
        f"{prefix}.by": actor,
        f"{prefix}.at": when,
        f"{prefix}.reason": reason,
        f"{prefix}.forced": str(bool(force and bad)).lower(),
    }
    if force and bad:
        record[f"{prefix}.failed_gates"] = ", ".join(f"{c.gate} ({c.detail})" for c in bad)
    # The record goes on before the alias moves, so an alias never points at an
    # unrecorded promotion made by this tool.
    for key, value in record.items():
        client.set_model_version_tag(name, version, key, value)
    if force and bad:
        client.set_registered_model_tag(
            name, f"FORCED.{alias}", f"version {version} forced by {actor} at {when}: {reason} -- failed: {record[f'{prefix}.failed_gates']}"
        )
    client.set_registered_model_alias(name, alias, version)
    return Promotion(name, version, alias, bool(force and bad), bad, record)


# --------------------------------------------------------------------------- verify


@dataclass
class AliasFinding:
    name: str
    alias: str
    version: str
    failed_gates: list[GateCheck]
    recorded: bool  # promoted through `reappreg registry promote`
    forced: bool
    declared: bool = True
    ungated: bool = False

    @property
    def violation(self) -> bool:
        return self.declared and bool(self.failed_gates)

    def describe(self) -> str:
        if self.ungated:
            who = "ungated alias"
        elif self.forced:
            who = "forced promotion (recorded)"
        else:
            who = "promoted with reappreg" if self.recorded else "set outside `reappreg registry promote`"
        if not self.declared:
            return f"{self.name}@{self.alias} -> v{self.version}: model not declared in the registry; no gates known"
        if not self.failed_gates:
            return f"{self.name}@{self.alias} -> v{self.version}: passes its gates ({who})"
        gates = "; ".join(f"{c.gate} ({c.detail})" for c in self.failed_gates)
        return f"{self.name}@{self.alias} -> v{self.version}: FAILS {gates} ({who})"


def check_alias(client: Any, decl: RegistryDecl, name: str, alias: str, version: str) -> AliasFinding:
    mv = client.get_model_version(name, version)
    if name not in decl.models:
        return AliasFinding(name, alias, str(version), [], False, False, declared=False)
    ungated = alias in decl.ungated_aliases
    bad = failed(evaluate_gates(GateSpec() if ungated else decl.models[name].gates, mv.tags))
    recorded = f"promotion.{alias}.by" in mv.tags
    forced = mv.tags.get(f"promotion.{alias}.forced") == "true"
    return AliasFinding(name, alias, str(version), bad, recorded, forced, ungated=ungated)


def verify_aliases(client: Any, decl: RegistryDecl) -> list[AliasFinding]:
    """Every alias of every registered model, with the gates its version fails."""
    findings = []
    for model in client.search_registered_models(max_results=1000):
        for alias, version in sorted((model.aliases or {}).items()):
            findings.append(check_alias(client, decl, model.name, alias, str(version)))
    return findings


# --------------------------------------------------------------------------- watch


def watch_poll(
    check: Callable[[], list[AliasFinding]],
    *,
    interval_s: float,
    max_polls: int,
    report: Callable[[AliasFinding], None],
    sleep: Callable[[float], None] = time.sleep,
) -> list[AliasFinding]:
    """Re-run ``check`` ``max_polls`` times, ``interval_s`` apart; report each violation once."""
    seen: dict[tuple[str, str, str], AliasFinding] = {}
    for poll in range(max_polls):
        for finding in check():
            key = (finding.name, finding.alias, finding.version)
            if finding.violation and key not in seen:
                seen[key] = finding
                report(finding)
        if poll + 1 < max_polls:
            sleep(interval_s)
    return list(seen.values())


def verify_signature(secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    """MLflow's webhook signature: HMAC-SHA256 over ``delivery_id.timestamp.payload`` (v1, base64)."""
    from mlflow.webhooks.constants import WEBHOOK_DELIVERY_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER

    lower = {k.lower(): v for k, v in headers.items()}
    signature = lower.get(WEBHOOK_SIGNATURE_HEADER.lower(), "")
    delivery = lower.get(WEBHOOK_DELIVERY_ID_HEADER.lower(), "")
    stamp = lower.get(WEBHOOK_TIMESTAMP_HEADER.lower(), "")
    signed = f"{delivery}.{stamp}.{body.decode('utf-8')}".encode("utf-8")
    expected = "v1," + base64.b64encode(hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).digest()).decode("ascii")
    return hmac.compare_digest(expected, signature)


def watch_webhook(
    client: Any,
    decl: RegistryDecl,
    *,
    listen_host: str,
    listen_port: int,
    public_url: str | None,
    duration_s: float,
    max_events: int,
    report: Callable[[AliasFinding], None],
    on_ready: Callable[[str], None] | None = None,
) -> list[AliasFinding]:
    """Subscribe to ``model_version_alias.created`` on an ``mlflow server`` and check each new alias.

    Checks every existing alias once after subscribing, then each new one as it is set.
    Runs for at most ``duration_s`` seconds or ``max_events`` alias events, then deletes
    its webhook. The server only delivers to URLs its SSRF policy allows: for a loopback
    listener start it with ``MLFLOW_WEBHOOK_ALLOWED_SCHEMES=http,https`` and
    ``MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS=true``.
    """
    import queue
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    secret = secrets.token_hex(16)
    events: queue.Queue = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server API)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if not verify_signature(secret, dict(self.headers.items()), body):
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            events.put(json.loads(body))

        def log_message(self, *args: Any) -> None:  # keep the console for findings
            pass

    server = ThreadingHTTPServer((listen_host, listen_port), Handler)
    url = public_url or f"http://{listen_host}:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hook = client.create_webhook(name=f"reappreg-watch-{secrets.token_hex(4)}", url=url,
                                 events=["model_version_alias.created"], secret=secret,
                                 description="reappreg registry watch: checks every new alias against its gates")
    findings: list[AliasFinding] = []
    seen: set[tuple[str, str, str]] = set()

    def found(finding: AliasFinding) -> None:
        key = (finding.name, finding.alias, finding.version)
        if finding.violation and key not in seen:
            seen.add(key)
            findings.append(finding)
            report(finding)

    try:
        # Aliases set before the webhook existed (or while the server's webhook cache was
        # stale) are caught by one full check once the subscription is in place.
        for finding in verify_aliases(client, decl):
            found(finding)
        if on_ready:
            on_ready(url)
        deadline = time.monotonic() + duration_s
        handled = 0
        while handled < max_events:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                event = events.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if (event.get("entity"), event.get("action")) != ("model_version_alias", "created"):
                continue
            data = event.get("data", {})
            handled += 1
            found(check_alias(client, decl, data["name"], data["alias"], str(data["version"])))
    finally:
        client.delete_webhook(hook.webhook_id)
        server.shutdown()
        server.server_close()
    return findings


# --------------------------------------------------------------------------- pull


@dataclass
class Pulled:
    name: str
    version: str
    folder: Path
    files: int
    card: str
    tags: dict[str, str] = field(default_factory=dict)


def resolve_version(client: Any, spec: str) -> Any:
    from mlflow.exceptions import MlflowException

    name, version, alias = parse_spec(spec)
    try:
        return client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, version)
    except MlflowException as exc:
        raise InputError(f"'{spec}': no such registered model version ({exc.message})") from exc


def check_download(folder: Path, manifest: list[list[str]], content_md5: str) -> list[str]:
    """Problems (missing/extra/changed files, folder hash) of a download against its manifest."""
    want = {rel: md5 for rel, md5 in manifest}
    entries = dir_entries(folder)
    have = {e["relpath"]: e["md5"] for e in entries}
    problems = [f"missing {rel}" for rel in sorted(set(want) - set(have))]
    problems += [f"unexpected {rel}" for rel in sorted(set(have) - set(want))]
    problems += [f"{rel}: md5 {have[rel]} != recorded {want[rel]}" for rel in sorted(set(want) & set(have)) if have[rel] != want[rel]]
    if not problems and folder_md5(entries) != content_md5:
        # Every file matches the manifest but not the recorded folder hash: the manifest tag was edited.
        problems.append(f"folder hash {folder_md5(entries)} != recorded {content_md5}")
    return problems


def pull(client: Any, spec: str, to: str | os.PathLike, *, tracking_uri: str) -> Pulled:
    """Download exactly the version ``spec`` names into ``to``, verified file by file."""
    import mlflow

    mv = resolve_version(client, spec)
    tags = dict(mv.tags)
    if tags.get(STATUS_TAG) != "complete":
        raise IntegrityError(f"{mv.name} version {mv.version} is not a completed registration ({STATUS_TAG}={tags.get(STATUS_TAG, 'missing')})")
    if MANIFEST_TAG not in tags or CONTENT_TAG not in tags:
        raise IntegrityError(f"{mv.name} version {mv.version} has no hash manifest; it was not registered by reappreg")
    manifest = json.loads(tags[MANIFEST_TAG])
    target = Path(to)
    if target.exists() and any(target.iterdir()):
        raise InputError(f"{target}: already exists and is not empty; pull into a new folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial-{secrets.token_hex(4)}")
    try:
        partial.mkdir()
        # A folder URI downloads into dst_path/<its last component>; the returned path says where.
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=mv.source, dst_path=str(partial), tracking_uri=tracking_uri))
        problems = check_download(local, manifest, tags[CONTENT_TAG])
        if problems:
            raise IntegrityError(f"{mv.name} version {mv.version}: download does not match the registered hashes: " + "; ".join(problems)
                                 + ". The partial download was deleted.")
        if target.exists():
            target.rmdir()
        os.replace(local, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return Pulled(mv.name, str(mv.version), target, len(manifest), mv.description or "", tags)
