"""`reappreg stats run|results`: contest-level win-rates with iid and cluster intervals, forest plot, claims;
the results table (over reappreg.stats.stage)."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Win-rate statistics, forest plot and machine-readable claims.")


@app.command("run")
def run(
    judgments: Path = typer.Option(..., help="Judged orders (judge stage output)"),
    generations: Path = typer.Option(..., help="The generations the judge stage judged (the plan's pools and seeds)"),
    answers: Path = typer.Option(..., help="The split's held-out answers (answer id -> vignette, source, text)"),
    vignettes: Path = typer.Option(..., help="The split's vignette list (every vignette must be in the design)"),
    calibration: Path = typer.Option(..., help="Judge calibration JSON"),
    metrics: Path = typer.Option(..., help="Flat metrics JSON to write (dvc metrics)"),
    plot: Path = typer.Option(..., help="Forest plot PNG to write"),
    plot_data: Path = typer.Option(..., help="Forest plot rows CSV to write (dvc plots)"),
    claims: Path = typer.Option(..., help="Machine-readable claims to write"),
    models: Path = typer.Option(..., help="Registry declarations (reference_bar:)"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """Compute every table and claim; an untrusted or position-biased judge is flagged, never dropped."""
    from rich.console import Console

    from reappreg.settings import load_params
    from reappreg.stats.stage import StatsFiles, stats_stage

    console = Console()
    files = StatsFiles(judgments=judgments, generations=generations, answers=answers, vignettes=vignettes,
                       calibration=calibration, models=models, metrics=metrics, plot=plot, plot_data=plot_data,
                       claims=claims)
    report = stats_stage(load_params(params), files, status=console.status)

    judge = report["judge"]
    ok = judge["trusted"] and not judge["position_biased"]
    heading = "stats: claims" + ("" if ok else " [JUDGE NOT USABLE: none supported]")
    console.print(heading, style=None if ok else "bold red", highlight=False)
    if not judge["trusted"]:
        console.print(f"  untrusted judge: {judge['trust_reason']}", highlight=False, markup=False)
    if judge["position_biased"]:
        console.print(f"  position-biased judgments: {judge['position_bias_reason']}", highlight=False, markup=False)
    for claim in report["claims"]:
        ev = claim["evidence"]
        ci = "-" if ev["cluster_low"] is None else f"[{ev['cluster_low']:.3f}, {ev['cluster_high']:.3f}]"
        rate = "-" if ev["win_rate"] is None else f"{ev['win_rate']:.3f}"
        n_eff = "-" if ev["n_eff"] is None else f"{ev['n_eff']:.1f}"
        flags = ", ".join(claim["flags"]) or "none"
        console.print(f"  {claim['status']:<12} supported={claim['supported']!s:<5} {claim['claim_id']}\n"
                      f"      win-rate {rate}  worst-case cluster CI {ci}  n {ev['n']} contests  n_eff {n_eff}"
                      f"  flags: {flags}", highlight=False, markup=False)


@app.command("results")
def results_cmd(
    policy_judgments: Path = typer.Option(..., help="Judgments of the GRPO policy (the judge stage's output)"),
    policy_generations: Path = typer.Option(..., help="Generations of the GRPO policy (the generate stage's output)"),
    conditions_dir: Path = typer.Option(..., help="Folder of the other conditions: <name>/judgments.jsonl next to "
                                                  "<name>/generations.jsonl"),
    answers: Path = typer.Option(..., help="The split's held-out answers JSONL (what the judge paired against)"),
    vignettes: Path = typer.Option(..., help="The split's vignette list JSONL"),
    ood_dir: Path = typer.Option(Path("data/eval/ood"), help="Folder of the off-distribution sets: <name>/"),
    calibration: Path = typer.Option(..., help="Judge calibration JSON"),
    out_json: Path = typer.Option(..., "--json", help="Results table to write (metrics/results.json)"),
    markdown: Path = typer.Option(..., help="Results table in Markdown to write (reports/results.md)"),
    plot: Path = typer.Option(..., help="Forest plot PNG of every row to write"),
    models: Path = typer.Option(..., help="Registry declarations (reference_bar:)"),
    params: Path = typer.Option(Path("params.yaml"), help="Params file"),
) -> None:
    """The results table: one row per condition, each bound to its design, with both interval kinds."""
    from reappreg.stats.results import ResultsFiles
    from reappreg.settings import load_params
    from reappreg.stats.stage import results_stage

    files = ResultsFiles(policy_judgments=policy_judgments, policy_generations=policy_generations,
                         conditions_dir=conditions_dir, answers=answers, vignettes=vignettes, ood_dir=ood_dir)
    results = results_stage(load_params(params), files, calibration=calibration, models=models, out_json=out_json,
                            markdown=markdown, plot=plot)
    sel = results["selection"]
    for row in results["rows"]:
        ci = "-" if row["cluster_low"] is None else f"[{row['cluster_low']:.3f}, {row['cluster_high']:.3f}]"
        rate = "-" if row["win_rate"] is None else f"{row['win_rate']:.3f}"
        typer.echo(f"  {row['row_id']:<40} {row['status']:<9} win-rate {rate}  cluster CI {ci}  n {row['n']}")
    typer.echo(f"stats results: {len(results['rows'])} rows, promotable: {str(sel['promotable']).lower()} "
               f"({sel['reason']}) -> {out_json}, {markdown}")
