"""The evaluation stages, given the validated settings: ``generate`` (the ``generate*`` stages),
``reference`` (``reference_condition``), ``ood`` (``ood_prepare``) and ``samples``.

The commands (``reappreg generate run|reference|ood``, ``reappreg samples``) parse their
options, call one function here and print what it returns; each function owns its checks, its
MLflow run where the stage has one (``generate``) and the files it writes. The progress bar is
the command's (a :data:`reappreg.progress.ProgressBar`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.progress import ProgressBar, no_progress

if TYPE_CHECKING:
    from reappreg.settings import Params


@dataclass(frozen=True)
class GenerateFiles:
    """What generation reads (the eval ``vignettes``, the policy ``model`` folder, the GRPO
    ``prompt_file`` and, for best-of-N, the ``rm_ensemble`` folder) and the generations file
    ``out`` it writes."""

    vignettes: Path
    model: Path
    prompt_file: Path
    out: Path
    rm_ensemble: Path | None = None


@dataclass(frozen=True)
class Generated:
    """How many sequences were written, the metrics logged for them (``n_selected``: how many
    the judge will see) and the wall-clock seconds generation took."""

    n_rows: int
    metrics: dict[str, float]
    seconds: float


def generate(params: Params, files: GenerateFiles, *, seed: int | None = None,
             progress: ProgressBar = no_progress) -> Generated:
    """Answer every eval vignette K times with fresh sampling seeds (best-of-N with the RM
    ensemble when ``generate.best_of_n > 1``). ``seed`` overrides ``generate.seed``: a fresh
    confirmation pool, whose generation ids start with ``fresh-s<seed>-``."""
    import time

    import mlflow

    from reappreg.errors import InputError
    from reappreg.eval.generate import (
        build_generator, generate_evaluations, plan_samples, select_vignettes, summarise_generations,
    )
    from reappreg.eval.plan import fresh_pool_prefix
    from reappreg.io import read_jsonl, write_jsonl
    from reappreg.tracking import stage_run

    p, f = params, files
    g = p.generate if seed is None else p.generate.model_copy(update={"seed": seed})
    id_prefix = "" if seed is None else fresh_pool_prefix(seed)
    inputs = {"vignettes": f.vignettes, "model": f.model, "prompt_file": f.prompt_file}
    if g.best_of_n > 1:
        if f.rm_ensemble is None:
            raise InputError("generate.best_of_n > 1 needs --rm-ensemble (the RM ensemble folder)")
        inputs["rm_ensemble"] = f.rm_ensemble
    logged = {**g.model_dump(), "thinking": p.policy.reward.thinking,
              "missing_close_tag": p.policy.reward.missing_close_tag}
    with stage_run("generate", tracking=p.tracking, params=logged, inputs=inputs, outputs={"generations": f.out},
                   tags={"generate.backend": g.backend}):
        rows_in = select_vignettes(read_jsonl(f.vignettes), g.vignettes, source=str(f.vignettes))
        scorer = None
        if g.best_of_n > 1:
            from reappreg.rm.ensemble import load_ensemble

            scorer = load_ensemble(f.rm_ensemble)
        generator = build_generator(g, f.model)
        total = len(plan_samples([v["vignette_id"] for v in rows_in], g, id_prefix))
        started = time.perf_counter()
        with progress("generate", total) as advance:
            rows = generate_evaluations(rows_in, generator, g, template=f.prompt_file, scorer=scorer,
                                        thinking=p.policy.reward.thinking,
                                        missing_close_tag=p.policy.reward.missing_close_tag,
                                        progress=advance, id_prefix=id_prefix)
        seconds = time.perf_counter() - started
        write_jsonl(f.out, rows)
        metrics = summarise_generations(rows)
        metrics["seconds"] = seconds
        metrics["tokens_per_second"] = sum(r["n_tokens"] for r in rows) / seconds if seconds > 0 else 0.0
        mlflow.log_metrics(metrics)
        mlflow.log_artifact(str(f.out))
    return Generated(n_rows=len(rows), metrics=metrics, seconds=seconds)


def reference(params: Params, *, name: str, vignettes: Path, train: list[str], out: Path,
              guard_report: Path) -> list[dict[str, Any]]:
    """A reference condition's answers (``stats.reference_conditions[name]``) as generations of
    ``vignettes``, refused if any training source (``train``: guard source specs) overlaps them;
    writes them to ``out`` and the guard check's summary to ``guard_report``; returns the rows."""
    from reappreg.eval.conditions import declared_condition, read_reference_answers, reference_generations
    from reappreg.io import read_jsonl, write_json, write_jsonl

    condition = declared_condition(params.stats.reference_conditions, name, field="stats.reference_conditions",
                                   command="generate reference")
    answers_path = Path(condition.answers)
    answers = read_reference_answers(answers_path)
    rows, summary = reference_generations(name, answers, read_jsonl(vignettes), training_specs=train,
                                          guard=params.guard, source_name=str(answers_path))
    write_jsonl(out, rows)
    write_json(guard_report, {"condition": name, "answers": str(answers_path), **summary})
    return rows


