"""CLI commands for the MLflow model registry: register, promote, verify, watch, pull, keygen, sign-keyring, tag.

The tracking/registry URI is ``MLFLOW_TRACKING_URI`` when set (e.g. a remote
``mlflow server``), else ``tracking.uri`` from params (the sqlite store under registry/).

Keys (README "Trust model"): versions and promotions are signed with ``$REAPPREG_SIGNING_KEY``
(a PEM private key) or, when unset, with this clone's local key under ``--local-keys``
(generated on first registration, gitignored, trusted by this clone only). Verification
trusts the team keys listed in ``--keys``/keyring.yaml, plus the local key when
``registry.trust_local_key``.

Two ways to move things, for two audiences:

* A team that only needs a model: ``reappreg registry pull NAME@champion --to DIR`` (or
  ``NAME/VERSION``, or ``models:/…``) downloads exactly that version, checks its signed
  statement and every byte, refuses failing gates, and prints its card. No DVC, no git.
* A team that reproduces or extends the pipeline: the card's Reproduce section (the first
  commit whose ``dvc.lock`` records the model, or ``git checkout <artifact>@v<N>.0.0`` once
  ``reappreg registry tag`` has tagged it), ``dvc pull`` then ``dvc repro``. The statement's
  materials are DVC md5s, comparable with ``dvc.lock`` directly.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from reappreg.commands.card import (CALIB, CERT, CLAIMS, EVAL, MODELS, PARAMS, POLICY_METRICS, PROMPT, RESULTS, RM_METRICS,
                                    evidence_from)

app = typer.Typer(no_args_is_help=True, help="Model registry: register, promote, verify, watch, pull, keygen, sign-keyring, tag.")

KEYS = typer.Option("registry/keys", "--keys", help="Team public keys (keyring.yaml + *.pub.pem), committed")
LOCAL_KEYS = typer.Option("work/registry/keys", "--local-keys", help="This clone's local signing key (gitignored)")


def _client(settings):
    from reappreg.registry import connect
    from reappreg.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(settings.tracking.uri)
    return connect(uri, attempts=settings.registry.connect_attempts, backoff_s=settings.registry.connect_backoff_s), uri


def _keyring(settings, keys: Path, local_keys: Path):
    from reappreg.registry import load_keyring

    # What this clone saw of the keyring chain lives beside its local key (gitignored).
    return load_keyring(keys, local_keys if settings.registry.trust_local_key else None, remember=local_keys.parent)


def _actor(actor: str | None) -> str:
    return actor or os.environ.get("REAPPREG_ACTOR") or getpass.getuser()


def _plan(name, model, evidence, cards: Path):
    """Every check that needs no registry, and the hashes registration records (each read once)."""
    from reappreg.errors import InputError
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


def _checkpoint_plans(plan, evidence, cards: Path, steps) -> list:
    """A policy's kept checkpoints as registration plans, in step order: each folder's md5 must be the
    one its training metrics recorded, and it needs its own card (``<name>.step-<n>.md``)."""
    from reappreg.card.build import checkpoint_card_name, kept_checkpoints
    from reappreg.errors import InputError
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


def refuse_dirty_card(card: str, card_path: Path) -> None:
    """A card built from uncommitted source cannot name the code that made the model: refuse
    it, unless it was built with ``reappreg card build --allow-dirty`` (which the card records)."""
    from reappreg.card.meta import card_revision
    from reappreg.errors import InputError

    revision = card_revision(card)
    if str(revision.get("git_dirty")).lower() == "true" and not revision.get("dirty_allowed"):
        changed = ", ".join(map(str, (revision.get("dirty_paths") or [])[:5])) or "unknown files"
        raise InputError(f"{card_path}: built from a working tree with uncommitted changes ({changed}); commit and "
                         "rebuild the card, or rebuild it with `reappreg card build --allow-dirty` (recorded on the card)")


def _log_dvc_inputs(md5s: dict[str, str], context: str) -> None:
    """The DVC-tracked inputs as MLflow dataset inputs (name = path, digest = DVC md5), for the UI's lineage."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    for path, md5 in sorted(md5s.items()):
        mlflow.log_input(MetaDataset(source=resolve_dataset_source(path), name=path, digest=md5), context=context)


