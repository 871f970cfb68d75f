"""`reappreg guard ...`: keep held-out answers out of training text, and prove it.

run     the DVC stage: check every training source, write guarded copies + certificate + sketch
check   ad-hoc files (JSONL / CSV / plain text) against the held-out set or a sketch
audit   re-verify a certificate from the artifacts it names
sketch  export the held-out sketch (and its key) on its own
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Separation guard: keep held-out answers out of training text.")

DEFAULT_HELDOUT = "data/heldout/answers.jsonl:answer_id:text"
SPEC_HELP = "PATH:ID_FIELD:TEXT_FIELD[,TEXT_FIELD...]"
TRAIN_SPEC_HELP = "[NAME=]PATH:ID_FIELD:TEXT_FIELD[,...] (NAME: guarded file name, default the source's)"
TOKENIZER_HELP = ("Tokenizer view NAME=SPEC (a model folder, a .gguf file or pkg:<package>/<subfolder>); "
                  "repeat for each consuming model")


@contextlib.contextmanager
def _progress(label: str, show_from: int) -> Iterator:
    """A rich progress bar for inputs of at least ``show_from`` texts; yields the library callback."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)
    state: dict = {"task": None}

    def callback(done: int, total: int) -> None:
        if total < show_from:
            return
        if state["task"] is None:
            bar.start()
            state["task"] = bar.add_task(label, total=total)
        bar.advance(state["task"], done)

    try:
        yield callback
    finally:
        if state["task"] is not None:
            bar.stop()


def _hit_table(hits, title: str, limit: int = 50):
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in ("file", "record", "field", "held-out", "detector", "view", "score", "shared passages"):
        table.add_column(column, overflow="fold")
    for hit in hits[:limit]:
        shown = [span if len(span) <= 70 else span[:67] + "..." for span in hit.shared[:3]]
        shared = " | ".join(shown) + (" | ..." if len(hit.shared) > 3 else "")
        record = hit.record_id + (f" ({', '.join(hit.members[:5])}{', ...' if len(hit.members) > 5 else ''})" if hit.members else "")
        table.add_row(hit.source, record, hit.field, hit.answer_id, hit.detector, hit.view, _score_text(hit), shared)
    if len(hits) > limit:
        table.caption = f"... and {len(hits) - limit} more"
    return table


def _score_text(hit) -> str:
    if hit.reason == "min_run":
        return f"run {hit.longest_run} {'letters' if hit.detector == 'chars' else 'words'}"
    return f"{hit.score:.3f} >= {hit.threshold}"


def _hits_summary(hits, limit: int = 5) -> str:
    lines = []
    for h in hits[:limit]:
        members = f" records {h.members}" if h.members else ""
        lines.append(f"  {h.source} record '{h.record_id}'{members} ({h.field}) ~ held-out '{h.answer_id}': "
                     f"{h.detector} {_score_text(h)} (view {h.view}); shared: {'; '.join(repr(s) for s in h.shared[:2])}")
    if len(hits) > limit:
        lines.append(f"  ... and {len(hits) - limit} more")
    return "\n".join(lines)


