"""``reappreg report``: one HTML page and its markdown twin from the pipeline's outputs."""

from __future__ import annotations

from pathlib import Path

import typer


def report(
    params: Path = typer.Option("params.yaml", "--params", help="Params file"),
    canonical: Path = typer.Option("data/canonical", "--canonical", help="Canonical data folder"),
    train: Path = typer.Option("data/train", "--train", help="Training pool folder"),
    heldout: Path = typer.Option("data/heldout/answers.jsonl", "--heldout", help="Held-out answers JSONL"),
    validation: Path = typer.Option("data/validation/report.json", "--validation", help="Validation report JSON"),
    certificate: Path = typer.Option("data/guard/certificate.json", "--certificate", help="Guard certificate"),
    rm_metrics: Path = typer.Option("metrics/rm", "--rm-metrics", help="Folder of the reward-model metrics files"),
    policy_metrics: Path = typer.Option("metrics/policy", "--policy-metrics", help="Folder of the policy metrics files"),
    calibration: Path = typer.Option("metrics/judge_calibration.json", "--judge-calibration", help="Judge calibration JSON"),
    eval_metrics: Path = typer.Option("metrics/eval.json", "--eval", help="Win-rate statistics JSON"),
    forest: Path = typer.Option("plots/eval/forest.csv", "--forest", help="Per-vignette win-rate rows (CSV)"),
    claims: Path = typer.Option("reports/claims.json", "--claims", help="Claims and their status (JSON)"),
    registration: Path = typer.Option("reports/registry/registration.json", "--registration", help="Registration receipt JSON"),
    leakscan: Path = typer.Option("reports/leakscan.json", "--leakscan", help="Leak scan report JSON"),
    samples: Path = typer.Option("reports/samples.json", "--samples", help="The policy's sampled answers (JSON)"),
    html_out: Path = typer.Option("reports/report.html", "--html", help="HTML page to write"),
    markdown_out: Path = typer.Option("reports/report.md", "--markdown", help="Markdown twin to write"),
    headline_out: Path = typer.Option("metrics/headline.json", "--headline",
                                      help="Headline numbers to write (the file `dvc metrics show` reads)"),
) -> None:
    """Write the pipeline report (HTML and markdown twin) and the headline metrics."""
    import mlflow

    from reappreg.io import write_json, write_text
    from reappreg.report import (
        ReportSources,
        collect,
        headline,
        render_html,
        render_markdown,
    )
    from reappreg.report.leak import scan_for_heldout
    from reappreg.settings import load_params
    from reappreg.card.build import source_revision
    from reappreg.stats.trust import TrustPolicy
    from reappreg.tracking import stage_run

    settings = load_params(params)
    sources = ReportSources(canonical=canonical, train=train, heldout=heldout, validation=validation,
                            certificate=certificate, rm_metrics=rm_metrics, policy_metrics=policy_metrics,
                            calibration=calibration, eval_metrics=eval_metrics, forest=forest, claims=claims,
                            registration=registration, leakscan=leakscan, samples=samples)
    revision = source_revision()
    changed = revision["dirty_paths"]
    named = ", ".join(f"`{p}`" for p in changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    dirty = f" with uncommitted changes to {named}" if revision["dirty"] == "true" else ""
    subtitle = (f"Built by `reappreg report` at commit `{revision['commit']}`{dirty}, profile `{settings.profile}`, "
                "from the pipeline's tracked files. Every number is read from the file named under its section.")
    trust_policy = TrustPolicy.from_settings(settings.stats, settings.judge)
    sections = collect(sources, health=settings.card.health,
                       max_completion_length=settings.policy.train.max_completion_length,
                       validate_rules=settings.validate_, trust_policy=trust_policy,
                       settings_dump=settings.model_dump(by_alias=True))
    markdown = render_markdown(sections, "reappreg pipeline report", subtitle)
    # Nothing the report shows may carry held-out text (it is training-side: logged to MLflow, kept in git):
    # the page is checked with the guard's own detectors before it is written.
    scanned = scan_for_heldout(heldout, settings.guard, markdown, str(markdown_out))
    subtitle += f" {scanned}"
    numbers = headline(sources)
    with stage_run("report", tracking=settings.tracking):
        write_text(html_out, render_html(sections, "reappreg pipeline report", subtitle))
        write_text(markdown_out, render_markdown(sections, "reappreg pipeline report", subtitle))
        write_json(headline_out, numbers)
        for path in (html_out, markdown_out, headline_out):
            mlflow.log_artifact(str(path), artifact_path="report")
        mlflow.log_metrics({f"{group}/{key}": value for group, values in numbers.items() for key, value in values.items()})
    missing = sum(len(s.missing) for s in sections)
    typer.echo(f"report: {html_out} and {markdown_out} ({len(sections)} sections, {missing} missing input(s)); "
               f"headline {headline_out}")

