"""The ``stats`` and ``results`` stages: bound judgments in, claims, their evidence and the results table out.

One function per command (``reappreg stats run|results``). :func:`stats_stage` binds the
judgments to the design re-derived from the upstream files (``stats.design``), draws every
interval and claim (``stats.analysis``), stamps each claim with its inputs, looks and decision
settings (``stats.looks``), writes the outputs and logs them to the stage's MLflow run. A look is
keyed by the policy (the model md5 its generations record) and the bar: generations that name no
policy model are refused, since their looks could not be counted. Under ``dvc repro`` the looks
are also signed into the step's custody link (``byproducts.looks``, ``custody.notes``).
:func:`results_stage` binds every condition's judgments to its own design and writes the results
table (``stats.results``: one row per condition, both interval kinds) under the same pinned
reference bar and decision settings.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.settings import Params

if TYPE_CHECKING:
    from reappreg.stats.results import ResultsFiles


@dataclass(frozen=True)
class StatsFiles:
    """What the stats stage reads (the judged orders and the files their design comes from) and writes."""

    judgments: Path
    generations: Path
    answers: Path
    vignettes: Path
    calibration: Path
    models: Path
    metrics: Path
    plot: Path
    plot_data: Path
    claims: Path

    def inputs(self) -> dict[str, Path]:
        """By role, as the stage run records them (``input.<role>.md5``) and the claims name them."""
        return {"judgments": self.judgments, "calibration": self.calibration, "models": self.models,
                "generations": self.generations, "answers": self.answers, "vignettes": self.vignettes}


def stats_stage(params: Params, files: StatsFiles, *,
                status: Callable[[str], AbstractContextManager] | None = None) -> dict[str, Any]:
    """Run the stage; returns the report (``judge`` state and ``claims``). ``status`` shows a
    message while the intervals are drawn (a rich console's ``status``)."""
    import mlflow

    from reappreg.stats import TrustPolicy, analyze, load_calibration, load_reference_bar, mlflow_metrics, write_outputs
    from reappreg.stats.design import load_bound_judgments
    from reappreg.errors import InputError
    from reappreg.custody import notes
    from reappreg.stats.looks import earlier_looks, keys_of, link_record, look_design, look_tags, stamp_claims
    from reappreg.evidence.reference import check_decision_settings, decision_values
    from reappreg.tracking import stage_run

    p, f = params, files
    reference = load_reference_bar(f.models)
    decided = check_decision_settings(reference, decision_values(p.stats, p.judge), str(f.models))
    trust_policy = TrustPolicy.from_settings(p.stats, p.judge)
    with stage_run("stats", tracking=p.tracking, params=p.stats.model_dump(), inputs=f.inputs(),
                   outputs={"claims": f.claims, "metrics": f.metrics}) as stage:
        frame, design = load_bound_judgments(f.judgments, f.generations, f.answers, f.vignettes, p.judge,
                                             generate=p.generate)
        policy = design["policy_model_md5"]
        if policy is None:
            raise InputError(f"{f.generations}: the generations name no policy model (model_md5, written by "
                             "`generate run`): the looks at this policy cannot be counted; re-run generate")
        calib = load_calibration(f.calibration)
        with (status or (lambda _: nullcontext()))(f"stats: intervals for {len(frame)} judged orders"):
            report = analyze(frame, calib, settings=p.stats, reference=reference, trust_policy=trust_policy,
                             design=design)
            recorded = {k: v for k, v in mlflow.get_run(stage.info.run_id).data.tags.items() if k.startswith("input.")}
            inputs = {k[len("input."):-len(".md5")]: v for k, v in recorded.items()}
            keys = keys_of(report["claims"], policy)
            this_look = look_design(design, inputs)
            client = mlflow.MlflowClient()
            earlier = {key.digest: earlier_looks(client, stage.info.experiment_id, key, stage.info.run_id)
                       for key in {k.digest: k for k in keys.values()}.values()}
            stamp_claims(report["claims"], inputs=inputs, keys=keys, earlier=earlier, design=this_look,
                         decision_settings=decided)
            # This run is a look for every later one: tagged with each question it tested (searched only
            # among FINISHED runs, so a run that fails before writing its claims counts for nothing).
            mlflow.set_tags(look_tags(keys, policy, this_look))
            notes.note("looks", link_record(report["claims"], keys, this_look))   # signed into the step's link
            write_outputs(report, metrics_path=f.metrics, plot_path=f.plot, plot_data_path=f.plot_data,
                          claims_path=f.claims)
        mlflow.set_tag("judge_trusted", str(report["judge"]["trusted"]).lower())
        mlflow.set_tag("judge_position_biased", str(report["judge"]["position_biased"]).lower())
        mlflow.log_metrics(mlflow_metrics(report["metrics"]))
        for path in (f.metrics, f.plot, f.plot_data, f.claims):
            mlflow.log_artifact(str(path), artifact_path="eval")
    return report


def results_stage(params: Params, files: ResultsFiles, *, calibration: Path, models: Path, out_json: Path,
                  markdown: Path, plot: Path) -> dict[str, Any]:
    """The ``results`` stage: every condition bound to its design, the table written; returns it."""
    from reappreg.stats.results import DeclaredStrength, ResultsInputs, build_results, condition_inputs
    from reappreg.stats.results_outputs import write_results
    from reappreg.stats import TrustPolicy, load_calibration, load_reference_bar
    from reappreg.evidence.reference import check_decision_settings, decision_values

    s = params.stats
    reference = load_reference_bar(models)
    check_decision_settings(reference, decision_values(s, params.judge), str(models))
    conditions, fresh = condition_inputs(params, files)
    results = build_results(ResultsInputs(
        conditions=conditions, calibration=load_calibration(calibration), reference=reference, settings=s,
        trust_policy=TrustPolicy.from_settings(s, params.judge), judge=params.judge,
        selection_candidates=s.selection_candidates, fresh_pools=fresh,
        declared_strengths={k: DeclaredStrength(v.win_rate, v.source) for k, v in s.opponent_strength.items()},
        optimism_iterations=s.optimism_bootstrap_iterations, guard=params.guard))
    write_results(results, json_path=out_json, markdown_path=markdown, plot_path=plot, settings=s)
    return results


__all__ = ["StatsFiles", "results_stage", "stats_stage"]
