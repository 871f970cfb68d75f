"""`reappreg generate ...`: eval generations of a model, a reference condition's answers, an off-distribution set
(thin commands over reappreg.eval.stage)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Generate the policy's eval answers (K independent evals).")


@contextlib.contextmanager
def _progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar of ``total`` units; yields the callback that advances it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


@app.command("run")
def run(
    vignettes: Path = typer.Option(..., help="Eval vignettes JSONL (vignette_id, scenario)"),
    model: Path = typer.Option(..., help="Policy model folder (safetensors + tokenizer)"),
    prompt_file: Path = typer.Option(..., help="The GRPO prompt file (system prompt + user template)"),
    out: Path = typer.Option(..., help="Generations JSONL to write"),
    rm_ensemble: Path = typer.Option(None, help="RM ensemble folder; required when generate.best_of_n > 1"),
    seed: int = typer.Option(None, help="Override generate.seed: a fresh confirmation pool (stats.fresh_pools), "
                                        "whose generation ids start with fresh-s<seed>-"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Answer every eval vignette K times with fresh sampling seeds; optional best-of-N with the RM."""
    from reappreg.eval.stage import GenerateFiles, generate
    from reappreg.settings import load_params

    files = GenerateFiles(vignettes=vignettes, model=model, prompt_file=prompt_file, out=out, rm_ensemble=rm_ensemble)
    generated = generate(load_params(params), files, seed=seed, progress=_progress)
    typer.echo(f"generate: {generated.n_rows} sequences ({int(generated.metrics['n_selected'])} to judge) in "
               f"{generated.seconds:.0f}s -> {out}")


@app.command("reference")
def reference(
    name: str = typer.Option(..., help="The reference condition (a key of stats.reference_conditions)"),
    vignettes: Path = typer.Option(..., help="Eval vignettes JSONL (vignette_id, scenario)"),
    train: list[str] = typer.Option(..., "--train", help="Training source PATH:ID_FIELD:TEXT_FIELD[,...]; repeat"),
    out: Path = typer.Option(..., help="Generations JSONL to write (the judge's input)"),
    guard_report: Path = typer.Option(..., help="JSON summary of the guard check to write"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """A reference condition's answers as generations, refused if any training text overlaps them."""
    from reappreg.eval.stage import reference as reference_stage
    from reappreg.settings import load_params

    rows = reference_stage(load_params(params), name=name, vignettes=vignettes, train=train, out=out,
                           guard_report=guard_report)
    typer.echo(f"generate reference: {len(rows)} answers of {name!r}, guard: 0 overlaps with "
               f"{len(train)} training source(s) -> {out}")


@app.command("ood")
def ood(
    name: str = typer.Option(..., help="The off-distribution set (a name in stats.ood_sets)"),
    train: list[str] = typer.Option(..., "--train", help="Training source PATH:ID_FIELD:TEXT_FIELD[,...]; repeat"),
    out_dir: Path = typer.Option(..., help="Folder to write vignettes.jsonl, answers.jsonl and guard.json into"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Fresh scenarios and an opponent's answers, refused if any training text contains a scenario."""
    from reappreg.eval.stage import ood as ood_stage
    from reappreg.settings import load_params

    prepared = ood_stage(load_params(params), name=name, train=train, out_dir=out_dir)
    typer.echo(f"generate ood: {len(prepared.vignettes)} fresh scenarios, {len(prepared.answers)} "
               f"{prepared.opponent!r} answers, guard: 0 overlaps with {len(train)} training source(s), marked OOD "
               f"-> {out_dir}")
