"""CLI commands for the MLflow model registry: register, promote, verify, watch, pull.

The tracking/registry URI is ``MLFLOW_TRACKING_URI`` when set (e.g. a remote
``mlflow server``), else ``tracking.uri`` from params (the sqlite store under registry/).

Two ways to move things, for two audiences:

* A team that only needs a model: ``reappreg registry pull NAME@champion --to DIR`` (or
  ``NAME/VERSION``) downloads exactly that version from the registry, checks every file
  against the hashes recorded at registration, and prints its card. No DVC, no git checkout.
* A team that reproduces or extends the pipeline: ``git checkout <revision on the card>``,
  ``dvc pull`` (data, intermediate artifacts and models from the configured DVC remote;
  ``dvc push`` sends them), then ``dvc repro``. The version's ``md5.<path>`` tags are DVC
  hashes, so they can be compared with ``dvc.lock`` directly.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import typer
from rich.console import Console

from reappreg.commands.card import CALIB, CERT, CLAIMS, EVAL, MODELS, PARAMS, POLICY_METRICS, PROMPT, RM_METRICS, evidence_from

app = typer.Typer(no_args_is_help=True, help="MLflow model registry: register, promote, verify, watch, pull.")


def _client(settings):
    from reappreg.registry import connect
    from reappreg.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(settings.tracking.uri)
    return connect(uri, attempts=settings.registry.connect_attempts, backoff_s=settings.registry.connect_backoff_s), uri


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
    others = {p: dvc_md5(p) for p in model.other_inputs}
    return name, model, manifest, training, others, card_path.read_text(encoding="utf-8")


@app.command()
def register(
    params: Path = PARAMS,
    models: Path = MODELS,
    cards: Path = typer.Option("reports/cards", "--cards", help="folder of <model>.md cards (reappreg card build)"),
    certificate: Path = CERT,
    eval_metrics: Path = EVAL,
    judge_calibration: Path = CALIB,
    claims: Path = CLAIMS,
    rm_metrics: Path = RM_METRICS,
    policy_metrics: Path = POLICY_METRICS,
    prompt: Path = PROMPT,
    lock_file: Path = typer.Option("work/registry/register.lock", "--lock-file", help="host-wide registration lock"),
    receipt: Path = typer.Option("reports/registry/registration.json", "--receipt", help="what was registered"),
) -> None:
    """Register every declared model (one new version per changed artifact; alias `candidate`)."""
    import mlflow
    from rich.progress import Progress

    from reappreg.io import write_json
    from reappreg.registry import bounded_http, folder_md5, load_declarations, provenance_tags, register_version, registration_lock
    from reappreg.settings import load_params
    from reappreg.tracking import git_state, stage_run

    settings = load_params(params)
    reg = settings.registry
    decl = load_declarations(models)
    evidence = evidence_from(certificate, eval_metrics, judge_calibration, claims, rm_metrics, policy_metrics, prompt)
    plans = []
    # Refuse before touching the registry: every model's training text must be certified.
    with Progress(transient=True) as progress:
        task = progress.add_task("hashing artifacts and inputs", total=len(decl.models))
        for name, model in decl.models.items():
            plans.append(_plan(name, model, evidence, cards))
            progress.advance(task)
    git = git_state()
    console = Console()
    results = []
    # The artifacts' hashes come from their manifests (set below): a checkpoint is read once.
    inputs = {"models": models, "cards": cards, **evidence.sources}
    with bounded_http(reg.http_retries, reg.http_timeout_s), registration_lock(lock_file, reg.lock_timeout_s):
        client, _ = _client(settings)
        with stage_run("register", tracking=settings.tracking, params=reg.model_dump(), inputs=inputs):

            def log_folder(folder: Path, artifact_path: str) -> str:
                mlflow.log_artifacts(str(folder), artifact_path=artifact_path)
                return mlflow.get_artifact_uri(artifact_path)

            for name, model, manifest, training, others, card in plans:
                mlflow.set_tag(f"input.{model.artifact}.md5", folder_md5(manifest))
                mlflow.log_text(card, f"{name}/README.md")
                result = register_version(
                    client, name=name, model_description=" ".join(model.description.split()),
                    artifact_dir=Path(model.artifact), manifest=manifest, training_md5s=training,
                    tags=provenance_tags(model, evidence, input_md5s={**training, **others}, git=git),
                    card=card, log_artifacts=log_folder, candidate_alias=reg.candidate_alias,
                    stale_after_s=reg.stale_registration_s,
                )
                results.append(result.as_dict())
                mlflow.set_tag(f"registered.{name}", f"v{result.version} ({'new' if result.created else 'unchanged'})")
                mlflow.log_metric(f"registry/{name}/created", int(result.created))
                colour = "green" if result.created else "yellow"
                console.print(f"[{colour}]{name}[/] version {result.version}: {result.note}", highlight=False, soft_wrap=True)
            write_json(receipt, {"registered": results})


@app.command()
def promote(
    name: str = typer.Argument(..., help="registered model name"),
    version: str = typer.Argument(..., help="version number"),
    alias: str = typer.Option("champion", "--alias", help="alias to point at the version"),
    reason: str = typer.Option(..., "--reason", help="why (recorded on the version)"),
    force: bool = typer.Option(False, "--force", help="promote despite failing gates (recorded loudly)"),
    actor: str = typer.Option(None, "--actor", help="who promotes (default: $REAPPREG_ACTOR or the login name)"),
    params: Path = PARAMS,
    models: Path = MODELS,
) -> None:
    """Point ALIAS at NAME/VERSION if it passes the gates in registry/models.yaml; record who/when/why."""
    from reappreg.registry import bounded_http, load_declarations
    from reappreg.registry import promote as do_promote
    from reappreg.settings import load_params

    settings = load_params(params)
    decl = load_declarations(models)
    who = actor or os.environ.get("REAPPREG_ACTOR") or getpass.getuser()
    console = Console()
    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client, _ = _client(settings)
        result = do_promote(client, decl, name=name, version=version, alias=alias, reason=reason, actor=who, force=force)
    if result.forced:
        gates = "; ".join(f"{c.gate} ({c.detail})" for c in result.failed_gates)
        console.print(f"[bold white on red] FORCED PROMOTION [/] {name}@{alias} -> v{version} by {who} despite failing gates: {gates}. "
                      f"Recorded as tags promotion.{alias}.* and model tag FORCED.{alias}.", highlight=False, soft_wrap=True)
    else:
        console.print(f"[green]promoted[/] {name}@{alias} -> v{version} (all gates pass) by {who}", highlight=False, soft_wrap=True)


@app.command()
def verify(params: Path = PARAMS, models: Path = MODELS) -> None:
    """List every alias pointing at a version that fails its gates (exit 1 if any)."""
    from reappreg.registry import bounded_http, load_declarations, verify_aliases
    from reappreg.settings import load_params

    settings = load_params(params)
    decl = load_declarations(models)
    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client, _ = _client(settings)
        findings = verify_aliases(client, decl)
    console = Console()
    for finding in findings:
        colour = "red" if finding.violation else ("yellow" if not finding.declared else "green")
        console.print(f"[{colour}]{'VIOLATION' if finding.violation else 'ok'}[/] {finding.describe()}", highlight=False, soft_wrap=True)
    bad = [f for f in findings if f.violation]
    if bad:
        console.print(f"[bold red]{len(bad)} alias(es) point at versions that fail their gates[/]")
        raise typer.Exit(1)
    console.print(f"[green]{len(findings)} alias(es) checked; none fails its gates[/]")


@app.command()
def watch(
    params: Path = PARAMS,
    models: Path = MODELS,
    mode: str = typer.Option("auto", "--mode", help="auto (webhook on an mlflow server, else poll) | webhook | poll"),
    interval: float = typer.Option(None, "--interval", help="seconds between polls (default: registry.watch_interval_s)"),
    max_polls: int = typer.Option(None, "--max-polls", help="number of polls (default: registry.watch_max_polls)"),
    listen: str = typer.Option("127.0.0.1:0", "--listen", help="webhook listener HOST:PORT (0 = any free port)"),
    public_url: str = typer.Option(None, "--public-url", help="URL the server posts to, if not http://HOST:PORT/"),
    duration: float = typer.Option(3600.0, "--duration", help="webhook mode: stop after this many seconds"),
    max_events: int = typer.Option(1000, "--max-events", help="webhook mode: stop after this many alias events"),
) -> None:
    """Watch the registry and report every alias that points at a version failing its gates (exit 1 if any)."""
    from reappreg.errors import InputError
    from reappreg.registry import bounded_http, load_declarations, verify_aliases, watch_poll, watch_webhook
    from reappreg.settings import load_params

    settings = load_params(params)
    reg = settings.registry
    decl = load_declarations(models)
    console = Console()
    report = lambda f: console.print(f"[red]VIOLATION[/] {f.describe()}", highlight=False, soft_wrap=True)  # noqa: E731
    if mode not in ("auto", "webhook", "poll"):
        raise InputError(f"--mode must be auto, webhook or poll, got {mode!r}")
    with bounded_http(reg.http_retries, reg.http_timeout_s):
        client, uri = _client(settings)
        served = uri.startswith(("http://", "https://"))
        if mode == "webhook" and not served:
            raise InputError(f"--mode webhook needs an `mlflow server` tracking URI; {uri} delivers no webhooks (use --mode poll)")
        if mode == "webhook" or (mode == "auto" and served):
            host, _, port = listen.rpartition(":")
            if not host or not port.isdigit():
                raise InputError(f"--listen must be HOST:PORT, got {listen!r}")
            findings = watch_webhook(client, decl, listen_host=host, listen_port=int(port), public_url=public_url,
                                     duration_s=duration, max_events=max_events, report=report,
                                     on_ready=lambda url: console.print(f"watching via webhook -> {url}", highlight=False))
        else:
            every = min(max(interval if interval is not None else reg.watch_interval_s, 1.0), 3600.0)
            polls = max_polls if max_polls is not None else reg.watch_max_polls
            if polls < 1:
                raise InputError("--max-polls must be at least 1")
            console.print(f"watching by polling every {every:g}s, {polls} time(s)", highlight=False)
            findings = watch_poll(lambda: verify_aliases(client, decl), interval_s=every, max_polls=polls, report=report)
    if findings:
        raise typer.Exit(1)
    console.print("[green]no alias pointed at a version failing its gates[/]")


@app.command()
def pull(
    spec: str = typer.Argument(..., help="NAME@ALIAS or NAME/VERSION"),
    to: Path = typer.Option(None, "--to", help="target folder (default: ./<name>-v<version>); must be new or empty"),
    params: Path = PARAMS,
) -> None:
    """Download one registered version, verify every file against its recorded hashes, print its card."""
    from reappreg.registry import bounded_http, parse_spec, resolve_version
    from reappreg.registry import pull as do_pull
    from reappreg.settings import load_params

    parse_spec(spec)  # a malformed spec fails before any connection
    settings = load_params(params)
    console = Console()
    with bounded_http(settings.registry.http_retries, settings.registry.http_timeout_s):
        client, uri = _client(settings)
        if to is None:
            mv = resolve_version(client, spec)
            to = Path(f"{mv.name}-v{mv.version}")
        pulled = do_pull(client, spec, to, tracking_uri=uri)
    console.print(pulled.card, markup=False, highlight=False, soft_wrap=True)
    console.print(f"[green]pulled[/] {pulled.name} version {pulled.version} -> {pulled.folder} ({pulled.files} files, every hash verified)",
                  highlight=False, soft_wrap=True)
