"""What ``reappreg registry`` register, promote, verify, watch and pull do, given the validated settings.

The commands (``reappreg.commands.registry``) parse their options, call one function here and
print what it returns (or what it reports through its callbacks); every check and every
multi-step sequence lives here.

* :func:`register_models`: every check that needs no registry first (:func:`plan_model`,
  :func:`checkpoint_plans`: a passing certificate that covers the training inputs, metrics that
  describe the artifact, a clean card), then each kept checkpoint and each model as a signed
  version under the host-wide registration lock, then the receipt.
* :func:`promote_alias`, :func:`verify_aliases`, :func:`watch_aliases`, :func:`pull_version`:
  connect (bounded HTTP), load the trust and run the library operation.

Keys: versions and promotions are signed with ``$REAPPREG_SIGNING_KEY`` or this clone's local key
under ``local_keys``; :func:`load_trust_for` trusts the team's TUF root under ``keys`` and, when
``registry.trust_local_key``, this clone's local key as a one-key root of its own (made on first use).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.errors import InputError

if TYPE_CHECKING:
    from reappreg.card.evidence import EvidencePaths
    from reappreg.registry.promotion import PromotionRequest
    from reappreg.registry.watch import WebhookListener
    from reappreg.settings import Params

# The signed-history heads this clone saw at each tracking URI (beside its local key).
HEADS_FILE = "history-heads.json"


@dataclass(frozen=True)
class RegistryFiles:
    """The repository files every registry command reads besides the params: the declarations
    (``models``), the team keys (``keys``) and this clone's local key folder (``local_keys``,
    beside which this clone's memory of the signed history lives). One object because the
    commands take them as one option group and every operation here opens the registry from all
    three."""

    models: Path
    keys: Path
    local_keys: Path


@dataclass(frozen=True)
class RegistrationFiles:
    """What registration reads and writes besides the params: the ``registry`` files every command
    reads, the ``cards`` folder (``<model>.md``), the ``evidence`` the gates are read from, the
    host-wide ``registration_lock`` (``--lock-file``), the ``receipt`` it writes and the
    ``dvc_lock`` the claims must match (``--lock``). One object because ``registry register``
    takes them all as options and only registration needs the ones beyond ``registry``."""

    registry: RegistryFiles
    cards: Path
    evidence: EvidencePaths
    registration_lock: Path
    receipt: Path
    dvc_lock: Path


def client_for(settings: Params) -> tuple[Any, str]:
    """A registry client for ``$MLFLOW_TRACKING_URI`` or ``tracking.uri``, and that URI."""
    from reappreg.registry import connect
    from reappreg.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(settings.tracking.uri)
    return connect(uri, attempts=settings.registry.connect_attempts, backoff_s=settings.registry.connect_backoff_s), uri


def absolute_uri(uri: str) -> str:
    """A local sqlite URI with its path made absolute (``sqlite:///registry/mlflow.db`` is relative
    to the working directory, and MLflow caches a store per URI string in a process)."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri.removeprefix('sqlite:///')).resolve()}"
    return uri


def _repo_relative(path: Path) -> Path:
    """``path`` as dvc.lock names it: relative to the repository root (the working directory)."""
    return path.resolve().relative_to(Path.cwd().resolve()) if path.is_absolute() else path


def tracked_lineage(settings: Params, client: Any, uri: str, claims: list, *, claims_md5: str) -> str:
    """``lineage.check_tracked_lineage`` in the store the stages tracked to, as a view for people: which
    finished runs wrote the claims, or why none was found. Never a gate: anyone who can write to the
    tracking store can add a run (the signed links are the evidence, reappreg.custody)."""
    import mlflow

    from reappreg.errors import GateFailed
    from reappreg.registry.lineage import check_tracked_lineage

    stores = [(client, uri)]
    local = absolute_uri(settings.tracking.uri)
    if local != absolute_uri(uri):
        stores.append((mlflow.MlflowClient(tracking_uri=local), local))
    refusals = []
    for store, where in stores:
        try:
            return check_tracked_lineage(store, settings.tracking.experiment, claims, claims_md5=claims_md5, where=where)
        except GateFailed as refused:
            refusals.append(str(refused))
    return "not found (a view only, not evidence): " + " | ".join(refusals)


