"""`reappreg judge ...`: pairwise judging in both orders, and judge calibration (over reappreg.judge.stage)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Judge policy answers against held-out answers; calibrate the judge.")


@contextlib.contextmanager
def _progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar of ``total`` units; yields the callback that advances it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


@app.command("run")
def run(
    generations: Path = typer.Option(..., help="Generations JSONL from `reappreg generate run`"),
    prompt_file: Path = typer.Option(..., help="The judge prompt file (pipelines/prompts/judge_prompt.yaml)"),
    answers: Path = typer.Option(..., help="Held-out answers JSONL (GPT-4-0314 and opponents)"),
    out: Path = typer.Option(..., help="Judgments JSONL to write (one row per judged order)"),
    calibration: Path = typer.Option(None, help="Judge calibration JSON from `reappreg judge calibrate`; an untrusted judge is tagged and warned"),
    judge_model: str = typer.Option(None, help="Override judge.model (a folder, or a served model name)"),
    opponent: list[str] = typer.Option([], "--opponent",
                                       help="Judge against these answer sources instead of judge.opponents "
                                            "(an off-distribution set's opponent); repeat"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Judge every selected generation against held-out answers, each contest in both A/B orders."""
    from reappreg.judge.stage import JudgeFiles, judge
    from reappreg.settings import load_params

    files = JudgeFiles(generations=generations, answers=answers, prompt_file=prompt_file, out=out, calibration=calibration)
    judged = judge(load_params(params), files, judge_model=judge_model, opponents=opponent, progress=_progress)
    summary = judged.summary
    methods = ", ".join(f"{k.split('.', 1)[1]} {v:.0%}" for k, v in summary.items()
                        if k.startswith("verdict_method_rate."))
    typer.echo(f"judge: {summary['n_contests']} contests x 2 orders ({methods}), "
               f"unparseable {summary['unparseable_rate']:.1%}, "
               f"cache {judged.cache_hits} hits / {judged.cache_misses} new -> {out}")
    if judged.trusted is False:
        typer.secho("judge: WARNING the judge failed calibration (trusted: false); results are flagged downstream",
                    fg="yellow", err=True)


@app.command("calibrate")
def calibrate_cmd(
    train: Path = typer.Option(..., help="Training pool folder (vignettes, reappraisals, ratings JSONL)"),
    prompt_file: Path = typer.Option(..., help="The judge prompt file (pipelines/prompts/judge_prompt.yaml)"),
    out: Path = typer.Option(..., help="Calibration metrics JSON to write"),
    rows_out: Path = typer.Option(..., "--rows", help="Per-order calibration judgments JSONL to write"),
    judge_model: str = typer.Option(None, help="Override judge.model (a folder, or a served model name)"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Agreement with human preference pairs, position bias and order consistency; sets `trusted`."""
    from reappreg.judge.stage import CalibrationFiles, calibrate
    from reappreg.settings import load_params

    metrics = calibrate(load_params(params), CalibrationFiles(train=train, prompt_file=prompt_file, out=out, rows=rows_out),
                        judge_model=judge_model, progress=_progress)
    low, high = metrics["agreement_low"], metrics["agreement_high"]
    typer.echo(f"calibrate: {metrics['n_pairs']} pairs (min {metrics['min_pairs']}), agreement "
               f"{metrics['agreement']:.3f} [{low:.3f}, {high:.3f}] (min {metrics['min_agreement']}), "
               f"unparseable {metrics['unparseable_rate']:.1%}, trusted: {str(metrics['trusted']).lower()} -> {out}")
    if not metrics["trusted"]:
        typer.secho("calibrate: WARNING the judge is untrusted; its results are still computed but flagged",
                    fg="yellow", err=True)
