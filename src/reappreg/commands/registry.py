"""CLI commands for the MLflow model registry: register, promote, verify, watch, pull, keygen, keys, tag.

The tracking/registry URI is ``MLFLOW_TRACKING_URI`` when set (e.g. a remote
``mlflow server``), else ``tracking.uri`` from params (the sqlite store under registry/).

Keys (README "Trust model"): versions and promotions are signed with ``$REAPPREG_SIGNING_KEY``
(a PEM private key, or several separated by ':') or, when unset, with this clone's local key
under ``--local-keys`` (generated on first registration, gitignored: a one-key TUF root trusted
by this clone only). Verification trusts the team's TUF root in ``--keys`` (pinned on first
use), plus the local one-key root when ``registry.trust_local_key``; ``reappreg registry keys``
edits the team's.

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

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from reappreg.commands.card import MODELS, MODELS_REQUIRED, PARAMS, with_evidence
from reappreg.commands.options import option_group

if TYPE_CHECKING:
    from reappreg.card.evidence import EvidencePaths
    from reappreg.registry.stage import RegistryFiles

app = typer.Typer(no_args_is_help=True, help="Model registry: register, promote, verify, watch, pull, keygen, keys, tag.")

KEYS_HELP = "The team's TUF trust metadata (N.root.json, targets, snapshot, timestamp), committed"
LOCAL_KEYS_HELP = "This clone's local signing key (gitignored)"
KEYS = typer.Option("registry/keys", "--keys", help=KEYS_HELP)
LOCAL_KEYS = typer.Option("work/registry/keys", "--local-keys", help=LOCAL_KEYS_HELP)


# parameter -> (RegistryFiles field, annotation, option), in the order --help lists them. Each command
# declares --params itself, right before its ``files``: the command reads it, the library reads these.
REGISTRY_OPTIONS = {
    "models": ("models", Path, MODELS),
    "keys": ("keys", Path, KEYS),
    "local_keys": ("local_keys", Path, LOCAL_KEYS),
}


def _registry_files(**paths: Path) -> RegistryFiles:
    from reappreg.registry.stage import RegistryFiles

    return RegistryFiles(**paths)


def with_registry_files(command):
    """--models, --keys and --local-keys in place of the command's ``files`` parameter (a RegistryFiles)."""
    return option_group("files", REGISTRY_OPTIONS, _registry_files)(command)


@app.command()
@with_evidence
def register(
    params: Path = PARAMS,
    models: Path = MODELS_REQUIRED,
    cards: Path = typer.Option(..., "--cards", help="Folder of <model>.md cards (reappreg card build)"),
    evidence_paths: EvidencePaths = None,
    keys: Path = typer.Option(..., "--keys", help=KEYS_HELP),
    local_keys: Path = typer.Option(..., "--local-keys", help=LOCAL_KEYS_HELP),
    lock_file: Path = typer.Option(..., "--lock-file", help="Host-wide registration lock"),
    receipt: Path = typer.Option(..., "--receipt", help="What was registered"),
    lock: Path = typer.Option(..., "--lock", help="DVC lock the claims must match (the stats stage's inputs and output)"),
) -> None:
    """Register every declared model as a signed MLflow Model version (one per changed artifact; alias `candidate`).

    A policy's kept checkpoints (its declaration's checkpoints folder) are versions of their own, registered
    first in step order (each in a nested run of its own), so `candidate` ends on the final model."""
    from rich.progress import Progress

    from reappreg.registry.stage import (
        RegistrationFiles,
        RegistryFiles,
        register_models,
    )
    from reappreg.settings import load_params

    console = Console()

    def registered(name, result) -> None:
        colour = "green" if result.created else "yellow"
        console.print(f"[{colour}]{name}[/] version {result.version}: {result.note}", highlight=False, soft_wrap=True)

    files = RegistrationFiles(registry=RegistryFiles(models=models, keys=keys, local_keys=local_keys), cards=cards,
                              evidence=evidence_paths, registration_lock=lock_file, receipt=receipt, dvc_lock=lock)
    register_models(load_params(params), files, progress=Progress(transient=True), on_registered=registered,
                    announce=lambda line: console.print(escape(line), highlight=False, soft_wrap=True))


