"""The ``report`` stage, given the validated settings: the page, its markdown twin and the headline metrics.

The command (``reappreg report``) parses its options, calls :func:`report` and prints what it
returns. The order here is the guarantee: the page is built, checked for held-out text with
the guard's own detectors, and only then written and logged to the stage's MLflow run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reappreg.report.blocks import Section
    from reappreg.report.sections import ReportSources
    from reappreg.settings import Params

TITLE = "reappreg pipeline report"


@dataclass(frozen=True)
class ReportOutputs:
    """What the report stage writes: the ``html`` page, its ``markdown`` twin and the ``headline``
    numbers `dvc metrics show` reads."""

    html: Path
    markdown: Path
    headline: Path


def _subtitle(revision: dict, profile: str) -> str:
    """Where the page comes from: the commit (and any uncommitted changes) and the profile."""
    changed = revision["dirty_paths"]
    named = ", ".join(f"`{p}`" for p in changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    dirty = f" with uncommitted changes to {named}" if revision["dirty"] == "true" else ""
    return (f"Built by `reappreg report` at commit `{revision['commit']}`{dirty}, profile `{profile}`, "
            "from the pipeline's tracked files. Every number is read from the file named under its section.")


def report(params: Params, sources: ReportSources, outputs: ReportOutputs) -> list[Section]:
    """Write the pipeline report (HTML and markdown twin) and the headline metrics from whatever
    of ``sources`` exists; returns the sections (each names its missing inputs)."""
    import mlflow

    from reappreg.card.build import source_revision
    from reappreg.io import write_json, write_text
    from reappreg.report import collect, headline, render_html, render_markdown
    from reappreg.report.leak import scan_for_heldout
    from reappreg.stats.trust import TrustPolicy
    from reappreg.tracking import stage_run

    settings, out = params, outputs
    subtitle = _subtitle(source_revision(), settings.profile)
    trust_policy = TrustPolicy.from_settings(settings.stats, settings.judge)
    sections = collect(sources, health=settings.card.health,
                       max_completion_length=settings.policy.train.max_completion_length,
                       validate_rules=settings.validate_, trust_policy=trust_policy,
                       settings_dump=settings.model_dump(by_alias=True))
    markdown = render_markdown(sections, TITLE, subtitle)
    # Nothing the report shows may carry held-out text (it is training-side: logged to MLflow, kept in git):
    # the page is checked with the guard's own detectors before it is written.
    scanned = scan_for_heldout(sources.heldout, settings.guard, markdown, str(out.markdown))
    subtitle += f" {scanned}"
    numbers = headline(sources, health=settings.card.health,
                       max_completion_length=settings.policy.train.max_completion_length, trust_policy=trust_policy)
    with stage_run("report", tracking=settings.tracking):
        write_text(out.html, render_html(sections, TITLE, subtitle))
        write_text(out.markdown, render_markdown(sections, TITLE, subtitle))
        write_json(out.headline, numbers)
        for path in (out.html, out.markdown, out.headline):
            mlflow.log_artifact(str(path), artifact_path="report")
        mlflow.log_metrics({f"{group}/{key}": value for group, values in numbers.items() for key, value in values.items()})
    return sections


__all__ = ["ReportOutputs", "report"]