def load_trust_for(settings: Params, files: RegistryFiles, *, create_local: bool = False):
    """The trust this clone uses (:func:`reappreg.trust.local.clone_trust`): the team's TUF root
    under ``files.keys`` (pinned on first use) and, when ``registry.trust_local_key``, this clone's local
    key as a one-key root (made when ``create_local``: a command that signs)."""
    from reappreg.trust.local import clone_trust

    return clone_trust(settings.registry, files.keys, files.local_keys, create_local=create_local)


def open_session(settings: Params, files: RegistryFiles, client: Any, uri: str, *, signing: bool,
                 announce: Callable[[str], None] | None = None):
    """The registry session every command acts through: declarations, trust, this clone's memory of
    the chains' heads at ``uri`` (beside its local key), and the signing key(s) when ``signing``."""
    from reappreg.evidence.declarations import load_declarations
    from reappreg.registry.history import HeadMemory
    from reappreg.trust.keys import signing_keys
    from reappreg.registry.promotion import RegistrySession

    reg = settings.registry
    trust = load_trust_for(settings, files, create_local=signing)
    for line in trust.describe():  # every command says which root it trusts (and when it pinned one)
        (announce or (lambda _line: None))(line)
    return RegistrySession(client=client, decl=load_declarations(files.models), trust=trust,
                           keys=signing_keys(files.local_keys, create=True) if signing else None, tracking_uri=uri,
                           lock_timeout_s=reg.promotion_lock_timeout_s, lock_stale_s=reg.promotion_lock_stale_s,
                           memory=HeadMemory.load(files.local_keys.parent / HEADS_FILE, absolute_uri(uri)))


def actor_name(actor: str | None) -> str:
    """Who acts: ``actor``, else ``$REAPPREG_ACTOR``, else the login name."""
    return actor or os.environ.get("REAPPREG_ACTOR") or getpass.getuser()


def refuse_dirty_card(card: str, card_path: Path) -> None:
    """A card built from uncommitted source cannot name the code that made the model: refuse
    it, unless it was built with ``reappreg card build --allow-dirty`` (which the card records)."""
    from reappreg.card.meta import card_revision

    revision = card_revision(card)
    if str(revision.get("git_dirty")).lower() == "true" and not revision.get("dirty_allowed"):
        changed = ", ".join(map(str, (revision.get("dirty_paths") or [])[:5])) or "unknown files"
        raise InputError(f"{card_path}: built from a working tree with uncommitted changes ({changed}); commit and "
                         "rebuild the card, or rebuild it with `reappreg card build --allow-dirty` (recorded on the card)")


def plan_model(name, model, evidence, cards: Path):
    """Every check that needs no registry, and the hashes registration records (each read once)."""
    from reappreg.hashing import dvc_md5
    from reappreg.registry import check_certificate, check_metrics_describe, folder_md5, manifest_of, require_passed

    require_passed(evidence.certificate, model=name)  # first: a failed guard leaves no guarded copies
    missing = [p for p in model.training_inputs if not Path(p).exists()]
    if missing:
        raise InputError(f"{name}: training input(s) not found: {', '.join(missing)}")
    training = {p: dvc_md5(p) for p in model.training_inputs}
    check_certificate(evidence.certificate, training, model=name)
    manifest = manifest_of(model.artifact)
    metrics = evidence.policy_metrics if model.kind == "policy" else evidence.rm_metrics
    check_metrics_describe(model, metrics, folder_md5(manifest), name=name)
    card_path = cards / f"{name}.md"
    if not card_path.exists():
        raise InputError(f"{card_path}: card not found (run `reappreg card build` first)")
    card = card_path.read_text(encoding="utf-8")
    refuse_dirty_card(card, card_path)
    others = {p: dvc_md5(p) for p in model.other_inputs}
    return name, model, manifest, training, others, card


