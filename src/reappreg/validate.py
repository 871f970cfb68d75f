"""Data validation with great-expectations; the suites are code, here.

One suite per canonical table, plus two derived tables for checks GX cannot express
across tables: ``rater_counts`` (distinct raters per human reappraisal) and the
referential sets (every rating's reappraisal and vignette exist) expressed as
``ExpectColumnValuesToBeInSet`` against the ids of the parent table.

A failing suite raises ``ValidationFailed`` with a readable summary: which expectation,
on which table and column, how many rows, and a few example ids and values. The stage
then writes no report, so nothing downstream of validation can run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pandas as pd

from reappreg.data import RATING_COLUMNS, RATING_DIMENSIONS, REAPPRAISAL_COLUMNS, VIGNETTE_COLUMNS, CanonicalData
from reappreg.errors import ValidationFailed

INT_TYPES = ["int", "int8", "int16", "int32", "int64", "Int64"]
ID_COLUMN = {"vignettes": "vignette_id", "reappraisals": "reappraisal_id", "ratings": "rating_id", "rating_values": "rating_id", "rater_counts": "reappraisal_id"}
BLANK = r"^\s*$"


@dataclass(frozen=True)
class ValidationRules:
    min_raters: int = 3
    rating_min: int = 1
    rating_max: int = 7
    max_text_chars: int = 4000
    examples_in_report: int = 5


def build_suites(data: CanonicalData, rules: ValidationRules) -> dict[str, list]:
    """Expectations per table. Which ones apply depends on what the source provides
    (``meta.has_ratings``, ``meta.has_emotion``), so a ratings-free import such as the
    Sharma et al. reframes is validated on the columns it has."""
    import great_expectations as gx

    E = gx.expectations
    has_ratings = bool(data.meta.get("has_ratings", True))
    has_emotion = bool(data.meta.get("has_emotion", True))
    vignette_ids = sorted(map(str, data.vignettes["vignette_id"].dropna().unique()))

    vignettes = [
        E.ExpectTableColumnsToMatchSet(column_set=VIGNETTE_COLUMNS, exact_match=True),
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectColumnValuesToNotBeNull(column="vignette_id"),
        E.ExpectColumnValuesToBeUnique(column="vignette_id"),
        E.ExpectColumnValuesToNotBeNull(column="scenario"),
        E.ExpectColumnValuesToNotMatchRegex(column="scenario", regex=BLANK),
        E.ExpectColumnValueLengthsToBeBetween(column="scenario", max_value=rules.max_text_chars),
    ]
    if has_emotion:
        vignettes += [
            E.ExpectColumnValuesToNotBeNull(column="emotion"),
            E.ExpectColumnValuesToNotMatchRegex(column="emotion", regex=BLANK),
        ]
    reappraisals = [
        E.ExpectTableColumnsToMatchSet(column_set=REAPPRAISAL_COLUMNS, exact_match=True),
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectColumnValuesToNotBeNull(column="reappraisal_id"),
        E.ExpectColumnValuesToBeUnique(column="reappraisal_id"),
        E.ExpectColumnValuesToNotBeNull(column="text"),
        E.ExpectColumnValuesToNotMatchRegex(column="text", regex=BLANK),
        E.ExpectColumnValueLengthsToBeBetween(column="text", max_value=rules.max_text_chars),
        E.ExpectColumnValuesToNotBeNull(column="source"),
        E.ExpectColumnValuesToBeInSet(column="vignette_id", value_set=vignette_ids),
    ]
    suites: dict[str, list] = {"vignettes": vignettes, "reappraisals": reappraisals}
    if has_ratings:
        reappraisal_ids = sorted(map(str, data.reappraisals["reappraisal_id"].dropna().unique()))
        ratings = [
            E.ExpectTableColumnsToMatchSet(column_set=RATING_COLUMNS, exact_match=True),
            E.ExpectTableRowCountToBeBetween(min_value=1),
            E.ExpectColumnValuesToBeUnique(column="rating_id"),
            E.ExpectCompoundColumnsToBeUnique(column_list=["reappraisal_id", "rater_id"]),
            E.ExpectColumnValuesToNotBeNull(column="rater_id"),
            E.ExpectColumnValuesToBeInSet(column="reappraisal_id", value_set=reappraisal_ids),
            E.ExpectColumnValuesToBeInSet(column="vignette_id", value_set=vignette_ids),
        ]
        for dim in RATING_DIMENSIONS:
            ratings += [
                E.ExpectColumnValuesToNotBeNull(column=dim),
                E.ExpectColumnValuesToBeInTypeList(column=dim, type_list=INT_TYPES),
            ]
        suites["ratings"] = ratings
        # Range is checked on the integer values only; non-integers are reported by the type check.
        suites["rating_values"] = [
            E.ExpectColumnValuesToBeBetween(column=dim, min_value=rules.rating_min, max_value=rules.rating_max)
            for dim in RATING_DIMENSIONS
        ]
        suites["rater_counts"] = [
            E.ExpectColumnValuesToBeBetween(column="n_raters", min_value=rules.min_raters),
        ]
    return suites


def _frames(data: CanonicalData) -> dict[str, pd.DataFrame]:
    frames = {"vignettes": data.vignettes, "reappraisals": data.reappraisals}
    ratings = data.ratings
    frames["ratings"] = ratings
    values = ratings[["rating_id"]].copy()
    for dim in RATING_DIMENSIONS:
        if dim in ratings.columns:
            values[dim] = ratings[dim].map(
                lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None
            ).astype("Float64")
    frames["rating_values"] = values
    human = data.reappraisals[data.reappraisals["source"] == "human"][["reappraisal_id"]]
    per = ratings.groupby("reappraisal_id")["rater_id"].nunique() if len(ratings) else pd.Series(dtype=int)
    counts = human.assign(n_raters=human["reappraisal_id"].map(per).fillna(0).astype(int))
    frames["rater_counts"] = counts.reset_index(drop=True)
    return frames


def _describe(table: str, result: Any, rules: ValidationRules) -> dict:
    config = result.expectation_config
    kwargs = {k: v for k, v in config.kwargs.items() if k not in {"batch_id", "value_set"}}
    res = result.result or {}
    id_col = ID_COLUMN.get(table)
    examples = []
    for entry in (res.get("unexpected_index_list") or [])[: rules.examples_in_report]:
        if isinstance(entry, dict):
            examples.append(entry.get(id_col, entry))
    values = [str(v)[:80] for v in (res.get("partial_unexpected_list") or [])[: rules.examples_in_report]]
    detail = {
        "table": table,
        "expectation": config.type,
        "kwargs": {k: (v if not isinstance(v, list) or len(v) < 20 else f"<{len(v)} values>") for k, v in kwargs.items()},
        "success": bool(result.success),
        "unexpected_count": res.get("unexpected_count"),
        "element_count": res.get("element_count"),
        "example_ids": examples,
        "example_values": values,
        "observed_value": res.get("observed_value") if "observed_value" in res else None,
    }
    if result.exception_info and result.exception_info.get("raised_exception"):
        detail["exception"] = result.exception_info.get("exception_message")
    return detail


def run_validation(data: CanonicalData, rules: ValidationRules) -> dict:
    """Run every suite; return a JSON-able report. Raises nothing: see ``require_success``."""
    import great_expectations as gx

    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    # GX's own tqdm bars print one line per metric batch; the stage prints a summary instead.
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("canonical")
    suites = build_suites(data, rules)
    frames = _frames(data)
    results: list[dict] = []
    for table, expectations in suites.items():
        frame = frames[table]
        asset = source.add_dataframe_asset(table)
        batch = asset.add_batch_definition_whole_dataframe(f"{table}_all").get_batch(batch_parameters={"dataframe": frame})
        suite = context.suites.add(gx.ExpectationSuite(name=f"{table}_suite", expectations=expectations))
        id_col = ID_COLUMN[table]
        result_format = {"result_format": "COMPLETE"}
        if id_col in frame.columns and len(frame):
            result_format["unexpected_index_column_names"] = [id_col]
        validation = batch.validate(suite, result_format=result_format)
        results += [_describe(table, r, rules) for r in validation.results]
    failed = [r for r in results if not r["success"]]
    return {
        "success": not failed,
        "n_expectations": len(results),
        "n_failed": len(failed),
        "tables": {t: len(frames[t]) for t in suites},
        "source": data.meta.get("source"),
        "failed": failed,
        "results": results,
    }


def summarise_failures(report: dict) -> str:
    lines = [f"validation failed: {report['n_failed']} of {report['n_expectations']} expectations"]
    for f in report["failed"]:
        column = f["kwargs"].get("column") or f["kwargs"].get("column_list") or ""
        what = f"{f['table']}.{column}" if column else f["table"]
        count = f["unexpected_count"]
        rows = f"{count} of {f['element_count']} rows" if count is not None else f"observed {f.get('observed_value')}"
        line = f"  - {f['expectation']} on {what}: {rows}"
        if f["example_ids"]:
            line += f"; e.g. ids {f['example_ids']}"
        if f["example_values"]:
            line += f"; values {f['example_values']}"
        if f.get("exception"):
            line += f"; error: {f['exception']}"
        lines.append(line)
    return "\n".join(lines)


def require_success(report: dict) -> None:
    if not report["success"]:
        raise ValidationFailed(summarise_failures(report))
