"""Data validation with great-expectations; the suites are code, here.

One suite per canonical table, plus derived tables for what GX cannot express on the raw
tables: ``rating_values`` (each rating cell as ``<value> (<type>)``, so a wrong type or an
absent/present dimension is reported with its id and value), ``rating_numbers`` (the valid
values, for the range check), ``rating_links`` (a rating's vignette is its reappraisal's),
``rated_reappraisals`` (distinct raters per rated reappraisal, whatever its source) and
``<table>_characters`` (forbidden characters in every string field).

The data facts the checks need (dimensions, rating scale, rated sources) are read from the
canonical ``meta.json`` that ingest wrote from params; ``check_facts_match_params`` refuses a
canonical folder ingested under other params.

The report records the md5 of every file it validated (``inputs.files``) and the settings it
ran under. ``verify_report`` is what every consumer of a report calls: it refuses a failed
report, a report for other bytes, and one made under other settings.

A failing suite raises ``ValidationFailed`` with a readable summary: which expectation, on
which table and column, how many rows, a few example ids and values, and what to change.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from reappreg.data.canonical import (
    ABSENT,
    RATING_DIMENSIONS,
    RATING_KEY_COLUMNS,
    REAPPRAISAL_COLUMNS,
    VIGNETTE_COLUMNS,
    CanonicalData,
    load_canonical,
    scale_from_meta,
)
from reappreg.errors import InputError, ValidationFailed
from reappreg.hashing import file_md5
from reappreg.io import read_json
from reappreg.settings.data import DataSettings
from reappreg.settings.validate import ValidateSettings
from reappreg.data.tablefile import describe_forbidden

ID_COLUMN = {
    "vignettes": "vignette_id", "reappraisals": "reappraisal_id", "ratings": "rating_id",
    "rating_values": "rating_id", "rating_numbers": "rating_id", "rating_links": "rating_id",
    "rated_reappraisals": "reappraisal_id", "vignettes_characters": "row_id",
    "reappraisals_characters": "row_id", "ratings_characters": "row_id",
}
BLANK = r"^\s*$"
SURROGATE = re.compile("[\ud800-\udfff]")
TYPE_TAG = {"integer": r"\(integer\)$", "continuous": r"\(decimal\)$"}
FACT_KEYS = ("dimensions", "rating_scale", "rated_sources")
GATING_SETTINGS = ("min_raters", "max_text_chars")


# ----------------------------------------------------------------------------- data facts


def data_facts(meta: dict, where: str) -> dict:
    missing = [k for k in FACT_KEYS if k not in meta]
    if missing:
        raise InputError(f"{where} lacks {missing} (written by an older ingest); run `reappreg data ingest` again")
    scale_from_meta(meta, where)
    return {k: meta[k] for k in FACT_KEYS}


def check_facts_match_params(meta: dict, settings: DataSettings, where: str) -> None:
    """The canonical data was ingested under the ``data`` params in force now."""
    facts = data_facts(meta, where)
    expected = {"rating_scale": settings.rating_scale.as_meta(), "rated_sources": list(settings.rated_sources)}
    if meta.get("has_ratings"):
        expected["dimensions"] = list(settings.dimensions)
    differs = [f"data.{k}: params {v!r}, meta.json {facts[k]!r}" for k, v in expected.items() if facts[k] != v]
    if differs:
        raise InputError(f"{where} was ingested under other data params ({'; '.join(differs)}); run ingest again")


def _printable(value) -> str:
    """An id as text that any terminal can print (forbidden characters escaped)."""
    text = str(value)
    return text if describe_forbidden(text) is None else ascii(text)


def _type_tag(value) -> str:
    if value is ABSENT:
        return "(absent)"
    if value is None or (isinstance(value, float) and value != value):
        return "null (null)"
    if isinstance(value, bool):
        return f"{value} (boolean)"
    if isinstance(value, int):
        return f"{value} (integer)"
    if isinstance(value, float):
        return f"{value!r} (decimal)"
    if isinstance(value, str):
        return f"{value[:40]!r} (text)"
    return f"{value!r} ({type(value).__name__})"


# ----------------------------------------------------------------------------- suites


def build_suites(data: CanonicalData, rules: ValidateSettings, facts: dict) -> dict[str, list]:
    """Expectations per table. Which ones apply depends on what the data holds: a
    ratings-free import such as the Sharma et al. reframes is validated on the columns it has."""
    import great_expectations as gx

    E = gx.expectations
    has_ratings = len(data.ratings) > 0
    has_emotion = bool(data.meta.get("has_emotion", True))
    vignette_ids = sorted(map(str, data.vignettes["vignette_id"].dropna().unique()))
    chars = {"hint": "control characters other than tab/newline/CR, surrogates and unassigned code points are refused"}

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
    for table in ("vignettes", "reappraisals", "ratings"):
        columns = [c for c in getattr(data, table).columns if c not in RATING_DIMENSIONS]
        if len(getattr(data, table)):
            suites[f"{table}_characters"] = [E.ExpectColumnValuesToBeNull(column=c, meta=chars) for c in columns]
    if not has_ratings:
        return suites

    dims, scale = facts["dimensions"], facts["rating_scale"]
    rated_sources = facts["rated_sources"]
    reappraisal_ids = sorted(map(str, data.reappraisals["reappraisal_id"].dropna().unique()))
    suites["ratings"] = [
        E.ExpectTableColumnsToMatchSet(column_set=[*RATING_KEY_COLUMNS, *dims], exact_match=True,
                                       meta={"hint": f"rating columns must be the declared data.dimensions {dims}"}),
        E.ExpectColumnValuesToBeUnique(column="rating_id"),
        E.ExpectCompoundColumnsToBeUnique(column_list=["reappraisal_id", "rater_id"]),
        E.ExpectColumnValuesToNotBeNull(column="rater_id"),
        E.ExpectColumnValuesToBeInSet(column="reappraisal_id", value_set=reappraisal_ids),
        E.ExpectColumnValuesToBeInSet(column="vignette_id", value_set=vignette_ids),
    ]
    suites["rating_links"] = [
        E.ExpectColumnPairValuesToBeEqual(column_A="vignette_id", column_B="reappraisal_vignette_id",
                                          meta={"hint": "a rating's vignette_id must be its reappraisal's"}),
    ]
    kind_hint = (
        "integer scale: ratings must be whole numbers; set data.rating_scale.kind: continuous for decimal ratings"
        if scale["kind"] == "integer" else "continuous scale: ratings must be numbers (stored as floats)"
    )
    values = []
    for dim in RATING_DIMENSIONS:
        if dim in dims:
            values.append(E.ExpectColumnValuesToMatchRegex(column=dim, regex=TYPE_TAG[scale["kind"]], meta={"hint": kind_hint}))
        elif dim in data.ratings.columns:
            values.append(E.ExpectColumnValuesToMatchRegex(
                column=dim, regex=r"^\(absent\)$",
                meta={"hint": f"{dim} is not in data.dimensions {dims}: an absent dimension must be an absent key"}))
    suites["rating_values"] = values
    # Range is checked on values of the right type only; the others are reported above.
    suites["rating_numbers"] = [
        E.ExpectColumnValuesToBeBetween(column=dim, min_value=scale["min"], max_value=scale["max"],
                                        meta={"hint": f"data.rating_scale is {scale['min']}..{scale['max']}"})
        for dim in dims
    ]
    suites["rated_reappraisals"] = [
        E.ExpectColumnValuesToBeBetween(column="n_raters", min_value=rules.min_raters,
                                        meta={"hint": f"validate.min_raters is {rules.min_raters}; it applies to every "
                                              f"rated reappraisal (data.rated_sources {rated_sources} and any with a rating)"}),
        E.ExpectColumnValuesToBeInSet(column="source", value_set=rated_sources,
                                      meta={"hint": "ratings exist for a source not in data.rated_sources"}),
    ]
    suites["reappraisals"].append(E.ExpectColumnDistinctValuesToContainSet(
        column="source", value_set=rated_sources, meta={"hint": "data.rated_sources names a source the data lacks"}))
    return suites


def _encodable(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with lone surrogates escaped: GX (via pyarrow) cannot even hash them. The
    ``*_characters`` tables, built from the original strings, report them."""
    def escape(value):
        if isinstance(value, str) and SURROGATE.search(value):
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value

    return frame.map(escape) if len(frame) else frame