def checkpoint_plans(plan, evidence, cards: Path, steps) -> list:
    """A policy's kept checkpoints as registration plans, in step order: each folder's md5 must be the
    one its training metrics recorded, and it needs its own card (``<name>.step-<n>.md``)."""
    from reappreg.card.build import checkpoint_card_name, kept_checkpoints
    from reappreg.registry import folder_md5, manifest_of
    from reappreg.registry.registration import check_checkpoint_describes

    name, model, _, training, others, _ = plan
    out = []
    for checkpoint in kept_checkpoints(model, evidence, steps):
        manifest = manifest_of(checkpoint["folder"])
        check_checkpoint_describes(checkpoint, folder_md5(manifest), name=name)
        card_path = cards / f"{checkpoint_card_name(name, checkpoint['step'])}.md"
        if not card_path.exists():
            raise InputError(f"{card_path}: card of the step-{checkpoint['step']} checkpoint not found "
                             "(run `reappreg card build` first)")
        card = card_path.read_text(encoding="utf-8")
        refuse_dirty_card(card, card_path)
        out.append((name, model, manifest, training, others, card, checkpoint))
    return out


def _log_dvc_inputs(md5s: dict[str, str], context: str) -> None:
    """The DVC-tracked inputs as MLflow dataset inputs (name = path, digest = DVC md5), for the UI's lineage."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    for path, md5 in sorted(md5s.items()):
        mlflow.log_input(MetaDataset(source=resolve_dataset_source(path), name=path, digest=md5), context=context)


def register_models(
    settings: Params,
    files: RegistrationFiles,
    *,
    progress=None,  # noqa: ANN001 - a rich Progress (not started), shown while hashing
    on_registered: Callable[[str, Any], None] | None = None,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Register every declared model as a signed MLflow Model version (one per changed artifact; alias
    ``registry.candidate_alias``), each kept checkpoint first in step order in a nested run of its own;
    write the receipt. ``on_registered(name, registration)`` is called after each version."""
    import contextlib
    import datetime as dt
    import functools
    import importlib.metadata

    import mlflow

    from reappreg.card.build import results_rows_of
    from reappreg.hashing import dvc_md5
    from reappreg.io import write_json
    from reappreg.registry import (
        audit,
        bounded_http,
        evaluate_gates,
        evidence_of,
        folder_md5,
        readable_tags,
        register_version,
        registration_key,
        registration_lock,
        statement,
    )
    from reappreg.evidence.declarations import gate_table, load_declarations
    from reappreg.registry.audit import alias_rows
    from reappreg.registry.lineage import DvcLock, check_claims_lineage, check_outputs_in_lock
    from reappreg.registry.provenance import Provenance, material, params_md5
    from reappreg.registry.registration import (
        RegistrationHooks,
        VersionContent,
        checkpoint_evidence,
        version_tags,
    )
    from reappreg.trust.keys import signing_keys
    from reappreg.registry.verification import has_signed_statement, registration_squat
    from reappreg.tracking import git_state, stage_run

    reg = settings.registry
    decl = load_declarations(files.registry.models)
    bar_opponent = decl.reference_bar.opponent if decl.reference_bar is not None else None
    evidence = files.evidence.load()
    # Derive, don't accept: the claims must be the ones the stats stage drew from the judge's output.
    claims = files.evidence.claims
    claims_key = claims.resolve().relative_to(Path.cwd().resolve()) if claims.is_absolute() else claims
    lock = DvcLock.read(files.dvc_lock)
    lineage = check_claims_lineage(claims_key, evidence.claims, lock, claims_md5=dvc_md5(claims))
    # Every other file registration signs as evidence (metrics, results, calibration, certificate, the
    # cards) must be what its stage wrote too: the claims are not the only facts a gate reads.
    outputs = check_outputs_in_lock({**{role: _repo_relative(p) for role, p in evidence.sources.items()},
                                     "cards": _repo_relative(files.cards)}, lock)
    keys = signing_keys(files.registry.local_keys, create=True)
    key = keys[0]
    trust = load_trust_for(settings, files.registry, create_local=True)
    for line in trust.describe():
        (announce or (lambda _line: None))(line)
    signer_version = trust.current_for([k.keyid for k in keys], "registration")  # refuse an untrusted signer first
    # Custody: in-toto's verification of the signed links from the raw inputs to every file registered as
    # evidence (reappreg.custody). The tracked MLflow runs are a convenience view, never the evidence.
    from reappreg.custody.layout import custody_links, verify_registration

    custody = verify_registration(Path.cwd(), trust, signer_version.origin)
    link_digests = custody_links(Path.cwd(), signer_version.origin)
    plans = []
    # Refuse before touching the registry: every model's training text must be certified.
    with progress if progress is not None else contextlib.nullcontext():
        task = progress.add_task("hashing artifacts and inputs", total=len(decl.models)) if progress is not None else None
        for name, model in decl.models.items():
            plan = plan_model(name, model, evidence, files.cards)
            plans += [*checkpoint_plans(plan, evidence, files.cards, settings.policy.train.checkpoint_steps), (*plan, None)]
            if progress is not None:
                progress.advance(task)
    git = git_state()
    results = []
    evidence_md5s = {str(p): dvc_md5(p) for p in evidence.sources.values()}
    cert = evidence.certificate
    builder = {"id": f"reappreg registry register ({actor_name(None)})",
               "version": {pkg: importlib.metadata.version(pkg) for pkg in ("reappreg", "mlflow", "model-signing", "securesystemslib")}}
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    inputs = {"models": files.registry.models, "cards": files.cards, **evidence.sources}
    with bounded_http(reg.http_retries, reg.http_timeout_s), registration_lock(files.registration_lock, reg.lock_timeout_s):
        client, tracking_uri = client_for(settings)
        # The tracked runs that wrote the claims: a view for people (the signed links above are the evidence).
        tracked = tracked_lineage(settings, client, tracking_uri, evidence.claims, claims_md5=dvc_md5(claims))
        session = open_session(settings, files.registry, client, tracking_uri, signing=True)  # trust said above
        with stage_run("register", tracking=settings.tracking, params=reg.model_dump(), inputs=inputs):

            for rel in sorted(link_digests):  # beside the statements that name them
                mlflow.log_artifact(rel, artifact_path="custody")

            def log_folder(folder: Path, artifact_path: str) -> str:
                mlflow.log_artifacts(str(folder), artifact_path=artifact_path)
                return mlflow.get_artifact_uri(artifact_path)

            for name, model, manifest, training, others, card, checkpoint in plans:
                # A kept checkpoint goes into a nested run of its own: a run holds one model folder per name.
                with (mlflow.start_run(run_name=f"register {name} step {checkpoint['step']}", nested=True,
                                       tags={"stage": "register", "register.checkpoint_step": str(checkpoint["step"])})
                      if checkpoint else contextlib.nullcontext()):
                    if checkpoint:  # verify/pull fetch the links a statement names from the version's own run
                        for rel in sorted(link_digests):
                            mlflow.log_artifact(rel, artifact_path="custody")
                    artifact = checkpoint["folder"] if checkpoint else model.artifact
                    content = folder_md5(manifest)
                    mlflow.set_tag(f"input.{artifact}.md5", content)
                    mlflow.log_text(card, f"{name}/README.md")
                    _log_dvc_inputs({**training}, "training")
                    _log_dvc_inputs({**others, artifact: content, **evidence_md5s}, f"{name}")
                    flat = evidence_of(model.kind, evidence, health=settings.card.health,
                                       max_completion_length=settings.policy.train.max_completion_length)
                    extra_tags = {}
                    if model.kind == "policy":
                        condition = checkpoint["condition"] if checkpoint else "policy"
                        rows = results_rows_of(evidence, condition)
                        if checkpoint:
                            flat = checkpoint_evidence(flat, rows, checkpoint=checkpoint, bar_opponent=bar_opponent,
                                                       selected=flat.get("results.selection.selected"))
                        stem = (model.artifact_md5_metric or "train.model_md5").split(".", 1)[0]
                        extra_tags = version_tags(checkpoint, final_step=evidence.policy_metrics.get(f"{stem}.global_step"),
                                                  training_run_id=evidence.policy_metrics.get(f"{stem}.training_run_id"),
                                                  results_rows=rows)
                    checks = evaluate_gates(list(model.gates), flat)
                    tags = readable_tags(model, flat, evidence, input_md5s={**training, **others}, git=git)
                    tags.update(extra_tags)
                    tags.update({f"gate.{c.gate}": "pass" if c.passed else "fail" for c in checks})
                    materials = [material(p, m, role="training_input") for p, m in sorted(training.items())]
                    materials += [material(p, m, role="input") for p, m in sorted(others.items())]
                    materials += [material(str(cert.path), cert.md5, role="guard_certificate", result=cert.result)]
                    materials += [material(p, m, role="evidence") for p, m in sorted(evidence_md5s.items()) if p != str(cert.path)]
                    # The signed links the chain was verified with (verify/pull can fetch and re-check them).
                    materials += [{"name": rel, "digest": {"sha256": digest}, "annotations": {"role": "custody_link"}}
                                  for rel, digest in sorted(link_digests.items())]

                    provenance = Provenance(
                        registration={"registration_key": registration_key(content, training),
                                      "artifact": artifact, "artifact_dvc_md5": content,
                                      "params_md5": params_md5(settings.model_dump(by_alias=True)),
                                      "git_commit": git.get("git.commit", "none"), "git_dirty": git.get("git.dirty", "unknown"),
                                      "gates": gate_table(list(model.gates))},
                        materials=materials, flat_evidence=flat, gate_results=[c.as_dict() for c in checks],
                        builder=builder, started=started,
                    )

                    result = register_version(
                        client, name=name, model=model, keys=keys, settings=reg,
                        content=VersionContent(artifact_dir=Path(artifact), manifest=manifest, training_md5s=training,
                                               tags=tags, card=card, card_artifact=f"{name}/README.md"),
                        hooks=RegistrationHooks(
                            log_artifacts=log_folder, attest=functools.partial(statement, provenance=provenance),
                            squat=lambda mv, reg_key: registration_squat(mv, reg_key, trust, tracking_uri=tracking_uri),
                            signed=lambda mv: has_signed_statement(mv, trust, tracking_uri=tracking_uri)),
                        chain=session.chain,
                    )
                    results.append(result.as_dict())
                    mlflow.set_tag(f"registered.{name}", f"v{result.version} ({'new' if result.created else 'unchanged'})")
                    mlflow.log_metric(f"registry/{name}/created", int(result.created))
                    if on_registered is not None:
                        on_registered(name, result)
            # What a reader of the receipt (and the report) needs next: where every alias points
            # now and whether `registry verify` passes, derived by the same audit it runs.
            state = audit(session)
            write_json(files.receipt, {"registered": results, "signing_keyid": key.keyid, "claims_lineage": lineage,
                                 "claims_tracked": tracked, "outputs_lineage": outputs, "custody": custody,
                                 "verify": alias_rows(state)})


