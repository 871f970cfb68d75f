"""`reappreg guard ...`: keep held-out answers out of training text, and prove it.

run     the DVC stage: check every training source, write guarded copies + certificate + sketch
check   ad-hoc files (JSONL / CSV / plain text) against the held-out set or a sketch
audit   re-verify a certificate from the artifacts it names
sketch  export the held-out sketch (and its key) on its own

run, check and sketch call one function of reappreg.guard.stage each; the hit tables and
progress bars are drawn here.
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
        table.add_row(hit.source, record, hit.field, hit.answer_id, hit.detector, hit.view, hit.score_text(), shared)
    if len(hits) > limit:
        table.caption = f"... and {len(hits) - limit} more"
    return table


@app.command()
def run(
    train: list[str] = typer.Option(..., "--train", help=f"Training source {TRAIN_SPEC_HELP}; repeat for each"),
    heldout: str = typer.Option(..., help=f"Held-out answers {SPEC_HELP}"),
    out_dir: Path = typer.Option(..., help="Folder for the guarded copies (same file names)"),
    certificate: Path = typer.Option(..., help="Certificate to write"),
    quarantine: Path = typer.Option(..., help="Hits (and removed records) to write"),
    sketch: Path = typer.Option(..., help="Held-out sketch to write"),
    secret_dir: Path = typer.Option(..., help="Folder of the master secret (created once)"),
    sketch_key: Path = typer.Option(..., help="Sketch key to write (hand out with care)"),
    tokenizer: list[str] = typer.Option([], "--tokenizer", help=TOKENIZER_HELP),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Check every training source against the held-out answers; block or quarantine overlaps.

    Every text is also checked through each --tokenizer (decode(encode(text))) and through the
    RM encoder's tokenizer, view `rm-encoder`, read from rm.encoder.path of the active profile
    (so the full profile checks what its own RM sees, with no path to keep in step)."""
    from rich.console import Console

    from reappreg.guard import DETECTORS, GuardPaths
    from reappreg.guard.stage import GuardSources, run as run_stage
    from reappreg.settings import load_params

    outcome = run_stage(
        load_params(params), GuardSources(heldout=heldout, train=train, tokenizers=tokenizer),
        GuardPaths(guarded_dir=out_dir, certificate_path=certificate, quarantine_path=quarantine, sketch_path=sketch,
                   secret_dir=secret_dir, sketch_key_path=sketch_key),
        progress=_progress,
        on_blocked=lambda hits: Console(stderr=True).print(_hit_table(hits, "held-out overlaps (policy: block)")),
    )
    cert = outcome.certificate
    counts = cert["counts"]
    removed = f", {counts['removed_records']} quarantined" if counts["removed_records"] else ""
    semantic = cert["semantic"]
    note = (f"; semantic report (not blocking): {semantic['pairs_above_threshold']} pair(s) with cosine >= {semantic['threshold']}"
            if semantic.get("enabled") else "; semantic report off")
    typer.echo(f"guard: pass ({counts['texts_checked']} texts in {counts['sources']} sources, detectors "
               f"{', '.join(DETECTORS)}, tokenizer views {', '.join(t['name'] for t in cert['tokenizers']) or 'none'}; "
               f"{counts['hits']} hits{removed}{note}); certificate {certificate}")


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

    from reappreg.guard import DETECTORS
    from reappreg.guard.decode import DECODE_VIEW_NAMES
    from reappreg.guard.stage import CheckRequest, check as check_stage
    from reappreg.settings import load_params

    request = CheckRequest(files=files, heldout=heldout, sketch=sketch, key=key, id_field=id_field, text_fields=text_field,
                           report=report, workers=workers, tokenizers=tokenizer, profile_views=not no_profile_views)
    # A held-out check needs the params (the profile's tokenizer views); a sketch check reads them if they exist.
    checked = check_stage(load_params(params) if (heldout is not None or params.exists()) else None, request,
                          progress=_progress)
    hits = checked.hits
    console = Console()
    if hits:
        console.print(_hit_table(hits, f"overlaps with {checked.against}"))
    flagged = len({(h.source, r) for h in hits for r in h.record_ids})
    console.print(f"checked {checked.n_texts} texts against {checked.n_answers} answers ({checked.against}; detectors "
                  f"{', '.join(DETECTORS)}; tokenizer views: {', '.join(checked.views) or 'none'}; "
                  f"decoding views: {', '.join(DECODE_VIEW_NAMES)}): "
                  f"{len(hits)} hit(s) in {flagged} record(s)", highlight=False, soft_wrap=True)
    if hits:
        # SystemExit, not typer.Exit: the CLI runs click with standalone_mode=False, where an
        # Exit's code is returned instead of raised.
        raise SystemExit(1)


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
    from reappreg.guard.stage import sketch as sketch_stage
    from reappreg.settings import load_params

    n_answers = sketch_stage(load_params(params), heldout=heldout, out=out, secret_dir=secret_dir, key_out=key_out,
                             tokenizers=tokenizer)
    typer.echo(f"sketch: {n_answers} answers -> {out} (key {key_out}; keep it confidential)")
