"""`reappreg stats run`: win-rates with iid and vignette-cluster intervals, forest plot, claims."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="Win-rate statistics, forest plot and machine-readable claims.")


@app.command("run")
def run(
    judgments: Path = typer.Option(..., help="Judged orders (judge stage output)"),
    calibration: Path = typer.Option(..., help="Judge calibration JSON"),
    metrics: Path = typer.Option(..., help="Flat metrics JSON to write (dvc metrics)"),
    plot: Path = typer.Option(..., help="Forest plot PNG to write"),
    plot_data: Path = typer.Option(..., help="Forest plot rows CSV to write (dvc plots)"),
    claims: Path = typer.Option(..., help="Machine-readable claims to write"),
    params: Path = typer.Option(Path("params.yaml"), help="params.yaml"),
) -> None:
    """Compute every table and claim; an untrusted judge is flagged, never silently dropped."""
    import mlflow
    from rich.console import Console

    from reappreg.settings import load_params
    from reappreg.stats import analyze, load_calibration, load_judgments, mlflow_metrics, write_outputs
    from reappreg.tracking import stage_run

    p = load_params(params)
    settings = p.stats.model_dump()
    console = Console()
    inputs = {"judgments": judgments, "calibration": calibration}
    with stage_run("stats", tracking=p.tracking, params=settings, inputs=inputs):
        frame = load_judgments(judgments)
        calib = load_calibration(calibration)
        with console.status(f"stats: intervals for {len(frame)} judged orders"):
            report = analyze(frame, calib, **settings)
            write_outputs(report, metrics_path=metrics, plot_path=plot, plot_data_path=plot_data,
                          claims_path=claims)
        mlflow.set_tag("judge_trusted", str(report["judge"]["trusted"]).lower())
        mlflow.log_metrics(mlflow_metrics(report["metrics"]))
        for path in (metrics, plot, plot_data, claims):
            mlflow.log_artifact(str(path), artifact_path="eval")

    heading = "stats: claims" + ("" if report["judge"]["trusted"] else " [UNTRUSTED JUDGE: none supported]")
    console.print(heading, style=None if report["judge"]["trusted"] else "bold red", highlight=False)
    for claim in report["claims"]:
        ev = claim["evidence"]
        ci = "-" if ev["cluster_low"] is None else f"[{ev['cluster_low']:.3f}, {ev['cluster_high']:.3f}]"
        rate = "-" if ev["win_rate"] is None else f"{ev['win_rate']:.3f}"
        n_eff = "-" if ev["n_eff"] is None else f"{ev['n_eff']:.1f}"
        console.print(f"  {claim['status']:<12} supported={str(claim['supported']):<5} {claim['claim_id']}\n"
                      f"      win-rate {rate}  cluster CI {ci}  n {ev['n']}  n_eff {n_eff}",
                      highlight=False, markup=False)