def parse_expect(expect: str | None):
    """``--expect``: ``...`` (compare with what the alias points at when the command starts) when not
    given, None for ``none`` (the alias must be unset), else a version number (``v`` prefix allowed)."""
    return ... if expect is None else (None if expect.lower() == "none" else expect.removeprefix("v"))


def promote_alias(settings: Params, files: RegistryFiles, request: PromotionRequest, *,
                  announce: Callable[[str], None] | None = None):
    """Point ``request.alias`` at ``request.name``/``request.version`` if its signed evidence passes the
    gates (compare-and-set, signed history entry); returns the ``Promotion``."""
    from reappreg.registry import bounded_http, promote

    reg = settings.registry
    with bounded_http(reg.http_retries, reg.http_timeout_s):
        client, uri = client_for(settings)
        return promote(open_session(settings, files, client, uri, signing=True, announce=announce), request)


@dataclass
class Verified:
    """What :func:`verify_aliases` found. ``passed``: something verified and nothing failed or is pending
    (the heads it saw are remembered in ``heads_file`` either way, when their chains verified);
    ``empty``: no alias of a declared model at all."""

    audit: Any
    declared: int
    uri: str
    heads_file: Path

    @property
    def empty(self) -> bool:
        return not self.audit.findings or all(not f.declared for f in self.audit.findings)

    @property
    def passed(self) -> bool:
        return not self.empty and not self.audit.problems and not self.audit.pending and bool(self.audit.verified)