@app.command()
@with_registry_files
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
    files: RegistryFiles = None,
) -> None:
    """Point ALIAS at NAME/VERSION if its signed evidence passes the gates; compare-and-set; signed history entry."""
    from reappreg.registry.promotion import PromotionRequest
    from reappreg.registry.stage import actor_name, parse_expect, promote_alias
    from reappreg.settings import load_params

    settings = load_params(params)
    who = actor_name(actor)
    console = Console()
    result = promote_alias(settings, files, PromotionRequest(name=name, version=version, alias=alias, reason=reason, actor=who,
                                                             expected=parse_expect(expect), force=force),
                           announce=lambda line: console.print(escape(line), highlight=False, soft_wrap=True))
    was = "unset" if result.previous is None else f"v{result.previous}"
    if result.forced:
        console.print(f"[bold white on red] FORCED PROMOTION [/] {name}@{alias} -> v{version} (was {was}) by {who} despite: "
                      f"{result.check.problems()}. Recorded in the signed history ({result.history_tag}) and model tag FORCED.{alias}.",
                      highlight=False, soft_wrap=True)
    else:
        console.print(f"[green]promoted[/] {name}@{alias} -> v{version} (was {was}) by {who}: signed gates pass "
                      f"({', '.join(c.gate for c in result.check.gates)}); history {result.history_tag}", highlight=False, soft_wrap=True)


def _print_audit(console, result) -> None:
    for finding in result.findings:
        if finding.violation:
            label, colour = "VIOLATION", "red"
        elif finding.pending:
            label, colour = "PENDING", "yellow"
        else:
            label, colour = "ok", "yellow" if not finding.declared else "green"
        console.print(f"[{colour}]{label}[/] {escape(finding.describe())}", highlight=False, soft_wrap=True)
    for problem in result.history_problems:
        console.print(f"[red]HISTORY[/] {escape(problem)}", highlight=False, soft_wrap=True)
    for problem in result.model_problems:
        console.print(f"[red]MODEL[/] {escape(problem)}", highlight=False, soft_wrap=True)


# `registry verify` exits 3 when the only thing keeping it from passing is pending UI requests
# (nothing is wrong; a watcher with a key has not decided them yet), 1 on any problem.
PENDING_EXIT = 3