def _frames(data: CanonicalData, facts: dict) -> dict[str, pd.DataFrame]:
    frames = {name: _encodable(getattr(data, name)) for name in ("vignettes", "reappraisals", "ratings")}
    for table in ("vignettes", "reappraisals", "ratings"):
        frame = getattr(data, table)
        columns = [c for c in frame.columns if c not in RATING_DIMENSIONS]
        checked = pd.DataFrame({c: frame[c].map(lambda v: describe_forbidden(v) if isinstance(v, str) else None)
                                for c in columns}, dtype=object)
        id_column = ID_COLUMN[table]
        row_ids = frame[id_column] if id_column in frame.columns else pd.Series(range(1, len(frame) + 1))
        checked.insert(0, "row_id", [_printable(v) for v in row_ids])
        frames[f"{table}_characters"] = checked
    ratings = data.ratings
    if not len(ratings):
        return frames
    dims, kind = facts["dimensions"], facts["rating_scale"]["kind"]
    ids = ratings["rating_id"].astype(str)
    present = [d for d in RATING_DIMENSIONS if d in ratings.columns]
    frames["rating_values"] = pd.DataFrame({"rating_id": ids, **{d: ratings[d].map(_type_tag) for d in present}}, dtype=object)
    wanted = int if kind == "integer" else float
    numbers = {"rating_id": ids}
    for dim in dims:
        if dim in ratings.columns:
            numbers[dim] = ratings[dim].map(
                lambda v: float(v) if isinstance(v, wanted) and not isinstance(v, bool) else None).astype("Float64")
    frames["rating_numbers"] = pd.DataFrame(numbers)
    vignette_of = dict(zip(data.reappraisals["reappraisal_id"], data.reappraisals["vignette_id"]))
    frames["rating_links"] = pd.DataFrame({
        "rating_id": ids, "vignette_id": ratings["vignette_id"],
        "reappraisal_vignette_id": ratings["reappraisal_id"].map(lambda r: vignette_of.get(r, "<unknown reappraisal>")),
    }, dtype=object)
    n_raters = ratings.groupby("reappraisal_id")["rater_id"].nunique()
    reappraisals = data.reappraisals
    rated = reappraisals["source"].isin(facts["rated_sources"]) | reappraisals["reappraisal_id"].isin(set(n_raters.index))
    table = reappraisals.loc[rated, ["reappraisal_id", "source"]].reset_index(drop=True)
    table["n_raters"] = table["reappraisal_id"].map(n_raters).fillna(0).astype(int)
    frames["rated_reappraisals"] = table
    return frames