def verify_aliases(settings: Params, files: RegistryFiles, *, announce: Callable[[str], None] | None = None) -> Verified:
    """Verify every model and alias (signature, bytes, tags vs signed copy, gates from signed evidence,
    alias against the signed history, history no shorter than this clone saw before); remember the
    heads of the chains that verified."""
    from reappreg.registry import audit, bounded_http
    from reappreg.registry.audit import remember_heads

    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client, uri = client_for(settings)
        session = open_session(settings, files, client, uri, signing=False, announce=announce)
        result = audit(session)
        remember_heads(session, result)
    return Verified(result, len(session.decl.models), uri, files.local_keys.parent / HEADS_FILE)


WATCH_MODES = ("auto", "webhook", "poll")


@dataclass(frozen=True)
class WatchOptions:
    """How one watch runs (``registry watch``'s options): ``mode`` (one of WATCH_MODES), ``enforce``
    (undo each gated violation); polling every ``interval`` seconds, ``max_polls`` times (None:
    ``registry.watch_interval_s``, ``registry.watch_max_polls``); or the ``webhook`` listener. One
    object because they arrive together from the command and only the mode decides which of them
    apply."""

    mode: str
    enforce: bool
    interval: float | None
    max_polls: int | None
    webhook: WebhookListener


@dataclass(frozen=True)
class WatchCallbacks:
    """What a watch tells its caller as it happens, so the command can print it at once rather
    than after a watch that may run for an hour: each violation, each enforcement's note, the
    webhook URL once it listens, or the polling interval and count once polling starts."""

    on_violation: Callable[[Any], None]
    on_enforced: Callable[[str], None]
    on_webhook: Callable[[str], None]
    on_polling: Callable[[float, int], None]
    on_problem: Callable[[str], None] = lambda problem: None
    on_trust: Callable[[str], None] = lambda line: None


