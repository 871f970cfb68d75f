"""`reappreg generate run`: eval generations of the policy (thin wrapper over reappreg.eval.generate)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Generate the policy's eval answers (K independent evals).")


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
    import mlflow
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from reappreg.errors import InputError
    from reappreg.eval.generate import (
        build_generator, generate_evaluations, plan_samples, select_vignettes, summarise_generations,
    )
    from reappreg.eval.plan import fresh_pool_prefix
    from reappreg.io import read_jsonl, write_jsonl
    from reappreg.settings import load_params
    from reappreg.tracking import stage_run

    p = load_params(params)
    g = p.generate if seed is None else p.generate.model_copy(update={"seed": seed})
    id_prefix = "" if seed is None else fresh_pool_prefix(seed)
    inputs = {"vignettes": vignettes, "model": model, "prompt_file": prompt_file}
    if g.best_of_n > 1:
        if rm_ensemble is None:
            raise InputError("generate.best_of_n > 1 needs --rm-ensemble (the RM ensemble folder)")
        inputs["rm_ensemble"] = rm_ensemble
    logged = {**g.model_dump(), "thinking": p.policy.reward.thinking,
              "missing_close_tag": p.policy.reward.missing_close_tag}
    with stage_run("generate", tracking=p.tracking, params=logged, inputs=inputs, outputs={"generations": out},
                   tags={"generate.backend": g.backend}):
        rows_in = select_vignettes(read_jsonl(vignettes), g.vignettes, source=str(vignettes))
        scorer = None
        if g.best_of_n > 1:
            from reappreg.rm.ensemble import load_ensemble

            scorer = load_ensemble(rm_ensemble)
        generator = build_generator(g, model)
        total = len(plan_samples([v["vignette_id"] for v in rows_in], g, id_prefix))
        started = time.perf_counter()
        with Progress(TextColumn("generate"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
            task = bar.add_task("generate", total=total)
            rows = generate_evaluations(rows_in, generator, g, template=prompt_file, scorer=scorer,
                                        thinking=p.policy.reward.thinking,
                                        missing_close_tag=p.policy.reward.missing_close_tag,
                                        progress=lambda n: bar.advance(task, n), id_prefix=id_prefix)
        seconds = time.perf_counter() - started
        write_jsonl(out, rows)
        metrics = summarise_generations(rows)
        metrics["seconds"] = seconds
        metrics["tokens_per_second"] = sum(r["n_tokens"] for r in rows) / seconds if seconds > 0 else 0.0
        mlflow.log_metrics(metrics)
        mlflow.log_artifact(str(out))
    typer.echo(f"generate: {len(rows)} sequences ({int(metrics['n_selected'])} to judge) in {seconds:.0f}s -> {out}")


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
    from reappreg.eval.conditions import declared_condition, read_reference_answers, reference_generations
    from reappreg.io import read_jsonl, write_json, write_jsonl
    from reappreg.settings import load_params

    p = load_params(params)
    condition = declared_condition(p.stats.reference_conditions, name, field="stats.reference_conditions",
                                   command="generate reference")
    answers_path = Path(condition.answers)
    answers = read_reference_answers(answers_path)
    rows, summary = reference_generations(name, answers, read_jsonl(vignettes), training_specs=train, guard=p.guard,
                                          source_name=str(answers_path))
    write_jsonl(out, rows)
    write_json(guard_report, {"condition": name, "answers": str(answers_path), **summary})
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
    from reappreg.eval.conditions import check_fresh_scenarios, declared_condition, load_situation_csv
    from reappreg.io import write_json, write_jsonl
    from reappreg.settings import load_params

    p = load_params(params)
    spec = declared_condition(p.stats.ood_sets, name, field="stats.ood_sets", command="generate ood")
    vignettes, answers = load_situation_csv(spec.csv, scenario_field=spec.scenario_field,
                                            answer_field=spec.answer_field, set_name=name, opponent=spec.opponent,
                                            max_scenarios=spec.max_scenarios)
    summary = check_fresh_scenarios(name, vignettes, training_specs=train, guard=p.guard)
    write_jsonl(out_dir / "vignettes.jsonl", vignettes)
    write_jsonl(out_dir / "answers.jsonl", answers)
    write_json(out_dir / "guard.json", {"set": name, "csv": spec.csv, "opponent": spec.opponent, **summary})
    typer.echo(f"generate ood: {len(vignettes)} fresh scenarios, {len(answers)} {spec.opponent!r} answers, guard: 0 "
               f"overlaps with {len(train)} training source(s), marked OOD -> {out_dir}")