def _describe(table: str, result: Any, rules: ValidateSettings) -> dict:
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
        "hint": (config.meta or {}).get("hint"),
    }
    if result.exception_info and result.exception_info.get("raised_exception"):
        detail["exception"] = result.exception_info.get("exception_message")
    return detail


def run_validation(data: CanonicalData, rules: ValidateSettings, facts: dict) -> dict:
    """Run every suite; return a JSON-able report. Raises nothing: see ``require_success``."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    # GX's own tqdm bars print one line per metric batch; the stage prints a summary instead.
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("canonical")
    suites = build_suites(data, rules, facts)
    frames = _frames(data, facts)
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
        "data_facts": facts,
        "failed": failed,
        "results": results,
    }


def _folder_md5s(folder: Path) -> dict[str, str]:
    return {p.name: file_md5(p) for p in sorted(folder.iterdir()) if p.is_file()}


def validate_folder(folder: str | Path, rules: ValidateSettings, data_settings: DataSettings) -> dict:
    """Validate a canonical folder; the report binds to the md5 of every file in it and to
    the settings it ran under."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: canonical data folder not found")
    before = _folder_md5s(folder)
    data = load_canonical(folder)
    check_facts_match_params(data.meta, data_settings, str(folder / "meta.json"))
    report = run_validation(data, rules, data_facts(data.meta, str(folder / "meta.json")))
    if _folder_md5s(folder) != before:
        raise InputError(f"{folder}: changed while it was being validated; run validation again")
    report["inputs"] = {"folder": str(folder), "files": before}
    report["settings"] = gating_settings(rules)
    return report


def gating_settings(rules: ValidateSettings) -> dict:
    """The validate params that decide what passes (not how many examples are printed): a
    report binds to these, and ``split`` depends on exactly these."""
    return {key: getattr(rules, key) for key in GATING_SETTINGS}


def verify_report(report_path: str | Path, data_folder: str | Path, rules: ValidateSettings) -> dict:
    """The report passed, for exactly the files now in ``data_folder``, under ``rules``.

    Every consumer of a validation report calls this before using the data; it recomputes
    each file's md5, so a report left over from other data is refused however it is run."""
    report_path, data_folder = Path(report_path), Path(data_folder)
    report = read_json(report_path)
    rerun = f"run `reappreg validate run --data {data_folder} --report {report_path}` (or `dvc repro validate`)"
    if not isinstance(report, dict) or not report.get("success"):
        raise InputError(f"{report_path}: validation did not pass; refusing unvalidated data")
    recorded = (report.get("inputs") or {}).get("files")
    if not isinstance(recorded, dict) or not recorded:
        raise InputError(f"{report_path}: records no input hashes (an older report); {rerun}")
    if not data_folder.is_dir():
        raise InputError(f"{data_folder}: canonical data folder not found")
    current = _folder_md5s(data_folder)
    problems = [f"{name}: validated {recorded[name]}, now {current.get(name, 'missing')}"
                for name in sorted(recorded) if current.get(name) != recorded[name]]
    problems += [f"{name}: not validated (new file)" for name in sorted(set(current) - set(recorded))]
    if problems:
        raise InputError(f"{report_path} does not match {data_folder} ({'; '.join(problems)}); {rerun}")
    if report.get("settings") != gating_settings(rules):
        raise InputError(
            f"{report_path} was made under validate params {report.get('settings')}, now "
            f"{gating_settings(rules)}; {rerun}"
        )
    return report


def summarise_failures(report: dict) -> str:
    lines = [f"validation failed: {report['n_failed']} of {report['n_expectations']} expectations"]
    for f in report["failed"]:
        column = f["kwargs"].get("column") or f["kwargs"].get("column_list") or f["kwargs"].get("column_A") or ""
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
        if f.get("hint"):
            line += f"\n      ({f['hint']})"
        lines.append(line)
    # a lone surrogate in an id cannot be encoded for the terminal: escape it
    return "\n".join(lines).encode("utf-8", "backslashreplace").decode("utf-8")


def require_success(report: dict) -> None:
    if not report["success"]:
        raise ValidationFailed(summarise_failures(report))