def watch_aliases(settings: Params, files: RegistryFiles, options: WatchOptions, *, actor: str,
                  callbacks: WatchCallbacks) -> list:
    """Watch every alias against its signed state and gates (webhook on an MLflow server, else polling);
    with ``options.enforce`` decide each pending UI request (accept or restore, signed) and restore
    tampered tags. Returns (the findings that still need a key holder, the history and model
    problems seen); both empty: nothing left."""
    from reappreg.registry import audit, bounded_http, watch_poll, watch_webhook
    from reappreg.registry.requests import act

    reg = settings.registry
    mode = options.mode
    if mode not in WATCH_MODES:
        raise InputError(f"--mode must be auto, webhook or poll, got {mode!r}")
    with bounded_http(reg.http_retries, reg.http_timeout_s):
        client, uri = client_for(settings)
        session = open_session(settings, files, client, uri, signing=options.enforce, announce=callbacks.on_trust)
        left: list = []

        def report(finding) -> None:
            callbacks.on_violation(finding)
            if not options.enforce:
                left.append(finding)
                return
            notes = act(session, finding, actor=actor)
            for note in notes:
                callbacks.on_enforced(note)
            if finding.violation and any("Left in place" in n for n in notes) or not notes:
                left.append(finding)

        problems: list[str] = []

        def full_check():
            result = audit(session)
            for problem in result.history_problems + result.model_problems:
                if problem not in problems:
                    problems.append(problem)
                    callbacks.on_problem(problem)
            return result.findings

        served = uri.startswith(("http://", "https://"))
        if mode == "webhook" and not served:
            raise InputError(f"--mode webhook needs an `mlflow server` tracking URI; {uri} delivers no webhooks (use --mode poll)")
        if mode == "webhook" or (mode == "auto" and served):
            watch_webhook(session, options.webhook, report=report, check=full_check, on_ready=callbacks.on_webhook)
            return left, problems
        every = min(max(options.interval if options.interval is not None else reg.watch_interval_s, 1.0), 3600.0)
        polls = options.max_polls if options.max_polls is not None else reg.watch_max_polls
        if polls < 1:
            raise InputError("--max-polls must be at least 1")
        callbacks.on_polling(every, polls)
        watch_poll(full_check, interval_s=every, max_polls=polls, report=report)
        return left, problems


