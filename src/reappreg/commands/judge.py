"""`reappreg judge ...`: pairwise judging in both orders, and judge calibration (over reappreg.judge)."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Judge policy answers against held-out answers; calibrate the judge.")


def _logged_params(j, model_override: str | None) -> dict:
    from reappreg.judge import redact_url

    # The key itself is never in params (only the NAME of its environment variable);
    # credentials embedded in the URL are dropped too.
    logged = j.model_dump()
    logged["base_url"] = redact_url(j.base_url)
    if model_override:
        logged["model"] = model_override
    return logged


def _progress(label: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


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
    import mlflow

    from reappreg.io import read_json, read_jsonl, write_jsonl
    from reappreg.judge import build_contests, build_judge, judge_contests, load_judge_prompt, summarise_judgments
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    p = load_params(params)
    j = p.judge
    prompt = load_judge_prompt(prompt_file)
    inputs = {"generations": generations, "answers": answers, "prompt_file": prompt_file}
    tags = {"judge.backend": j.backend, "judge.model": judge_model or j.model}
    if opponent:
        tags["judge.opponents_override"] = ",".join(opponent)
    trusted = None
    if calibration is not None:
        inputs["calibration"] = calibration
        trusted = bool(read_json(calibration)["trusted"])
        tags["judge.trusted"] = str(trusted).lower()
    with stage_run("judge", tracking=p.tracking, params=_logged_params(j, judge_model), inputs=inputs, tags=tags,
                   outputs={"judgments": out}):
        contests = build_contests(read_jsonl(generations), read_jsonl(answers), opponent or j.opponents,
                                  j.answers_per_generation, generations_name=str(generations),
                                  answers_name=str(answers))
        judge = build_judge(j, model=judge_model)
        with _progress("judge") as bar:
            task = bar.add_task("judge", total=2 * len(contests))
            rows = judge_contests(contests, judge, prompt, progress=lambda n: bar.advance(task, n))
        write_jsonl(out, rows)
        summary = summarise_judgments(rows)
        mlflow.set_tag("judge.fingerprint", judge.fingerprint)
        mlflow.log_metrics({**summary, "cache_hits": judge.hits, "cache_misses": judge.misses})
        mlflow.log_artifact(str(out))
    methods = ", ".join(f"{k.split('.', 1)[1]} {v:.0%}" for k, v in summary.items()
                        if k.startswith("verdict_method_rate."))
    typer.echo(f"judge: {summary['n_contests']} contests x 2 orders ({methods}), "
               f"unparseable {summary['unparseable_rate']:.1%}, "
               f"cache {judge.hits} hits / {judge.misses} new -> {out}")
    if trusted is False:
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
    import mlflow

    from reappreg.io import read_jsonl, write_json, write_jsonl
    from reappreg.judge import build_judge, calibrate, human_preference_pairs, load_judge_prompt
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    p = load_params(params)
    j = p.judge
    paths = {name: train / f"{name}.jsonl" for name in ("vignettes", "reappraisals", "ratings")}
    prompt = load_judge_prompt(prompt_file)
    with stage_run("judge_calibrate", tracking=p.tracking, params=_logged_params(j, judge_model),
                   inputs={**paths, "prompt_file": prompt_file},
                   tags={"judge.backend": j.backend, "judge.model": judge_model or j.model}):
        pairs = human_preference_pairs(read_jsonl(paths["vignettes"]), read_jsonl(paths["reappraisals"]),
                                       read_jsonl(paths["ratings"]), j)
        judge = build_judge(j, model=judge_model)
        with _progress("calibrate") as bar:
            task = bar.add_task("calibrate", total=2 * len(pairs))
            metrics, rows = calibrate(pairs, judge, prompt, j, progress=lambda n: bar.advance(task, n))
        write_jsonl(rows_out, rows)
        write_json(out, metrics)
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()
                            if isinstance(v, (int, float)) and not isinstance(v, bool)})
        mlflow.log_metric("trusted", float(metrics["trusted"]))
        mlflow.set_tag("judge.trusted", str(metrics["trusted"]).lower())
        mlflow.set_tag("judge.fingerprint", metrics["judge_fingerprint"])
        mlflow.log_artifact(str(out))
        mlflow.log_artifact(str(rows_out))
    low, high = metrics["agreement_low"], metrics["agreement_high"]
    typer.echo(f"calibrate: {metrics['n_pairs']} pairs (min {metrics['min_pairs']}), agreement "
               f"{metrics['agreement']:.3f} [{low:.3f}, {high:.3f}] (min {metrics['min_agreement']}), "
               f"unparseable {metrics['unparseable_rate']:.1%}, trusted: {str(metrics['trusted']).lower()} -> {out}")
    if not metrics["trusted"]:
        typer.secho("calibrate: WARNING the judge is untrusted; its results are still computed but flagged",
                    fg="yellow", err=True)
