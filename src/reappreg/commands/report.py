"""``reappreg report``: one HTML page and its markdown twin from the pipeline's outputs (over reappreg.report.stage)."""

from __future__ import annotations

from pathlib import Path

import typer


def report(
    params: Path = typer.Option("params.yaml", "--params", help="Params file"),
    canonical: Path = typer.Option(..., "--canonical", help="Canonical data folder"),
    train: Path = typer.Option(..., "--train", help="Training pool folder"),
    heldout: Path = typer.Option(..., "--heldout", help="Held-out answers JSONL"),
    validation: Path = typer.Option(..., "--validation", help="Validation report JSON"),
    certificate: Path = typer.Option(..., "--certificate", help="Guard certificate"),
    rm_metrics: Path = typer.Option(..., "--rm-metrics", help="Folder of the reward-model metrics files"),
    policy_metrics: Path = typer.Option(..., "--policy-metrics", help="Folder of the policy metrics files"),
    calibration: Path = typer.Option(..., "--judge-calibration", help="Judge calibration JSON"),
    eval_metrics: Path = typer.Option(..., "--eval", help="Win-rate statistics JSON"),
    forest: Path = typer.Option(..., "--forest", help="Per-vignette win-rate rows (CSV)"),
    claims: Path = typer.Option(..., "--claims", help="Claims and their status (JSON)"),
    registration: Path = typer.Option(..., "--registration", help="Registration receipt JSON"),
    leakscan: Path = typer.Option(..., "--leakscan", help="Leak scan report JSON"),
    samples: Path = typer.Option(..., "--samples", help="The policy's sampled answers (JSON)"),
    results: Path = typer.Option(..., "--results", help="The results table across models (metrics/results.json)"),
    rm_comparison: Path = typer.Option(..., "--rm-comparison",
                                       help="The reward-model comparison figure with the trivial rankers (PNG)"),
    html_out: Path = typer.Option(..., "--html", help="HTML page to write"),
    markdown_out: Path = typer.Option(..., "--markdown", help="Markdown twin to write"),
    headline_out: Path = typer.Option(..., "--headline",
                                      help="Headline numbers to write (the file `dvc metrics show` reads)"),
) -> None:
    """Write the pipeline report (HTML and markdown twin) and the headline metrics."""
    from reappreg.report import ReportSources
    from reappreg.report.stage import ReportOutputs, report as report_stage
    from reappreg.settings import load_params

    sources = ReportSources(canonical=canonical, train=train, heldout=heldout, validation=validation,
                            certificate=certificate, rm_metrics=rm_metrics, policy_metrics=policy_metrics,
                            calibration=calibration, eval_metrics=eval_metrics, forest=forest, claims=claims,
                            registration=registration, leakscan=leakscan, samples=samples, results=results,
                            rm_comparison=rm_comparison)
    sections = report_stage(load_params(params), sources,
                            ReportOutputs(html=html_out, markdown=markdown_out, headline=headline_out))
    missing = sum(len(s.missing) for s in sections)
    typer.echo(f"report: {html_out} and {markdown_out} ({len(sections)} sections, {missing} missing input(s)); "
               f"headline {headline_out}")
