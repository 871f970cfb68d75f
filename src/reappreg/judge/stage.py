"""The judge stages, given the validated settings: ``judge`` (every selected generation against
held-out answers, both A/B orders; the ``judge*`` stages) and ``calibrate`` (``judge_calibrate``).

The commands (``reappreg judge run|calibrate``) parse their options, call one function here
and print what it returns; each function owns its stage's MLflow run (the params it logs never
hold a key or URL credentials), the order of the steps and the files it writes. The progress
bar is the command's (a :data:`reappreg.progress.ProgressBar`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reappreg.progress import ProgressBar, no_progress

if TYPE_CHECKING:
    from reappreg.settings import Params
    from reappreg.settings.judge import JudgeSettings


def logged_params(j: JudgeSettings, model_override: str | None) -> dict:
    """The judge settings as a stage run logs them: the key itself is never in params (only the
    NAME of its environment variable); credentials embedded in the URL are dropped too."""
    from reappreg.judge import redact_url

    logged = j.model_dump()
    logged["base_url"] = redact_url(j.base_url)
    if model_override:
        logged["model"] = model_override
    return logged


@dataclass(frozen=True)
class JudgeFiles:
    """What the judge stage reads (the ``generations``, the held-out ``answers``, the judge
    ``prompt_file`` and, when given, the judge ``calibration``, whose ``trusted`` flag is tagged)
    and the judgments file ``out`` it writes."""

    generations: Path
    answers: Path
    prompt_file: Path
    out: Path
    calibration: Path | None = None


@dataclass(frozen=True)
class Judged:
    """The judgments' summary (``summarise_judgments``), the judge's cache hits and misses, and
    whether the calibration trusted the judge (None: no calibration given)."""

    summary: dict[str, Any]
    cache_hits: int
    cache_misses: int
    trusted: bool | None


def judge(params: Params, files: JudgeFiles, *, judge_model: str | None = None, opponents: list[str] | None = None,
          progress: ProgressBar = no_progress) -> Judged:
    """Judge every selected generation against the held-out answers of ``opponents`` (default
    ``judge.opponents``), each contest in both A/B orders; ``judge_model`` overrides ``judge.model``."""
    import mlflow

    from reappreg.io import read_json, read_jsonl, write_jsonl
    from reappreg.judge import build_contests, build_judge, judge_contests, load_judge_prompt, summarise_judgments
    from reappreg.tracking import stage_run

    j, f = params.judge, files
    prompt = load_judge_prompt(f.prompt_file)
    inputs = {"generations": f.generations, "answers": f.answers, "prompt_file": f.prompt_file}
    tags = {"judge.backend": j.backend, "judge.model": judge_model or j.model}
    if opponents:
        tags["judge.opponents_override"] = ",".join(opponents)
    trusted = None
    if f.calibration is not None:
        inputs["calibration"] = f.calibration
        trusted = bool(read_json(f.calibration)["trusted"])
        tags["judge.trusted"] = str(trusted).lower()
    with stage_run("judge", tracking=params.tracking, params=logged_params(j, judge_model), inputs=inputs, tags=tags,
                   outputs={"judgments": f.out}):
        contests = build_contests(read_jsonl(f.generations), read_jsonl(f.answers), opponents or j.opponents,
                                  j.answers_per_generation, generations_name=str(f.generations),
                                  answers_name=str(f.answers))
        backend = build_judge(j, model=judge_model)
        with progress("judge", 2 * len(contests)) as advance:
            rows = judge_contests(contests, backend, prompt, progress=advance)
        write_jsonl(f.out, rows)
        summary = summarise_judgments(rows)
        mlflow.set_tag("judge.fingerprint", backend.fingerprint)
        mlflow.log_metrics({**summary, "cache_hits": backend.hits, "cache_misses": backend.misses})
        mlflow.log_artifact(str(f.out))
    return Judged(summary=summary, cache_hits=backend.hits, cache_misses=backend.misses, trusted=trusted)


@dataclass(frozen=True)
class CalibrationFiles:
    """What calibration reads (the ``train`` pool folder's vignettes, reappraisals and ratings,
    and the judge ``prompt_file``) and writes (the metrics ``out``, the per-order ``rows``)."""

    train: Path
    prompt_file: Path
    out: Path
    rows: Path

    def pool(self) -> dict[str, Path]:
        """The training pool's tables by name, as the stage run records them."""
        return {name: self.train / f"{name}.jsonl" for name in ("vignettes", "reappraisals", "ratings")}


def calibrate(params: Params, files: CalibrationFiles, *, judge_model: str | None = None,
              progress: ProgressBar = no_progress) -> dict[str, Any]:
    """Agreement with human preference pairs, position bias and order consistency; returns the
    metrics (written to ``files.out``), whose ``trusted`` the judge stages tag."""
    import mlflow

    from reappreg.io import read_jsonl, write_json, write_jsonl
    from reappreg.judge import build_judge, calibrate as calibrate_judge, human_preference_pairs, load_judge_prompt
    from reappreg.tracking import stage_run

    j, f = params.judge, files
    paths = f.pool()
    prompt = load_judge_prompt(f.prompt_file)
    with stage_run("judge_calibrate", tracking=params.tracking, params=logged_params(j, judge_model),
                   inputs={**paths, "prompt_file": f.prompt_file},
                   tags={"judge.backend": j.backend, "judge.model": judge_model or j.model}):
        pairs = human_preference_pairs(read_jsonl(paths["vignettes"]), read_jsonl(paths["reappraisals"]),
                                       read_jsonl(paths["ratings"]), j)
        backend = build_judge(j, model=judge_model)
        with progress("calibrate", 2 * len(pairs)) as advance:
            metrics, rows = calibrate_judge(pairs, backend, prompt, j, progress=advance)
        write_jsonl(f.rows, rows)
        write_json(f.out, metrics)
        mlflow.log_metrics({k: float(v) for k, v in metrics.items()
                            if isinstance(v, (int, float)) and not isinstance(v, bool)})
        mlflow.log_metric("trusted", float(metrics["trusted"]))
        mlflow.set_tag("judge.trusted", str(metrics["trusted"]).lower())
        mlflow.set_tag("judge.fingerprint", metrics["judge_fingerprint"])
        mlflow.log_artifact(str(f.out))
        mlflow.log_artifact(str(f.rows))
    return metrics


__all__ = ["CalibrationFiles", "Judged", "JudgeFiles", "calibrate", "judge", "logged_params"]