@dataclass(frozen=True)
class OodSet:
    """An off-distribution set as written: its fresh scenarios, the opponent's answers, and
    which source the answers are (``opponent``)."""

    vignettes: list[dict[str, Any]]
    answers: list[dict[str, Any]]
    opponent: str


def ood(params: Params, *, name: str, train: list[str], out_dir: Path) -> OodSet:
    """The off-distribution set ``stats.ood_sets[name]``: fresh scenarios and an opponent's
    answers, refused if any training source (``train``) contains a scenario; writes
    ``vignettes.jsonl``, ``answers.jsonl`` and ``guard.json`` into ``out_dir``."""
    from reappreg.eval.conditions import check_fresh_scenarios, declared_condition, load_situation_csv
    from reappreg.io import write_json, write_jsonl

    spec = declared_condition(params.stats.ood_sets, name, field="stats.ood_sets", command="generate ood")
    vignettes, answers = load_situation_csv(spec.csv, scenario_field=spec.scenario_field,
                                            answer_field=spec.answer_field, set_name=name, opponent=spec.opponent,
                                            max_scenarios=spec.max_scenarios)
    summary = check_fresh_scenarios(name, vignettes, training_specs=train, guard=params.guard)
    write_jsonl(out_dir / "vignettes.jsonl", vignettes)
    write_jsonl(out_dir / "answers.jsonl", answers)
    write_json(out_dir / "guard.json", {"set": name, "csv": spec.csv, "opponent": spec.opponent, **summary})
    return OodSet(vignettes=vignettes, answers=answers, opponent=spec.opponent)


@dataclass(frozen=True)
class SamplesFiles:
    """What the samples stage reads (the final policy's ``generations`` and ``judgments``, the
    other conditions under ``conditions_dir``, the GRPO reward's ``ensemble``) and writes (``out``)."""

    generations: Path
    judgments: Path
    conditions_dir: Path
    ensemble: Path
    out: Path


@dataclass(frozen=True)
class Sampled:
    """The samples file's content and how many model conditions it covers."""

    result: dict[str, Any]
    n_conditions: int


def samples(params: Params, files: SamplesFiles) -> Sampled:
    """The first ``report.samples_per_vignette`` answers per vignette of every model condition
    (the final policy, ``stats.model_conditions``, each kept checkpoint), each with its GRPO
    reward and both verdicts, written to ``files.out``."""
    from reappreg.eval.samples import collect_samples, model_conditions
    from reappreg.io import write_json
    from reappreg.policy.reward import EnsembleReward
    from reappreg.rm.ensemble import load_ensemble
    from reappreg.settings.conditions import checkpoint_condition

    f = files
    # Model conditions only: a reference condition's answers are held out like the bar's.
    names = [*params.stats.model_conditions, *(checkpoint_condition(n) for n in params.policy.train.checkpoint_steps)]
    conditions = model_conditions(f.generations, f.judgments, f.conditions_dir, names)
    reward = EnsembleReward(load_ensemble(f.ensemble), params.policy.reward)
    result = collect_samples(conditions, reward, params.report.samples_per_vignette)
    write_json(f.out, result)
    return Sampled(result=result, n_conditions=len(conditions))


__all__ = ["GenerateFiles", "Generated", "OodSet", "Sampled", "SamplesFiles", "generate", "ood", "reference", "samples"]