@app.command()
def run(
    train: list[str] = typer.Option(..., "--train", help=f"Training source {TRAIN_SPEC_HELP}; repeat for each"),
    heldout: str = typer.Option(DEFAULT_HELDOUT, help=f"Held-out answers {SPEC_HELP}"),
    out_dir: Path = typer.Option(Path("data/guarded"), help="Folder for the guarded copies (same file names)"),
    certificate: Path = typer.Option(Path("data/guard/certificate.json"), help="Certificate to write"),
    quarantine: Path = typer.Option(Path("data/guard/quarantine.jsonl"), help="Hits (and removed records) to write"),
    sketch: Path = typer.Option(Path("data/guard/heldout_sketch.json"), help="Held-out sketch to write"),
    secret_dir: Path = typer.Option(Path("data/guard_secret"), help="Folder of the master secret (created once)"),
    sketch_key: Path = typer.Option(Path("data/heldout/sketch.key"), help="Sketch key to write (hand out with care)"),
    tokenizer: list[str] = typer.Option([], "--tokenizer", help=TOKENIZER_HELP),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Check every training source against the held-out answers; block or quarantine overlaps.

    Every text is also checked through each --tokenizer (decode(encode(text))) and through the
    RM encoder's tokenizer, view `rm-encoder`, read from rm.encoder.path of the active profile
    (so the full profile checks what its own RM sees, with no path to keep in step)."""
    import mlflow
    from rich.console import Console

    from reappreg.errors import GuardViolation, InputError
    from reappreg.guard import DETECTORS, GuardPaths, SourceSpec, run_guard
    from reappreg.guard.run import HELDOUT_DEFAULTS
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    p = load_params(params)
    settings = p.guard
    views = _views(_with_rm_tokenizer(tokenizer, p.rm.encoder.path))
    _require_rm_tokenizer(views, p.rm.encoder.path)
    heldout_spec = SourceSpec.parse(heldout, **HELDOUT_DEFAULTS)
    train_specs = [SourceSpec.parse(t) for t in train]
    for spec in train_specs:
        if not spec.text_fields:
            raise InputError(f"--train '{spec.path}': give the fields as {TRAIN_SPEC_HELP}")
    inputs = {"heldout": heldout_spec.path, **{f"train_{Path(s.guarded_name).stem}": s.path for s in train_specs}}
    with stage_run("guard", tracking=p.tracking, params=settings.model_dump(), inputs=inputs):
        with _progress("guard", settings.chunk_size) as progress:
            outcome = run_guard(
                heldout=heldout_spec, train=train_specs, settings=settings, tokenizers=views, progress=progress,
                paths=GuardPaths(guarded_dir=out_dir, certificate_path=certificate, quarantine_path=quarantine,
                                 sketch_path=sketch, secret_dir=secret_dir, sketch_key_path=sketch_key),
            )
        cert = outcome.certificate
        lsh = cert["detectors"]["minhash"]["lsh"]
        mlflow.log_metrics({
            **{k: float(v) for k, v in cert["counts"].items()},
            "passed": float(outcome.passed),
            "seconds": cert["seconds"],
            "lsh_fn_probability_at_threshold": lsh["fn_probability_at_threshold"],
        })
        mlflow.set_tags({"guard.result": cert["result"], "guard.policy": cert["policy"],
                         "guard.heldout_md5": cert["heldout"]["md5"], "guard.normalisation": cert["normalisation"],
                         **{f"guard.tokenizer.{t['name']}.sha256": t["files_sha256"] for t in cert["tokenizers"]}})
        if cert["semantic"].get("enabled"):
            mlflow.log_metric("semantic_pairs_above_threshold", float(cert["semantic"]["pairs_above_threshold"]))
        mlflow.log_artifact(str(certificate))
        counts = cert["counts"]
        if not outcome.passed:
            Console(stderr=True).print(_hit_table(outcome.hits, "held-out overlaps (policy: block)"))
            raise GuardViolation(
                f"guard: {counts['flagged_records']} training record(s) overlap held-out answers "
                f"({counts['hits']} hit(s)); policy 'block' stops the pipeline. Hits: {quarantine}\n"
                + _hits_summary(outcome.hits)
            )
    removed = f", {counts['removed_records']} quarantined" if counts["removed_records"] else ""
    semantic = cert["semantic"]
    note = (f"; semantic report (not blocking): {semantic['pairs_above_threshold']} pair(s) with cosine >= {semantic['threshold']}"
            if semantic.get("enabled") else "; semantic report off")
    typer.echo(f"guard: pass ({counts['texts_checked']} texts in {counts['sources']} sources, detectors "
               f"{', '.join(DETECTORS)}, tokenizer views {', '.join(t['name'] for t in cert['tokenizers']) or 'none'}; "
               f"{counts['hits']} hits{removed}{note}); certificate {certificate}")


def _views(specs: list[str]):
    from reappreg.guard.views import TokenizerSpec, load_views

    return load_views([TokenizerSpec.parse(s) for s in specs])


RM_TOKENIZER_VIEW = "rm-encoder"


def _with_rm_tokenizer(specs: list[str], rm_encoder_path: str) -> list[str]:
    """The --tokenizer specs plus the RM encoder's (view `rm-encoder`) unless one is given by that name."""
    from reappreg.guard.views import TokenizerSpec

    if any(TokenizerSpec.parse(s).name == RM_TOKENIZER_VIEW for s in specs):
        return list(specs)
    return [f"{RM_TOKENIZER_VIEW}={rm_encoder_path}", *specs]


POLICY_TOKENIZER_VIEW = "policy"


def _with_profile_tokenizers(specs: list[str], params) -> list[str]:
    """The --tokenizer specs plus the active profile's: the RM encoder's (`rm-encoder`) and the
    base policy's (`policy`: its local folder, or the GGUF file in its package), each unless a
    view of that name is given."""
    from reappreg.guard.views import TokenizerSpec

    base = params.policy.base
    policy = base.local_path if base.source == "local" else f"pkg:{base.gguf_package}/{base.gguf_file}"
    given = {TokenizerSpec.parse(s).name for s in specs}
    extra = [f"{name}={spec}" for name, spec in ((RM_TOKENIZER_VIEW, params.rm.encoder.path), (POLICY_TOKENIZER_VIEW, policy))
             if name not in given]
    return [*extra, *specs]


def _require_rm_tokenizer(views, rm_encoder_path: str) -> None:
    """The RM trains on what its encoder's tokenizer sees: refuse a guard that did not look."""
    from reappreg.errors import InputError
    from reappreg.guard.views import files_digest, tokenizer_files
    from reappreg.lm import resolve_model

    location = resolve_model(rm_encoder_path, "rm.encoder.path", kind="encoder")
    digest = files_digest(tokenizer_files(location.folder, location.gguf_file))
    if digest not in {v.files_sha256 for v in views}:
        raise InputError(
            f"guard run: the RM encoder's tokenizer (rm.encoder.path '{rm_encoder_path}', files sha256 {digest[:12]}) "
            f"is not among the --tokenizer views ({', '.join(f'{v.name}={v.spec}' for v in views) or 'none'}); "
            f"add --tokenizer rm-encoder={rm_encoder_path}"
        )


@app.command()
def check(
    files: list[str] = typer.Argument(..., help=f"Files to check: PATH or {SPEC_HELP} (JSONL, CSV or plain text)"),
    heldout: str | None = typer.Option(None, help=f"Check against held-out answers {SPEC_HELP}"),
    sketch: Path | None = typer.Option(None, help="Check against a held-out sketch (needs --key)"),
    key: Path | None = typer.Option(None, help="The sketch key that came with the sketch"),
    id_field: str | None = typer.Option(None, help="Id field for PATH-only JSONL/CSV files (default: line numbers)"),
    text_field: list[str] = typer.Option(["text"], help="Text field(s) for PATH-only JSONL/CSV files"),
    report: Path | None = typer.Option(None, help="Also write the hits (with shared passages) as JSONL"),
    workers: int | None = typer.Option(None, help="Processes (default: guard.workers from --params, else 1)"),
    tokenizer: list[str] = typer.Option([], "--tokenizer", help=TOKENIZER_HELP + "; with --sketch, the sketch's own"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
    no_profile_views: bool = typer.Option(False, "--no-profile-views",
                                          help="With --heldout: skip the profile's tokenizer views (rm-encoder, policy)"),
) -> None:
    """Report overlaps of ad-hoc texts with the held-out set; exit 1 when any text overlaps."""
    from rich.console import Console

    from reappreg.errors import InputError
    from reappreg.guard import DETECTORS, FastHasher, HeldoutIndex, SourceSpec, check_units, fragment_groups, read_source
    from reappreg.guard.run import HELDOUT_DEFAULTS, load_heldout
    from reappreg.guard.sketch import index_from_sketch, load_sketch, read_key
    from reappreg.guard.decode import DECODE_VIEW_NAMES
    from reappreg.guard.text import check_sizes
    from reappreg.io import write_jsonl
    from reappreg.settings.guard import GuardSettings
    from reappreg.settings import load_params

    if (heldout is None) == (sketch is None):
        raise InputError("guard check: give exactly one of --heldout or --sketch")
    loaded_params = load_params(params) if (heldout is not None or params.exists()) else None
    settings = loaded_params.guard if loaded_params else None
    chunk_size = settings.chunk_size if settings else 2000
    n_workers = workers or (settings.workers if settings else 1)
    if sketch is not None:
        if key is None:
            raise InputError("guard check --sketch needs --key (the sketch key that came with it)")
        loaded = load_sketch(sketch)
        index = index_from_sketch(loaded, read_key(key), source=str(sketch))
        views = _views(tokenizer)
        _match_sketch_tokenizers(views, loaded, sketch)
        against = f"sketch {sketch}"
    else:
        held = load_heldout(SourceSpec.parse(heldout, **HELDOUT_DEFAULTS))
        # As `guard run` sees them: the active profile's tokenizers (the RM encoder's and the
        # base policy's) are on unless turned off, so an outsider's check equals the pipeline's
        # (a text that only matches once a tokenizer decodes its special tokens away is a hit
        # here too).
        views = _views(tokenizer if no_profile_views else _with_profile_tokenizers(tokenizer, loaded_params))
        index = HeldoutIndex.build(held.answers, held.texts, settings, FastHasher(), views=views)
        against = f"held-out {held.spec.path}"
    sources = [read_source(SourceSpec.parse(t, default_id=id_field, default_text=tuple(text_field))) for t in files]
    units = [u for src in sources for u in src.units]
    check_sizes(units, settings.max_text_chars if settings else GuardSettings().max_text_chars)
    groups = fragment_groups(sources, index.settings)
    with _progress("check", chunk_size) as progress:
        hits = check_units(index, units, groups=groups, views=views, workers=n_workers, chunk_size=chunk_size,
                           max_shared=settings.max_shared_reported if settings else 10,
                           progress=(lambda done: progress(done, len(units))))
    if report is not None:
        write_jsonl(report, (h.to_record() for h in hits))
    console = Console()
    if hits:
        console.print(_hit_table(hits, f"overlaps with {against}"))
    flagged = len({(h.source, r) for h in hits for r in h.record_ids})
    console.print(f"checked {len(units)} texts against {len(index.answer_ids)} answers ({against}; detectors "
                  f"{', '.join(DETECTORS)}; tokenizer views: {', '.join(v.name for v in views) or 'none'}; "
                  f"decoding views: {', '.join(DECODE_VIEW_NAMES)}): "
                  f"{len(hits)} hit(s) in {flagged} record(s)", highlight=False, soft_wrap=True)
    if hits:
        # SystemExit, not typer.Exit: the CLI runs click with standalone_mode=False, where an
        # Exit's code is returned instead of raised.
        raise SystemExit(1)


def _match_sketch_tokenizers(views, sketch: dict, path: Path) -> None:
    """The views given must be exactly the sketch's tokenizers (same names, same file hashes)."""
    from reappreg.errors import InputError

    expected = {t["name"]: t["files_sha256"] for t in sketch.get("tokenizers", [])}
    given = {v.name: v.files_sha256 for v in views}
    if given != expected:
        raise InputError(
            f"{path}: the sketch was made with tokenizer views {sorted(expected) or 'none'}; give exactly those with "
            f"--tokenizer NAME=SPEC (given {sorted(given) or 'none'}"
            + ("; a tokenizer's files differ" if set(given) == set(expected) else "") + ")"
        )


@app.command("audit")
def audit_cmd(
    certificate: Path = typer.Argument(..., help="Guard certificate (data/guard/certificate.json)"),
    root: Path = typer.Option(Path("."), help="Folder the certificate's paths are relative to"),
    secret_dir: Path = typer.Option(Path("data/guard_secret"), help="Master secret folder (to re-derive the sketch)"),
    workers: int = typer.Option(1, help="Processes for the re-check"),
) -> None:
    """Recompute every hash the certificate names and re-run the check; fail on any mismatch or hit."""
    from rich.console import Console

    from reappreg.errors import GuardViolation
    from reappreg.guard import DETECTORS, audit

    with _progress("audit", 2000) as progress:
        report = audit(certificate, root=root, secret_dir=secret_dir, workers=workers, progress=progress)
    console = Console()
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)
    if not report.ok:
        raise GuardViolation(f"audit of {certificate} failed:\n" + "\n".join(f"  - {p}" for p in report.problems))
    semantic = "not in the certificate" if any("no semantic report" in n for n in report.notes) else "reproduced"
    console.print(f"audit of {certificate}: ok (every hash matches; every certified tokenizer's files match; detectors "
                  f"{', '.join(DETECTORS)} re-run in every certified view: guarded copies clean, sources "
                  f"flag exactly the certified records; semantic report {semantic})", highlight=False, soft_wrap=True)


@app.command("sketch")
def sketch_cmd(
    heldout: str = typer.Option(DEFAULT_HELDOUT, help=f"Held-out answers {SPEC_HELP}"),
    out: Path = typer.Option(Path("data/guard/heldout_sketch.json"), help="Sketch to write"),
    secret_dir: Path = typer.Option(Path("data/guard_secret"), help="Master secret folder (created once)"),
    key_out: Path = typer.Option(Path("data/heldout/sketch.key"), help="Sketch key to write"),
    tokenizer: list[str] = typer.Option([], "--tokenizer", help=TOKENIZER_HELP),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Export the held-out set as a sketch (keyed hashes only) and its key."""
    from reappreg.guard import SourceSpec, build_sketch, derive_key, ensure_secret, load_heldout
    from reappreg.guard.certificate import sketch_tokenizers
    from reappreg.guard.run import HELDOUT_DEFAULTS
    from reappreg.guard.sketch import write_key
    from reappreg.hashing import dvc_md5
    from reappreg.io import write_json
    from reappreg.settings import load_params

    settings = load_params(params).guard
    held = load_heldout(SourceSpec.parse(heldout, **HELDOUT_DEFAULTS))
    md5 = dvc_md5(held.spec.path)
    key = derive_key(ensure_secret(secret_dir), md5)
    write_key(key_out, key)
    views = _views(tokenizer)
    write_json(out, build_sketch(held.answers, held.texts, settings, key, md5, views=views,
                                 tokenizers=sketch_tokenizers([v.describe() for v in views])))
    typer.echo(f"sketch: {len(held.answers)} answers -> {out} (key {key_out}; keep it confidential)")