def pull_version(settings: Params, files: RegistryFiles, *, spec: str, to: Path | None, allow_failing_gates: bool,
                 actor: str, announce: Callable[[str], None] | None = None):
    """Download the version ``spec`` names into ``to`` (default ``./<name>-v<version>``), verified
    against its signed statement; returns the ``Pulled``."""
    from reappreg.registry import bounded_http, resolve_version
    from reappreg.registry import pull as do_pull

    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client, uri = client_for(settings)
        session = open_session(settings, files, client, uri, signing=False, announce=announce)
        if to is None:
            mv = resolve_version(client, spec)
            to = Path(f"{mv.name}-v{mv.version}")
        return do_pull(session, spec, to, allow_failing_gates=allow_failing_gates, actor=actor)


def seal_histories(settings: Params, files: RegistryFiles, *, actor: str,
                   announce: Callable[[str], None] | None = None) -> list[str]:
    """After a key change: append a signed "seal" entry, under the current trust version, to the history of
    every declared model in this store, so that no later entry can name an older version (versions never
    go back along a chain) and a retired key cannot date an entry into the gap. Returns one line per model."""
    import datetime as dt

    from reappreg.registry import bounded_http
    from reappreg.registry.history import append, settle

    reg = settings.registry
    notes = []
    with bounded_http(reg.http_retries, reg.http_timeout_s):
        client, uri = client_for(settings)
        session = open_session(settings, files, client, uri, signing=True, announce=announce)
        existing = {m.name for m in client.search_registered_models(max_results=1000)}
        for name in sorted(set(session.decl.models) & existing):
            version = session.trust.current_for([k.keyid for k in session.keys], "enforcement")
            tag = append(client, name, {"kind": "seal", "alias": None, "from": None, "to": None, "by": actor,
                                        "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                        "reason": f"keys changed: entries from here on are signed under {version} or later",
                                        "forced": False, "gates": [], "tampering": [], "signed_by_registration": None},
                         session.keys, session.chain)
            settle(client, name, session.chain)
            notes.append(f"sealed {name} at {tag} under {version}")
    return notes or [f"no declared model in {uri}: nothing to seal"]


__all__ = ["HEADS_FILE", "WATCH_MODES", "RegistrationFiles", "RegistryFiles", "Verified", "WatchCallbacks", "WatchOptions", "actor_name", "open_session",
           "checkpoint_plans", "client_for", "parse_expect", "plan_model", "promote_alias", "pull_version", "refuse_dirty_card",
           "register_models", "load_trust_for", "seal_histories", "verify_aliases", "watch_aliases"]