@app.command()
@with_registry_files
def verify(params: Path = PARAMS, files: RegistryFiles = None) -> None:
    """Verify every model and alias: signature, bytes, tags vs signed copy, gates from signed evidence, alias vs signed
    history (exit 1 on any problem, 3 when only pending UI requests remain)."""
    from reappreg.registry.stage import verify_aliases
    from reappreg.settings import load_params

    console = Console()
    verified = verify_aliases(load_params(params), files,
                              announce=lambda line: console.print(escape(line), highlight=False, soft_wrap=True))
    result, uri = verified.audit, verified.uri
    _print_audit(console, result)
    for name in result.undeclared:
        console.print(f"[yellow]undeclared[/] {escape(name)}: not in {files.models}; its aliases are listed above and not counted "
                      "as verified", highlight=False, soft_wrap=True)
    accounted = (f"{result.models} registered model(s) accounted for, every page read: {verified.declared} declared, "
                 f"{len(result.undeclared)} undeclared, {result.bookkeeping} promotion lock(s)/claim(s) checked by structure")
    if verified.empty:
        console.print(f"[bold red]nothing to verify[/]: no alias of a declared model at {uri} ({accounted}). An empty "
                      "registry is not a pass.", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if result.problems:
        console.print(f"[bold red]{len(result.violations)} alias(es) fail their signed gates or show tampering; "
                      f"{len(result.history_problems)} history problem(s); {len(result.model_problems)} model problem(s); "
                      f"{len(result.pending)} pending request(s)[/] ({accounted})", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if result.pending:
        console.print(f"[bold yellow]{len(result.pending)} pending request(s)[/]: aliases set in the store that no key holder "
                      f"has decided yet (`reappreg registry watch --enforce` accepts or restores each); "
                      f"{len(result.verified)} alias(es) verified ({accounted})", highlight=False, soft_wrap=True)
        raise typer.Exit(PENDING_EXIT)
    console.print(f"[green]{len(result.verified)} alias(es) of {verified.declared} declared model(s) verified[/] "
                  f"({accounted}): each alias equals the replay of its model's signed history, each envelope signed by a "
                  "trusted key, every file re-hashed against its signed sha256, every recorded tag and the card equal to "
                  "their signed copy, every gate read from signed evidence; each history is no shorter than the head this "
                  f"clone saw before ({verified.heads_file}). Not checked: whether the signing key's holder ran the "
                  "pipeline honestly.", highlight=False, soft_wrap=True)


@app.command()
@with_registry_files
def watch(
    params: Path = PARAMS,
    files: RegistryFiles = None,
    mode: str = typer.Option("auto", "--mode", help="How alias events arrive: auto (webhook on an MLflow server, else poll), webhook or poll"),
    enforce: bool = typer.Option(False, "--enforce", help="Decide UI requests (accept when gates and the alias's UI policy "
                                                          "allow, else restore) and restore tampered tags; signed"),
    actor: str = typer.Option(None, "--actor", help="Who enforces (default: $REAPPREG_ACTOR or the login name)"),
    interval: float = typer.Option(None, "--interval", help="Seconds between polls (default: registry.watch_interval_s)"),
    max_polls: int = typer.Option(None, "--max-polls", help="Number of polls (default: registry.watch_max_polls)"),
    listen: str = typer.Option("127.0.0.1:0", "--listen", help="Webhook listener HOST:PORT (0 = any free port)"),
    public_url: str = typer.Option(None, "--public-url", help="URL the server posts to, if not http://HOST:PORT/"),
    duration: float = typer.Option(3600.0, "--duration", help="Webhook mode: stop after this many seconds"),
    max_events: int = typer.Option(1000, "--max-events", help="Webhook mode: stop after this many alias events"),
) -> None:
    """Watch every alias against its signed state and gates; with --enforce accept or restore each UI request (signed)
    and restore tampered tags (exit 1 when anything is left for a key holder)."""
    from reappreg.registry.stage import (
        WatchCallbacks,
        WatchOptions,
        actor_name,
        watch_aliases,
    )
    from reappreg.registry.watch import WebhookListener
    from reappreg.settings import load_params

    settings = load_params(params)
    console = Console()
    webhook = WebhookListener(listen=listen, public_url=public_url, duration=duration, max_events=max_events)

    def seen(finding) -> None:
        label = "PENDING" if finding.pending else "VIOLATION"
        console.print(f"[{'yellow' if finding.pending else 'red'}]{label}[/] {escape(finding.describe())}", highlight=False,
                      soft_wrap=True)

    left, problems = watch_aliases(
        settings, files, WatchOptions(mode=mode, enforce=enforce, interval=interval, max_polls=max_polls, webhook=webhook),
        actor=actor_name(actor),
        callbacks=WatchCallbacks(
            on_violation=seen,
            on_enforced=lambda note: console.print(f"[yellow]ENFORCED[/] {escape(note)}", highlight=False, soft_wrap=True),
            on_webhook=lambda url: console.print(f"watching via webhook -> {url}", highlight=False),
            on_polling=lambda every, polls: console.print(f"watching by polling every {every:g}s, {polls} time(s)",
                                                          highlight=False),
            on_problem=lambda problem: console.print(f"[red]HISTORY[/] {escape(problem)}", highlight=False, soft_wrap=True),
            on_trust=lambda line: console.print(escape(line), highlight=False, soft_wrap=True),
        ),
    )
    if left or problems:
        raise typer.Exit(1)
    console.print("[green]nothing left for a key holder[/]: every alias is its signed state"
                  + (" (pending requests were decided above)" if enforce else ""))


@app.command()
@with_registry_files
def pull(
    spec: str = typer.Argument(..., help="NAME@ALIAS, NAME/VERSION, models:/NAME@ALIAS or models:/NAME/VERSION"),
    to: Path = typer.Option(None, "--to", help="Target folder (default: ./<name>-v<version>); must be new or empty"),
    allow_failing_gates: bool = typer.Option(False, "--allow-failing-gates",
                                             help="Take a version that fails its gates (recorded on the version); never tampered bytes"),
    actor: str = typer.Option(None, "--actor", help="Who pulls (recorded with --allow-failing-gates)"),
    params: Path = PARAMS,
    files: RegistryFiles = None,
) -> None:
    """Download one registered MLflow Model version, verified against its signed statement; print its card."""
    from reappreg.evidence.declarations import parse_spec
    from reappreg.registry.stage import actor_name, pull_version
    from reappreg.settings import load_params

    parse_spec(spec)  # a malformed spec fails before any connection
    settings = load_params(params)
    console = Console()
    pulled = pull_version(settings, files, spec=spec, to=to, allow_failing_gates=allow_failing_gates, actor=actor_name(actor),
                          announce=lambda line: console.print(escape(line), highlight=False, soft_wrap=True))
    console.print(pulled.card, markup=False, highlight=False, soft_wrap=True)
    if pulled.allowed_failing:
        console.print(f"[bold white on red] FAILING GATES [/] {pulled.check.problems()} -- taken with --allow-failing-gates; recorded "
                      "on the version", highlight=False, soft_wrap=True)
    console.print(f"[green]pulled[/] {pulled.name} version {pulled.version} -> {pulled.folder} ({pulled.files} files, each sha256 "
                  f"equal to the statement signed by {pulled.check.signer.describe()}; tags equal to their signed copy)",
                  highlight=False, soft_wrap=True)


@app.command()
def keygen(out: Path = typer.Argument(..., help="New private key file (keep it outside the repository)")) -> None:
    """Create an EC P-256 signing key and print how its public key gets a role in the team's TUF metadata."""
    from reappreg.trust.keys import generate_key, key_id, load_public

    public = generate_key(out)
    kid = key_id(load_public(public))
    Console().print(f"private key {out} (mode 600); public key {public}\nkey id {kid}\n"
                    "To trust it team-wide, a holder of the keys that sign the team's targets metadata gives it a role:\n"
                    f"  reappreg registry keys role promotion --key {public} [--key OTHER.pub.pem] --threshold 1\n"
                    "(the first team root: `reappreg registry keys init`), then commits registry/keys/.\n"
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


# --------------------------------------------------------------------------- keys: the team's TUF metadata

keys_app = typer.Typer(no_args_is_help=True, help="The team's keys as TUF metadata: init, role, renew, sign, status, seal.")
app.add_typer(keys_app, name="keys")

EXPIRES = typer.Option(365, "--expires-days", help="Days each new metadata version stays valid")


def _role_spec(value: str, what: str):
    """ROLE=PUB[,PUB...][:THRESHOLD] -> (role, RoleSpec)."""
    from reappreg.errors import InputError
    from reappreg.trust.admin import RoleSpec

    role, sep, rest = value.partition("=")
    if not sep or not rest:
        raise InputError(f"{what} {value!r}: expected ROLE=PUB.pem[,PUB.pem...][:THRESHOLD]")
    keys, _, threshold = rest.partition(":")
    if threshold and not threshold.isdigit():
        raise InputError(f"{what} {value!r}: the threshold after ':' must be a whole number")
    return role, RoleSpec([Path(k) for k in keys.split(",") if k], int(threshold or 1))


def _print_lines(lines) -> None:
    console = Console()
    for line in lines:
        console.print(escape(line), highlight=False, soft_wrap=True)


@keys_app.command("init")
def keys_init(
    root: list[Path] = typer.Option(..., "--root", help="Public key file holding TUF's root role; repeat"),
    root_threshold: int = typer.Option(1, "--root-threshold", help="Root signatures a root change needs"),
    online: list[Path] = typer.Option(..., "--online", help="Public key file holding targets, snapshot and timestamp; repeat"),
    role: list[str] = typer.Option([], "--role", help="A registry role ROLE=PUB.pem[,PUB.pem...][:THRESHOLD] "
                                                        "(default: the --online keys, threshold 1); repeat"),
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
    expires_days: int = EXPIRES,
) -> None:
    """Create the team's TUF root in --keys, signed with $REAPPREG_SIGNING_KEY (the root and online keys' holders)."""
    from reappreg.trust.keys import signing_keys
    from reappreg.trust.admin import RoleSpec, init

    roles = dict(_role_spec(r, "--role") for r in role)
    repo = init(keys, root=RoleSpec(list(root), root_threshold), online=RoleSpec(list(online), 1), roles=roles,
                signers=signing_keys(local_keys, create=False), expiry_days=expires_days)
    _print_lines(repo.staged or [f"team root v1 written to {keys}; commit it. Each clone pins it on first use."])


@keys_app.command("role")
def keys_role(
    name: str = typer.Argument(..., help="A registry role (registration, promotion, acceptance, enforcement, pipeline, "
                                         "layout) or a TUF top-level role (root, targets, snapshot, timestamp)"),
    key: list[Path] = typer.Option(..., "--key", help="Public key file that holds the role from now on; repeat"),
    threshold: int = typer.Option(1, "--threshold", help="Signatures the role needs"),
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
    expires_days: int = EXPIRES,
) -> None:
    """Give a role its keys and threshold (a new targets version; for a top-level role, a root rotation)."""
    from reappreg.trust.keys import signing_keys
    from reappreg.trust.admin import RoleSpec, set_role

    repo = set_role(keys, name, RoleSpec(list(key), threshold), signers=signing_keys(local_keys, create=False),
                    expiry_days=expires_days)
    _print_lines(repo.staged or [f"'{name}' is now {len(key)} key(s), threshold {threshold}, in {keys}; commit it, then "
                                 "seal each registry (`reappreg registry keys seal`) so no entry can be dated under the "
                                 "old version"])


@keys_app.command("renew")
def keys_renew(
    root: bool = typer.Option(False, "--root", help="Also a new root version (signed by the root keys)"),
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
    expires_days: int = EXPIRES,
) -> None:
    """New versions with a new expiry date (expired metadata is refused everywhere)."""
    from reappreg.trust.keys import signing_keys
    from reappreg.trust.admin import renew_all

    repo = renew_all(keys, signers=signing_keys(local_keys, create=False), expiry_days=expires_days, root=root)
    _print_lines(repo.staged or [f"renewed {keys} for {expires_days} days; commit it"])


@keys_app.command("sign")
def keys_sign(keys: Path = KEYS, local_keys: Path = LOCAL_KEYS, expires_days: int = EXPIRES) -> None:
    """Add your signatures ($REAPPREG_SIGNING_KEY) to staged versions; publish those that now reach their thresholds."""
    from reappreg.trust.keys import signing_keys
    from reappreg.trust.admin import sign

    _print_lines(sign(keys, signers=signing_keys(local_keys, create=False), expiry_days=expires_days)
                 or ["nothing staged"])


@keys_app.command("status")
def keys_status(params: Path = PARAMS, keys: Path = KEYS, local_keys: Path = LOCAL_KEYS) -> None:
    """Which roots this clone trusts (pinned where), and which keys hold each role with what threshold."""
    from reappreg.registry.stage import RegistryFiles, load_trust_for
    from reappreg.trust import ROLES
    from reappreg.settings import load_params

    trust = load_trust_for(load_params(params), RegistryFiles(models=Path("registry/models.yaml"), keys=keys,
                                                               local_keys=local_keys))
    lines = list(trust.describe())
    for origin in trust.origins.values():
        for role in ROLES:
            keyids, threshold = origin.role_keyids(origin.current, role)
            lines.append(f"  {origin.name} {role}: {threshold} of {', '.join(k[:16] for k in keyids)}")
        expires = origin.expires(origin.current.root, origin.current.targets)
        lines.append(f"  {origin.name} targets v{origin.current.targets} expires {expires.isoformat()}")
    _print_lines(lines)


@keys_app.command("seal")
@with_registry_files
def keys_seal(
    params: Path = PARAMS,
    files: RegistryFiles = None,
    actor: str = typer.Option(None, "--actor", help="Who seals (default: $REAPPREG_ACTOR or the login name)"),
) -> None:
    """After a key change: a signed entry under the current trust version on every declared model's history in
    this store, so no later entry can name an older version."""
    from reappreg.registry.stage import actor_name, seal_histories
    from reappreg.settings import load_params

    _print_lines(seal_histories(load_params(params), files, actor=actor_name(actor), announce=lambda line: Console().print(
        escape(line), highlight=False, soft_wrap=True)))


@keys_app.command("sign-layout")
def keys_sign_layout(
    reason: str = typer.Option(..., "--reason", help="Why the layout or registry/models.yaml changed (signed with them)"),
    params: Path = PARAMS,
    keys: Path = KEYS,
    local_keys: Path = LOCAL_KEYS,
) -> None:
    """Sign the in-toto layout generated from dvc.yaml and the declarations (registry/models.yaml) with the `layout`
    role's key ($REAPPREG_SIGNING_KEY, or this clone's local key for its own one-key root)."""
    from reappreg.custody.layout import sign_layout
    from reappreg.custody.links import Signing
    from reappreg.settings import load_params
    from reappreg.trust.keys import signing_keys
    from reappreg.trust.local import clone_trust

    trust = clone_trust(load_params(params).registry, keys, local_keys, create_local=True)
    signers = signing_keys(local_keys, create=True)
    version = trust.current_for([k.keyid for k in signers], "layout")
    signed = sign_layout(Path.cwd(), Signing(trust, signers, version), reason=reason)
    _print_lines([*trust.describe(), f"signed {signed.layout} and {signed.declarations} under {version}"
                  + ("; commit them" if version.origin == "team" else " (this clone only)")])