@app.command()
def register(
    params: Path = PARAMS,
    models: Path = MODELS,
    cards: Path = typer.Option("reports/cards", "--cards", help="Folder of <model>.md cards (reappreg card build)"),
    certificate: Path = CERT,
    eval_metrics: Path = EVAL,
    judge_calibration: Path = CALIB,
    claims: Path = CLAIMS,
    rm_metrics: Path = RM_METRICS,
    policy_metrics: Path = POLICY_METRICS,
    prompt: Path = PROMPT,
    results: Path = RESULTS,
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
    lock_file: Path = typer.Option("work/registry/register.lock", "--lock-file", help="Host-wide registration lock"),
    receipt: Path = typer.Option("reports/registry/registration.json", "--receipt", help="What was registered"),
    lock: Path = typer.Option("dvc.lock", "--lock", help="DVC lock the claims must match (the stats stage's inputs and output)"),
) -> None:
    """Register every declared model as a signed MLflow Model version (one per changed artifact; alias `candidate`).

    A policy's kept checkpoints (its declaration's checkpoints folder) are versions of their own, registered
    first in step order (each in a nested run of its own), so `candidate` ends on the final model."""
    import contextlib
    import datetime as dt
    import importlib.metadata

    import mlflow
    from rich.progress import Progress

    from reappreg.hashing import dvc_md5
    from reappreg.io import write_json
    from reappreg.registry import (
        audit,
        bounded_http,
        evaluate_gates,
        evidence_of,
        folder_md5,
        load_declarations,
        readable_tags,
        register_version,
        registration_key,
        registration_lock,
        signing_key,
        statement,
    )
    from reappreg.card.build import results_rows_of
    from reappreg.registry.declarations import gate_table
    from reappreg.registry.provenance import material, params_md5
    from reappreg.registry.audit import alias_rows
    from reappreg.registry.registration import checkpoint_evidence, version_tags
    from reappreg.registry.verification import registration_squat
    from reappreg.settings import load_params
    from reappreg.tracking import git_state, stage_run

    settings = load_params(params)
    reg = settings.registry
    decl = load_declarations(models)
    bar_opponent = decl.reference_bar.opponent if decl.reference_bar is not None else None
    evidence = evidence_from(certificate, eval_metrics, judge_calibration, claims, rm_metrics, policy_metrics, prompt,
                             results)
    # Derive, don't accept: the claims must be the ones the stats stage drew from the judge's output.
    from reappreg.registry.lineage import check_claims_lineage

    claims_key = claims.resolve().relative_to(Path.cwd().resolve()) if claims.is_absolute() else claims
    lineage = check_claims_lineage(claims_key, evidence.claims, lock, claims_md5=dvc_md5(claims))
    key = signing_key(local_keys, create=True)
    keyring = _keyring(settings, keys, local_keys)
    if reg.trust_local_key is False and key.keyid not in keyring.keys:
        from reappreg.errors import InputError

        raise InputError(f"signing key {key.path} (id {key.keyid[:16]}) is not a team key in {keys} and registry.trust_local_key "
                         "is false: its versions would fail every gate; add its public key to the keyring or set $REAPPREG_SIGNING_KEY")
    plans = []
    # Refuse before touching the registry: every model's training text must be certified.
    with Progress(transient=True) as progress:
        task = progress.add_task("hashing artifacts and inputs", total=len(decl.models))
        for name, model in decl.models.items():
            plan = _plan(name, model, evidence, cards)
            plans += [*_checkpoint_plans(plan, evidence, cards, settings.policy.train.checkpoint_steps), (*plan, None)]
            progress.advance(task)
    git = git_state()
    console = Console()
    results = []
    evidence_md5s = {str(p): dvc_md5(p) for p in evidence.sources.values()}
    cert = evidence.certificate
    builder = {"id": f"reappreg registry register ({_actor(None)})",
               "version": {pkg: importlib.metadata.version(pkg) for pkg in ("reappreg", "mlflow", "model-signing", "securesystemslib")}}
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    inputs = {"models": models, "cards": cards, **evidence.sources}
    with bounded_http(reg.http_retries, reg.http_timeout_s), registration_lock(lock_file, reg.lock_timeout_s):
        client, tracking_uri = _client(settings)
        with stage_run("register", tracking=settings.tracking, params=reg.model_dump(), inputs=inputs):

            def log_folder(folder: Path, artifact_path: str) -> str:
                mlflow.log_artifacts(str(folder), artifact_path=artifact_path)
                return mlflow.get_artifact_uri(artifact_path)

            for name, model, manifest, training, others, card, checkpoint in plans:
                # A kept checkpoint goes into a nested run of its own: a run holds one model folder per name.
                with (mlflow.start_run(run_name=f"register {name} step {checkpoint['step']}", nested=True,
                                       tags={"stage": "register", "register.checkpoint_step": str(checkpoint["step"])})
                      if checkpoint else contextlib.nullcontext()):
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

                    def attest(version, run_id, source, subjects, readable, *, _model=model, _name=name, _manifest=manifest,
                               _training=training, _materials=materials, _flat=flat, _checks=checks, _artifact=artifact):
                        return statement(
                            subjects=subjects, name=_name, version=version, run_id=run_id, source=source,
                            registration={"registration_key": registration_key(folder_md5(_manifest), _training),
                                          "artifact": _artifact, "artifact_dvc_md5": folder_md5(_manifest),
                                          "params_md5": params_md5(settings.model_dump(by_alias=True)),
                                          "git_commit": git.get("git.commit", "none"), "git_dirty": git.get("git.dirty", "unknown"),
                                          "gates": gate_table(list(_model.gates)),
                                          # the signed keyring this version was registered under (verify checks it is still in the chain)
                                          "keyring_head": keyring.head},
                            materials=_materials, flat_evidence=_flat, gate_results=[c.as_dict() for c in _checks],
                            tags=readable, builder=builder, started=started,
                        )

                    result = register_version(
                        client, name=name, model=model, artifact_dir=Path(artifact), manifest=manifest,
                        training_md5s=training, tags=tags, card=card, log_artifacts=log_folder, attest=attest, key=key,
                        candidate_alias=reg.candidate_alias, stale_after_s=reg.stale_registration_s,
                        squat=lambda mv, reg_key: registration_squat(mv, reg_key, keyring, tracking_uri=tracking_uri),
                    )
                    results.append(result.as_dict())
                    mlflow.set_tag(f"registered.{name}", f"v{result.version} ({'new' if result.created else 'unchanged'})")
                    mlflow.log_metric(f"registry/{name}/created", int(result.created))
                    colour = "green" if result.created else "yellow"
                    console.print(f"[{colour}]{name}[/] version {result.version}: {result.note}", highlight=False, soft_wrap=True)
            # What a reader of the receipt (and the report) needs next: where every alias points
            # now and whether `registry verify` passes, derived by the same audit it runs.
            state = audit(client, decl, keyring, tracking_uri=tracking_uri)
            write_json(receipt, {"registered": results, "signing_keyid": key.keyid, "claims_lineage": lineage,
                                 "verify": alias_rows(state)})


