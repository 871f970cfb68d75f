"""The data stages, given the validated settings: ``ingest``, ``validate`` and ``split``.

The commands (``reappreg data ingest``, ``reappreg validate run``, ``reappreg data split``)
parse their options, call one function here and print what it returns; each function owns
its stage's MLflow run, every check and the order of the steps. The work itself lives in the
modules these call (``data.ingest``, ``data.validate``, ``data.split``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reappreg.data.canonical import CanonicalData
    from reappreg.settings import Params


def ingest(params: Params, *, out: Path) -> CanonicalData:
    """Build the canonical dataset from ``data.source`` into ``out``; returns it (its ``meta``
    says how many identical duplicate rating rows were dropped)."""
    import mlflow

    from reappreg.data.canonical import write_canonical
    from reappreg.data.ingest import ingest as read_source
    from reappreg.tracking import stage_run

    p = params
    inputs = {"raw_file": p.data.path} if p.data.path else {}
    with stage_run("ingest", tracking=p.tracking, params=p.data.model_dump(), inputs=inputs):
        data = read_source(p.data)
        write_canonical(data, out)
        mlflow.log_metrics({f"n_{k}": v for k, v in data.counts().items()})
        mlflow.log_metric("duplicate_rating_rows_dropped", data.meta["duplicate_rating_rows_dropped"])
    return data


def validate(params: Params, *, data: Path, report: Path) -> dict[str, Any]:
    """Run the great-expectations suites over the canonical folder ``data``; write ``report``
    only when every expectation passes, and return it. A report from an earlier run is removed
    first, so a failed or interrupted run never leaves a passing report behind."""
    import mlflow

    from reappreg.data.validate import require_success, validate_folder
    from reappreg.io import write_json
    from reappreg.tracking import stage_run

    p = params
    report.unlink(missing_ok=True)
    with stage_run("validate", tracking=p.tracking, params=p.validate_.model_dump(), inputs={"canonical": data}):
        result = validate_folder(data, p.validate_, p.data)
        mlflow.log_metrics({"n_expectations": result["n_expectations"], "n_failed": result["n_failed"]})
        mlflow.log_dict(result, "validation_report.json")
        require_success(result)
        write_json(report, result)
    return result


@dataclass(frozen=True)
class SplitFiles:
    """What the split reads (the validated canonical folder ``data`` and the ``validation_report``
    made for exactly its bytes) and writes (the ``train`` pool folder, the ``heldout`` answers)."""

    data: Path
    validation_report: Path
    train: Path
    heldout: Path


@dataclass(frozen=True)
class SplitOutcome:
    """What the split wrote: the training pool, the held-out answers, and how many reappraisals
    each source had (``source_counts``) with the sources that stayed in the pool."""

    train: CanonicalData
    answers: list[dict]
    source_counts: dict[str, int]
    train_sources: frozenset[str]


def split(params: Params, files: SplitFiles) -> SplitOutcome:
    """Write the training pool and the held-out answers as separate artifacts, after checking
    that the validation report passed for exactly these bytes under these settings."""
    import mlflow

    from reappreg.data.canonical import load_canonical
    from reappreg.data.split import source_counts, split as split_pool, write_split
    from reappreg.data.validate import verify_report
    from reappreg.hashing import file_md5
    from reappreg.tracking import stage_run

    p, f = params, files
    with stage_run("split", tracking=p.tracking, params=p.split.model_dump(),
                   inputs={"canonical": f.data, "validation_report": f.validation_report}):
        verify_report(f.validation_report, f.data, p.validate_)
        canonical = load_canonical(f.data)
        train_data, answers = split_pool(canonical, p.split.train_sources)
        train_data.meta["validation_report_md5"] = file_md5(f.validation_report)
        write_split(train_data, answers, f.train, f.heldout)
        mlflow.log_metrics({"n_train_reappraisals": len(train_data.reappraisals),
                            "n_train_ratings": len(train_data.ratings), "n_heldout_answers": len(answers)})
    return SplitOutcome(train=train_data, answers=answers, source_counts=source_counts(canonical),
                        train_sources=frozenset(p.split.train_sources))


__all__ = ["SplitFiles", "SplitOutcome", "ingest", "split", "validate"]
