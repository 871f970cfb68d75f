"""CLI commands for model cards: ``reappreg card build`` and ``reappreg card lint``."""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

import typer
from rich.console import Console

from reappreg.commands.options import option_group

if TYPE_CHECKING:
    from reappreg.card.evidence import EvidencePaths

app = typer.Typer(no_args_is_help=True, help="Model cards generated from tracked metrics, with a claims linter.")

PARAMS = typer.Option("params.yaml", "--params", help="Params file")
MODELS_HELP = "Registry declarations"
MODELS = typer.Option("registry/models.yaml", "--models", help=MODELS_HELP)
# --models where a DVC stage passes it (card build, registry register): no default to drift from dvc.yaml.
MODELS_REQUIRED = typer.Option(..., "--models", help=MODELS_HELP)
EVAL = typer.Option("metrics/eval.json", "--eval", help="Eval metrics (reappreg stats)")
CALIB = typer.Option("metrics/judge_calibration.json", "--judge-calibration", help="Judge calibration")
CLAIMS = typer.Option("reports/claims.json", "--claims", help="Claims (reappreg stats)")


# The evidence files, declared once for every command that reads them (card build, registry register):
# parameter -> (EvidencePaths field, annotation, option), in the order --help lists them. Both commands
# are DVC stages whose cmd passes every one, so none has a default (`card lint`, typed by hand, keeps its own).
EVIDENCE_OPTIONS = {
    "certificate": ("certificate", Path, typer.Option(..., "--certificate", help="Guard certificate")),
    "eval_metrics": ("eval_metrics", Path, typer.Option(..., "--eval", help=EVAL.help)),
    "judge_calibration": ("calibration", Path, typer.Option(..., "--judge-calibration", help=CALIB.help)),
    "claims": ("claims", Path, typer.Option(..., "--claims", help=CLAIMS.help)),
    "rm_metrics": ("rm_metrics", Path, typer.Option(..., "--rm-metrics", help="Folder of reward-model metrics JSON")),
    "policy_metrics": ("policy_metrics", Path, typer.Option(..., "--policy-metrics", help="Folder of policy metrics JSON")),
    "prompt": ("prompt", Path, typer.Option(..., "--prompt", help="GRPO prompt file")),
    "results": ("results", Path, typer.Option(..., "--results", help="Results table (reappreg stats results)")),
}


def _evidence_paths(**paths: Path) -> EvidencePaths:
    from reappreg.card.evidence import EvidencePaths

    return EvidencePaths(**paths)


def with_evidence(command):
    """The evidence options in place of the command's ``evidence_paths`` parameter, which gets an ``EvidencePaths``."""
    return option_group("evidence_paths", EVIDENCE_OPTIONS, _evidence_paths)(command)


@app.command()
@with_evidence
def build(
    params: Path = PARAMS,
    models: Path = MODELS_REQUIRED,
    template: Path = typer.Option(..., "--template", help="Card template (Jinja2)"),
    evidence_paths: EvidencePaths = None,
    out_dir: Path = typer.Option(..., "--out-dir", help="Output folder: one <model>.md per declared model"),
    allow_dirty: bool = typer.Option(False, "--allow-dirty",
                                     help="Record on the card that it was knowingly built from uncommitted changes"),
) -> None:
    """Lint the claims and write a Hugging Face style README card for every declared model.

    Each card records the commit it was built at and whether tracked files other than the
    pipeline's own outputs had uncommitted changes (and whether --allow-dirty was given);
    registration reads that back.
    """
    from reappreg.card.stage import build_cards
    from reappreg.settings import load_params

    build_cards(load_params(params), models=models, template=template, evidence_paths=evidence_paths,
                out_dir=out_dir, allow_dirty=allow_dirty,
                on_card=lambda out, chars: Console().print(f"[green]card[/] {out} ({chars} characters)"))


@app.command()
def lint(
    params: Path = PARAMS,
    eval_metrics: Path = EVAL,
    judge_calibration: Path = CALIB,
    claims: Path = CLAIMS,
) -> None:
    """Check every claim marked supported against the metrics; exit 1 listing the unsupported ones."""
    from reappreg.card.build import lint_claims
    from reappreg.io import read_json
    from reappreg.settings import load_params

    from reappreg.errors import InputError

    settings = load_params(params)
    claim_list, metrics, calibration = read_json(claims), read_json(eval_metrics), read_json(judge_calibration)
    if not isinstance(claim_list, list) or not all(isinstance(c, dict) for c in claim_list):
        raise InputError(f"{claims}: expected a JSON list of claim objects")
    if not isinstance(metrics, dict) or not isinstance(calibration, dict):
        raise InputError(f"{eval_metrics} and {judge_calibration} must each hold one JSON object")
    problems = lint_claims(claim_list, metrics, calibration, min_n_confirm=settings.stats.min_n_confirm)
    console = Console()
    for problem in problems:
        console.print(f"[red]unsupported[/] {problem}", highlight=False)
    if problems:
        raise typer.Exit(1)
    console.print("[green]claims: every supported claim is backed by the metrics[/]")