@app.command()
def promote(
    name: str = typer.Argument(..., help="Registered model name"),
    version: str = typer.Argument(..., help="Version number"),
    alias: str = typer.Option("champion", "--alias", help="Alias to point at the version"),
    reason: str = typer.Option(..., "--reason", help="Why (recorded in the signed history)"),
    force: bool = typer.Option(False, "--force", help="Promote despite failing gates (recorded loudly)"),
    expect: str = typer.Option(None, "--expect", help="Compare-and-set: the version the alias must point at now "
                                                      "('none': unset); default: what it points at when the command starts"),
    actor: str = typer.Option(None, "--actor", help="Who promotes (default: $REAPPREG_ACTOR or the login name)"),
    params: Path = PARAMS,
    models: Path = MODELS,
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
) -> None:
    """Point ALIAS at NAME/VERSION if its signed evidence passes the gates; compare-and-set; signed history entry."""
    from reappreg.registry import bounded_http, load_declarations, signing_key
    from reappreg.registry import promote as do_promote
    from reappreg.settings import load_params

    settings = load_params(params)
    reg = settings.registry
    decl = load_declarations(models)
    who = _actor(actor)
    key = signing_key(local_keys, create=True)
    keyring = _keyring(settings, keys, local_keys)
    expected = ... if expect is None else (None if expect.lower() == "none" else expect.removeprefix("v"))
    console = Console()
    with bounded_http(reg.http_retries, reg.http_timeout_s):
        client, uri = _client(settings)
        result = do_promote(client, decl, keyring, key, name=name, version=version, alias=alias, reason=reason, actor=who,
                            tracking_uri=uri, lock_timeout_s=reg.promotion_lock_timeout_s, lock_stale_s=reg.promotion_lock_stale_s,
                            expected=expected, force=force)
    was = "unset" if result.previous is None else f"v{result.previous}"
    if result.forced:
        console.print(f"[bold white on red] FORCED PROMOTION [/] {name}@{alias} -> v{version} (was {was}) by {who} despite: "
                      f"{result.check.problems()}. Recorded in the signed history ({result.history_tag}) and model tag FORCED.{alias}.",
                      highlight=False, soft_wrap=True)
    else:
        console.print(f"[green]promoted[/] {name}@{alias} -> v{version} (was {was}) by {who}: signed gates pass "
                      f"({', '.join(c.gate for c in result.check.gates)}); history {result.history_tag}", highlight=False, soft_wrap=True)


def _read_heads(path: Path, uri: str) -> dict:
    """The signed-history heads this clone saw at ``uri`` on earlier verifies (its memory of length)."""
    import json

    if not path.exists():
        return {}
    return (json.loads(path.read_text(encoding="utf-8")) or {}).get(uri, {})


def _write_heads(path: Path, uri: str, heads: dict) -> None:
    import json

    from reappreg.io import write_json

    everything = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    everything[uri] = heads
    write_json(path, everything)


def _print_audit(console, result) -> None:
    for finding in result.findings:
        colour = "red" if finding.violation else ("yellow" if not finding.declared else "green")
        console.print(f"[{colour}]{'VIOLATION' if finding.violation else 'ok'}[/] {escape(finding.describe())}", highlight=False, soft_wrap=True)
    for problem in result.history_problems:
        console.print(f"[red]HISTORY[/] {problem}", highlight=False, soft_wrap=True)


@app.command()
def verify(params: Path = PARAMS, models: Path = MODELS, keys: Path = KEYS, local_keys: Path = LOCAL_KEYS) -> None:
    """Verify every alias: signature, bytes, tags vs signed copy, gates from signed evidence, signed history (exit 1 on any problem)."""
    from reappreg.registry import audit, bounded_http, load_declarations
    from reappreg.settings import load_params

    settings = load_params(params)
    decl = load_declarations(models)
    keyring = _keyring(settings, keys, local_keys)
    heads_file = local_keys.parent / "history-heads.json"
    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client, uri = _client(settings)
        seen = _read_heads(heads_file, uri)
        result = audit(client, decl, keyring, tracking_uri=uri, seen_heads=seen)
    console = Console()
    _print_audit(console, result)
    for name in result.undeclared:
        console.print(f"[yellow]undeclared[/] {escape(name)}: not in {models}; its aliases are listed above and not counted "
                      "as verified", highlight=False, soft_wrap=True)
    if not result.verified and not result.violations:
        console.print(f"[bold red]nothing to verify[/]: {result.models} registered model(s), no alias of a declared model "
                      f"at {uri}. An empty registry is not a pass.", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    bad = result.violations
    if bad or result.history_problems:
        console.print(f"[bold red]{len(bad)} alias(es) fail their signed gates, differ from the signed alias state or show "
                      f"tampering; {len(result.history_problems)} history problem(s)[/]", highlight=False)
        raise typer.Exit(1)
    _write_heads(heads_file, uri, {**seen, **result.heads})
    console.print(f"[green]{len(result.verified)} alias(es) of {len(decl.models)} declared model(s) verified[/] "
                  f"(of {result.models} registered model(s), every page read): each alias equals the replay of its model's "
                  "signed promotion history, each envelope signed by a trusted key, every file re-hashed against its signed "
                  "sha256, every recorded tag equal to its signed copy, every gate read from signed evidence; the history "
                  f"is no shorter than the heads this clone saw before ({heads_file}). Not checked: whether the signing key's "
                  "holder ran the pipeline honestly.", highlight=False, soft_wrap=True)


@app.command()
def watch(
    params: Path = PARAMS,
    models: Path = MODELS,
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
    mode: str = typer.Option("auto", "--mode", help="How alias events arrive: auto (webhook on an MLflow server, else poll), webhook or poll"),
    enforce: bool = typer.Option(False, "--enforce", help="Move a failing alias back to the last passing version (or remove it)"),
    actor: str = typer.Option(None, "--actor", help="Who enforces (default: $REAPPREG_ACTOR or the login name)"),
    interval: float = typer.Option(None, "--interval", help="Seconds between polls (default: registry.watch_interval_s)"),
    max_polls: int = typer.Option(None, "--max-polls", help="Number of polls (default: registry.watch_max_polls)"),
    listen: str = typer.Option("127.0.0.1:0", "--listen", help="Webhook listener HOST:PORT (0 = any free port)"),
    public_url: str = typer.Option(None, "--public-url", help="URL the server posts to, if not http://HOST:PORT/"),
    duration: float = typer.Option(3600.0, "--duration", help="Webhook mode: stop after this many seconds"),
    max_events: int = typer.Option(1000, "--max-events", help="Webhook mode: stop after this many alias events"),
) -> None:
    """Watch every alias against its signed gates; report (exit 1 if any) and with --enforce undo violations."""
    from reappreg.errors import InputError
    from reappreg.registry import audit, bounded_http, load_declarations, signing_key, watch_poll, watch_webhook
    from reappreg.registry import enforce as do_enforce
    from reappreg.settings import load_params

    settings = load_params(params)
    reg = settings.registry
    decl = load_declarations(models)
    keyring = _keyring(settings, keys, local_keys)
    key = signing_key(local_keys, create=True) if enforce else None
    who = _actor(actor)
    console = Console()
    if mode not in ("auto", "webhook", "poll"):
        raise InputError(f"--mode must be auto, webhook or poll, got {mode!r}")
    with bounded_http(reg.http_retries, reg.http_timeout_s):
        client, uri = _client(settings)

        def report(finding) -> None:
            console.print(f"[red]VIOLATION[/] {escape(finding.describe())}", highlight=False, soft_wrap=True)
            if enforce and not finding.ungated:
                note = do_enforce(client, decl, keyring, key, finding, actor=who, tracking_uri=uri,
                                  lock_timeout_s=reg.promotion_lock_timeout_s, lock_stale_s=reg.promotion_lock_stale_s)
                console.print(f"[yellow]ENFORCED[/] {note}", highlight=False, soft_wrap=True)

        def full_check():
            return audit(client, decl, keyring, tracking_uri=uri).findings

        served = uri.startswith(("http://", "https://"))
        if mode == "webhook" and not served:
            raise InputError(f"--mode webhook needs an `mlflow server` tracking URI; {uri} delivers no webhooks (use --mode poll)")
        if mode == "webhook" or (mode == "auto" and served):
            host, _, port = listen.rpartition(":")
            if not host or not port.isdigit():
                raise InputError(f"--listen must be HOST:PORT, got {listen!r}")
            findings = watch_webhook(client, decl, keyring, tracking_uri=uri, full_check=full_check, listen_host=host,
                                     listen_port=int(port), public_url=public_url, duration_s=duration, max_events=max_events,
                                     report=report, on_ready=lambda url: console.print(f"watching via webhook -> {url}", highlight=False))
        else:
            every = min(max(interval if interval is not None else reg.watch_interval_s, 1.0), 3600.0)
            polls = max_polls if max_polls is not None else reg.watch_max_polls
            if polls < 1:
                raise InputError("--max-polls must be at least 1")
            console.print(f"watching by polling every {every:g}s, {polls} time(s)", highlight=False)
            findings = watch_poll(full_check, interval_s=every, max_polls=polls, report=report)
    if findings:
        raise typer.Exit(1)
    console.print("[green]no alias pointed at a version failing its signed gates[/]")


@app.command()
def pull(
    spec: str = typer.Argument(..., help="NAME@ALIAS, NAME/VERSION, models:/NAME@ALIAS or models:/NAME/VERSION"),
    to: Path = typer.Option(None, "--to", help="Target folder (default: ./<name>-v<version>); must be new or empty"),
    allow_failing_gates: bool = typer.Option(False, "--allow-failing-gates",
                                             help="Take a version that fails its gates (recorded on the version); never tampered bytes"),
    actor: str = typer.Option(None, "--actor", help="Who pulls (recorded with --allow-failing-gates)"),
    params: Path = PARAMS,
    models: Path = MODELS,
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
) -> None:
    """Download one registered MLflow Model version, verified against its signed statement; print its card."""
    from reappreg.registry import bounded_http, load_declarations, parse_spec, resolve_version
    from reappreg.registry import pull as do_pull
    from reappreg.settings import load_params

    parse_spec(spec)  # a malformed spec fails before any connection
    settings = load_params(params)
    decl = load_declarations(models)
    keyring = _keyring(settings, keys, local_keys)
    console = Console()
    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client, uri = _client(settings)
        if to is None:
            mv = resolve_version(client, spec)
            to = Path(f"{mv.name}-v{mv.version}")
        pulled = do_pull(client, decl, keyring, spec, to, tracking_uri=uri, allow_failing_gates=allow_failing_gates,
                         actor=_actor(actor))
    console.print(pulled.card, markup=False, highlight=False, soft_wrap=True)
    if pulled.allowed_failing:
        console.print(f"[bold white on red] FAILING GATES [/] {pulled.check.problems()} -- taken with --allow-failing-gates; recorded "
                      "on the version", highlight=False, soft_wrap=True)
    console.print(f"[green]pulled[/] {pulled.name} version {pulled.version} -> {pulled.folder} ({pulled.files} files, each sha256 "
                  f"equal to the statement signed by {pulled.check.signer.describe()}; tags equal to their signed copy)",
                  highlight=False, soft_wrap=True)


@app.command("sign-keyring")
def sign_keyring_cmd(
    reason: str = typer.Option(..., "--reason", help="Why the keyring changes (recorded in the signed entry)"),
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
) -> None:
    """Sign keyring.yaml as it is now onto the keyring chain, with $REAPPREG_SIGNING_KEY: a key the last signed
    keyring lists as active (for the first entry, one of the keys it lists)."""
    from reappreg.registry.keyring_chain import CHAIN_FILE, sign_keyring
    from reappreg.registry.keys import signing_key

    key = signing_key(local_keys, create=False)
    entry = sign_keyring(keys, key, reason)
    holders = ", ".join(f"{k['holder']} ({k['status']})" for k in entry.keys.values())
    Console().print(f"signed keyring entry {entry.sequence + 1} with key {key.keyid[:16]}: {holders}. Commit "
                    f"{keys / 'keyring.yaml'} and {keys / CHAIN_FILE}.", highlight=False, soft_wrap=True)


@app.command()
def keygen(out: Path = typer.Argument(..., help="New private key file (keep it outside the repository)")) -> None:
    """Create an EC P-256 signing key and print the keyring line that makes its public key a team key."""
    from reappreg.registry.keys import generate_key, key_id, load_public

    public = generate_key(out)
    kid = key_id(load_public(public))
    Console().print(f"private key {out} (mode 600); public key {public}\nkey id {kid}\n"
                    f"To trust it team-wide: copy {public.name} into registry/keys/ and add to registry/keys/keyring.yaml:\n"
                    f"  - {{file: {public.name}, holder: <who>, status: active, keyid: {kid}}}\n"
                    "then a holder of a key the keyring already trusts (for the first key: this one) signs the change:\n"
                    "  reappreg registry sign-keyring --reason '<why>'   (commit keyring.yaml and keyring.chain.jsonl)\n"
                    f"Then sign with it: export REAPPREG_SIGNING_KEY={out}", highlight=False, soft_wrap=True)


@app.command()
def tag(
    receipt: Path = typer.Option("reports/registry/registration.json", "--receipt", help="What `register` registered (committed)"),
    models: Path = MODELS,
    dvc_yaml: Path = typer.Option("dvc.yaml", "--dvc-yaml", help="File declaring the artifact names (`artifacts:`)"),
    lock: Path = typer.Option("dvc.lock", "--lock", help="Lock file recording the md5 of each registered artifact folder"),
) -> None:
    """Write GTO tags (<artifact>@v<N>.0.0 at HEAD) for the registered versions, so `dvc artifacts get` finds them.

    Run from the repository root after committing the pipeline's results; refuses when the
    commit's dvc.lock does not hold the registered bytes. Then push the tags and the data."""
    from reappreg.registry.gto_tags import plan_tags, write_tags

    root = Path.cwd()
    plans = plan_tags(root, receipt=receipt.as_posix(), models=models.as_posix(), dvc_yaml=dvc_yaml.as_posix(), lock=lock.as_posix())
    written = write_tags(root, plans)
    console = Console()
    for plan in plans:
        state = "[green]tagged[/]" if plan in written else f"[yellow]already tagged[/] at {plan.existing_commit[:12]}"
        console.print(f"{state} {plan.tag}: {plan.model} version {plan.version}, {plan.path} md5 {plan.md5}", highlight=False,
                      soft_wrap=True)
    if written:
        console.print(f"push them with: git push origin {' '.join(p.tag for p in written)}   (and the data: dvc push)",
                      highlight=False, soft_wrap=True)
