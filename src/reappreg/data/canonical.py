"""The canonical dataset: schema, importers and canonical IO (the seeded sample generator
is ``reappreg.data.sample``).

Canonical schema (a folder of JSONL files, one object per line, sorted keys):

- ``vignettes.jsonl``: vignette_id, title, scenario, emotion
- ``reappraisals.jsonl``: reappraisal_id, vignette_id, author_id, source, text
  (source ``human`` for human reappraisals; a model name for model outputs, rated or
  held-out: ``data.rated_sources`` says which sources are rated)
- ``ratings.jsonl``: rating_id, reappraisal_id, vignette_id, rater_id and one key per
  rating dimension the dataset has (``data.dimensions``). A dimension the dataset does not
  have is an absent key, never null and never a filled-in constant. Integer-scale values are
  ints, continuous-scale values floats (``data.rating_scale``).
- ``meta.json``: where the data came from and the data facts: ``has_ratings``,
  ``has_emotion``, ``dimensions`` (the present ones; [] without ratings), ``rating_scale``
  ({min, max, kind}), ``rated_sources``, ``duplicate_rating_rows_dropped``,
  ``duplicate_rating_rows_averaged``, ``ratings_averaged_over_repeats`` (``data.duplicate_ratings``).

Importers read files strictly (``reappreg.data.tablefile``) and refuse what they cannot map
(unknown or undeclared columns, conflicting duplicate rows, text with control characters).
Rating values are converted to the declared scale's type where that is exact (``"5.0"`` ->
5 on an integer scale) and otherwise kept as read, so validation reports them with a count,
ids and values.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.io import atomic_dir, read_json, read_jsonl_lines, write_json, write_jsonl
from reappreg.settings.data import RATING_DIMENSIONS, DataSettings, RatingScale
from reappreg.data.tablefile import RawTable, check_strings, read_table

VIGNETTE_COLUMNS = ["vignette_id", "title", "scenario", "emotion"]
REAPPRAISAL_COLUMNS = ["reappraisal_id", "vignette_id", "author_id", "source", "text"]
RATING_KEY_COLUMNS = ["rating_id", "reappraisal_id", "vignette_id", "rater_id"]
RATING_COLUMNS = [*RATING_KEY_COLUMNS, *RATING_DIMENSIONS]  # every known dimension (the sample has all)
TABLES = {"vignettes": VIGNETTE_COLUMNS, "reappraisals": REAPPRAISAL_COLUMNS, "ratings": RATING_COLUMNS}
ID_COLUMNS = {"vignettes": "vignette_id", "reappraisals": "reappraisal_id", "ratings": "rating_id"}

# The project's own flat import format: one row per rating (held-out answers and unrated
# texts have empty rater/rating cells). Real exports usually look like this.
FLAT_COLUMNS = [
    "vignette_id", "title", "scenario", "emotion",
    "reappraisal_id", "author_id", "source", "text",
    "rater_id", *RATING_DIMENSIONS,
]
FLAT_REQUIRED = ["vignette_id", "scenario", "reappraisal_id", "text"]
MAX_EXAMPLES = 5


class Absent:
    """A rating key a row does not have (distinct from an explicit null)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT = Absent()


@dataclass
class CanonicalData:
    vignettes: pd.DataFrame
    reappraisals: pd.DataFrame
    ratings: pd.DataFrame
    meta: dict = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {"vignettes": len(self.vignettes), "reappraisals": len(self.reappraisals), "ratings": len(self.ratings)}

    def dimensions(self) -> list[str]:
        """The rating dimension columns this data holds, in schema order."""
        return [d for d in RATING_DIMENSIONS if d in self.ratings.columns]


def _examples(items: list[str]) -> str:
    shown = "; ".join(items[:MAX_EXAMPLES])
    return shown + (f"; ... ({len(items) - MAX_EXAMPLES} more)" if len(items) > MAX_EXAMPLES else "")


def _frame(records: list[dict], columns: list[str]) -> pd.DataFrame:
    """Object columns: ints stay ints and strings stay str (pandas would widen or retype them)."""
    return pd.DataFrame([[r.get(c) for c in columns] for r in records], columns=columns, dtype=object)


# ----------------------------------------------------------------------------- rating values


def coerce_rating(value, kind: str):
    """The value on the declared scale's type where the conversion is exact; else as read.

    integer: 5, 5.0, "5", " 5.0 " -> 5; continuous: 5, "4.5", "5" -> 5.0 / 4.5. Anything else
    (``"five"``, 4.5 on an integer scale, a boolean, NaN) is returned unchanged for
    validation to report with its row id."""
    if isinstance(value, bool) or value is None:
        return value
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return value
    if isinstance(number, (np.integer, np.floating)):
        number = number.item()
    if not isinstance(number, (int, float)) or not math.isfinite(number):
        return value
    if kind == "integer":
        return int(number) if float(number).is_integer() else value
    return float(number)


def _blank(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or (isinstance(value, str) and not value.strip())


# ----------------------------------------------------------------------------- importers


def _rating_columns(path: Path, columns: list[str], settings: DataSettings) -> None:
    """Rating columns in a file must be exactly the declared dimensions."""
    in_file = [d for d in RATING_DIMENSIONS if d in columns]
    undeclared = [d for d in in_file if d not in settings.dimensions]
    if undeclared:
        raise InputError(
            f"{path}: column(s) {undeclared} hold ratings but data.dimensions is {settings.dimensions}; "
            "add them to data.dimensions or drop the columns"
        )
    missing = [d for d in settings.dimensions if d not in in_file]
    if missing:
        raise InputError(
            f"{path}: data.dimensions lists {missing} but the file has no such column(s); "
            f"set data.dimensions to the rating columns the file has ({in_file or 'none'})"
        )


def import_flat(path: str | Path, settings: DataSettings) -> CanonicalData:
    """Import the project's flat format (one row per rating) from CSV/TSV/JSONL/parquet."""
    table = read_table(path)
    path, frame = table.path, table.frame
    columns = list(frame.columns)
    missing = [c for c in FLAT_REQUIRED if c not in columns]
    if missing:
        raise InputError(f"{path}: missing required column(s) {missing}; expected columns {FLAT_COLUMNS}")
    extra = sorted(set(columns) - set(FLAT_COLUMNS))
    if extra:
        raise InputError(f"{path}: unknown column(s) {extra}; expected columns {FLAT_COLUMNS}")
    has_ratings = "rater_id" in columns and frame["rater_id"].map(lambda v: not _blank(v)).any()
    dims = [d for d in RATING_DIMENSIONS if d in columns]
    if dims and "rater_id" not in columns:
        raise InputError(f"{path}: rating column(s) {dims} but no rater_id column; every rating needs its rater")
    if has_ratings:
        _rating_columns(path, columns, settings)
    has_emotion = "emotion" in columns
    records = _strings_where_needed(table)
    _refuse_ratings_without_rater(table, records, dims)

    vignettes: dict[str, dict] = {}
    reappraisals: dict[str, dict] = {}
    first_seen: dict[tuple[str, str], int] = {}
    ratings: dict[tuple, dict] = {}
    repeats: dict[tuple, list[tuple[str, dict]]] = {}  # key -> every (location, rating) read for it
    for position, row in enumerate(records):
        where = table.locations[position]
        vid = row["vignette_id"]
        vignette = {
            "vignette_id": vid,
            "title": row.get("title") if not _blank(row.get("title")) else vid,
            "scenario": row["scenario"],
            "emotion": row.get("emotion") if has_emotion else None,
        }
        _same_or_fail(table, vignettes, first_seen, "vignette", vid, vignette, position, "title/scenario/emotion")
        rid = row["reappraisal_id"]
        reappraisal = {
            "reappraisal_id": rid,
            "vignette_id": vid,
            "author_id": row.get("author_id") if not _blank(row.get("author_id")) else f"unknown-{rid}",
            "source": row.get("source") if not _blank(row.get("source")) else "human",
            "text": row["text"],
        }
        _same_or_fail(table, reappraisals, first_seen, "reappraisal", rid, reappraisal, position, "vignette/author/source/text")
        if not has_ratings or _blank(row.get("rater_id")):
            continue
        key = (rid, row["rater_id"])
        rating = {"rating_id": f"{rid}-{row['rater_id']}", "reappraisal_id": rid, "vignette_id": vid, "rater_id": row["rater_id"]}
        for dim in settings.dimensions:
            rating[dim] = coerce_rating(row.get(dim), settings.rating_scale.kind)
        repeats.setdefault(key, []).append((where, rating))
        ratings.setdefault(key, rating)
    merged = _merge_repeats(path, repeats, ratings, settings)
    meta = {
        "source": f"file:{path.name}",
        "has_ratings": bool(has_ratings),
        "has_emotion": has_emotion,
        **merged,
    }
    rating_columns = [*RATING_KEY_COLUMNS, *(settings.dimensions if has_ratings else [])]
    return CanonicalData(
        vignettes=_frame(list(vignettes.values()), VIGNETTE_COLUMNS),
        reappraisals=_frame(list(reappraisals.values()), REAPPRAISAL_COLUMNS),
        ratings=_frame(list(ratings.values()), rating_columns),
        meta=meta,
    )


def _merge_repeats(path: Path, repeats: dict[tuple, list[tuple[str, dict]]], ratings: dict[tuple, dict],
                   settings: DataSettings) -> dict[str, int]:
    """One rating per (reappraisal, rater) under ``data.duplicate_ratings``; ``ratings`` holds
    the first of each and is updated in place. Returns the counts meta.json records."""
    identical, conflicting = [], []
    for key, seen in repeats.items():
        if len(seen) < 2:
            continue
        pair = f"{' and '.join(where for where, _ in seen)} ({key[0]!r}, rater {key[1]!r})"
        (identical if all(r == seen[0][1] for _, r in seen) else conflicting).append((key, pair))
    extra_rows = lambda found: sum(len(repeats[key]) - 1 for key, _ in found)  # noqa: E731
    mode = settings.duplicate_ratings
    if conflicting and mode != "mean":
        raise InputError(
            f"{path}: {len(conflicting)} rating(s) appear more than once for one reappraisal and rater with different "
            f"values: {_examples([pair for _, pair in conflicting])}; keep the right one in the export, or set "
            "data.duplicate_ratings: mean to average a rater's repeats (continuous scale; counted in meta.json)"
        )
    if identical and mode == "error":
        raise InputError(
            f"{path}: {len(identical)} duplicate rating row(s) (same reappraisal_id and rater_id, identical "
            f"values): {_examples([pair for _, pair in identical])}; remove them, or set data.duplicate_ratings: "
            "drop_identical to keep one of each (the count is recorded in meta.json)"
        )
    for key, pair in conflicting:
        ratings[key] = {**ratings[key], **{dim: _mean_of([r[dim] for _, r in repeats[key]], pair, dim, path)
                                           for dim in settings.dimensions}}
    return {"duplicate_rating_rows_dropped": extra_rows(identical),
            "duplicate_rating_rows_averaged": extra_rows(conflicting),
            "ratings_averaged_over_repeats": len(conflicting)}


def _mean_of(values: list, pair: str, dim: str, path: Path):
    """The mean of a rater's repeated values of one dimension (blank repeats left out);
    a value that is not a number cannot be averaged and is refused by name."""
    present = [v for v in values if not _blank(v)]
    odd = [v for v in present if isinstance(v, bool) or not isinstance(v, (int, float))]
    if odd:
        raise InputError(f"{path}: {pair}: {dim} value(s) {odd!r} are not numbers, so the repeats cannot be averaged")
    return float(np.mean(present)) if present else None


ID_FIELDS = ("vignette_id", "reappraisal_id", "author_id", "source", "rater_id")
TEXT_FIELDS = ("title", "scenario", "emotion", "text")


def _strings_where_needed(table: RawTable) -> list[dict]:
    """Records whose id and text fields are strings: whole-number ids (a parquet int64
    rater_id, a JSON ``12``) become their digits; any other non-string value is an error."""
    records = table.frame.to_dict("records")
    wrong = []
    for position, row in enumerate(records):
        for column in ID_FIELDS + TEXT_FIELDS:
            value = row.get(column)
            if value is None or isinstance(value, str):
                continue
            if column in ID_FIELDS and isinstance(value, int) and not isinstance(value, bool):
                row[column] = str(value)
            else:
                wrong.append(f"{table.locations[position]} column {column!r}: {value!r}")
    if wrong:
        raise InputError(f"{table.path}: {len(wrong)} id or text value(s) are not text: {_examples(wrong)}")
    return records


def _refuse_ratings_without_rater(table: RawTable, records: list[dict], dims: list[str]) -> None:
    orphans = [
        table.locations[i] for i, row in enumerate(records)
        if _blank(row.get("rater_id")) and any(not _blank(row.get(d)) for d in dims)
    ]
    if orphans:
        raise InputError(f"{table.path}: {len(orphans)} row(s) have rating values but no rater_id: {_examples(orphans)}")


def _same_or_fail(table: RawTable, seen: dict, first: dict, what: str, key, record: dict, position: int, fields: str) -> None:
    if key in seen and seen[key] != record:
        differs = [k for k in record if record[k] != seen[key][k]]
        raise InputError(
            f"{table.path}: {table.locations[position]}: {what} {key!r} differs from its first appearance "
            f"({table.locations[first[(what, key)]]}) in {differs}; each {what} needs one {fields}"
        )
    if key not in seen:
        seen[key] = record
        first[(what, key)] = position


SHARMA_COLUMNS = {"situation", "thought", "reframe", "thinking_traps_addressed"}


def import_sharma2023(path: str | Path) -> CanonicalData:
    """Import the public reframing dataset (Sharma et al., 2023): situation -> scenario,
    reframe -> reappraisal. It has no ratings and no emotion labels; ids are derived from
    content hashes so re-imports are stable."""
    table = read_table(path)
    path = table.path
    missing = sorted({"situation", "reframe"} - set(table.frame.columns))
    if missing:
        raise InputError(f"{path}: not the Sharma et al. reframing file, missing column(s) {missing}")
    blank = [table.locations[i] for i, r in enumerate(table.frame.to_dict("records")) if _blank(r["situation"])]
    if blank:
        raise InputError(f"{path}: {len(blank)} row(s) have an empty situation: {_examples(blank)}")
    vignettes: dict[str, dict] = {}
    reappraisals: list[dict] = []
    for position, row in enumerate(table.frame.to_dict("records")):
        situation = row["situation"].strip()
        number = position + 2  # the record's position as a CSV line number, stable across re-imports
        vid = "s-" + hashlib.sha256(situation.encode("utf-8")).hexdigest()[:10]
        vignettes.setdefault(vid, {"vignette_id": vid, "title": situation[:60], "scenario": situation, "emotion": None})
        reappraisals.append(
            {
                "reappraisal_id": f"sharma-{number:04d}",
                "vignette_id": vid,
                "author_id": f"sharma2023-practitioner-{number:04d}",
                "source": "human",
                "text": row["reframe"],
            }
        )
    meta = {"source": "sharma2023", "has_ratings": False, "has_emotion": False}
    return CanonicalData(
        vignettes=_frame(list(vignettes.values()), VIGNETTE_COLUMNS),
        reappraisals=_frame(reappraisals, REAPPRAISAL_COLUMNS),
        ratings=_frame([], RATING_KEY_COLUMNS),
        meta=meta,
    )


def import_canonical_folder(folder: str | Path, settings: DataSettings) -> CanonicalData:
    """A folder that already holds the three canonical tables (CSV, TSV, JSONL or parquet)."""
    folder = Path(folder)
    tables = {}
    for name, columns in TABLES.items():
        found = [folder / f"{name}{ext}" for ext in (".jsonl", ".csv", ".tsv", ".parquet") if (folder / f"{name}{ext}").exists()]
        if len(found) > 1:
            raise InputError(f"{folder}: {name} is there twice ({', '.join(p.name for p in found)}); keep one")
        if not found:
            if name == "ratings":
                tables[name] = _frame([], RATING_KEY_COLUMNS)
                continue
            raise InputError(f"{folder}: no {name}.jsonl/.csv/.tsv/.parquet")
        frame = read_table(found[0]).frame
        if name == "ratings":
            if len(frame):
                _rating_columns(found[0], list(frame.columns), settings)
            columns = [*RATING_KEY_COLUMNS, *(settings.dimensions if len(frame) else [])]
        missing = sorted(set(columns) - set(frame.columns))
        extra = sorted(set(frame.columns) - set(columns))
        if missing or extra:
            raise InputError(f"{found[0]}: missing column(s) {missing}, unknown column(s) {extra}; expected {columns}")
        if name == "ratings":
            for dim in settings.dimensions if len(frame) else []:
                frame[dim] = frame[dim].map(lambda v: coerce_rating(v, settings.rating_scale.kind)).astype(object)
        tables[name] = frame[columns]
    has_ratings = len(tables["ratings"]) > 0
    has_emotion = tables["vignettes"]["emotion"].map(lambda v: not _blank(v)).any()
    return CanonicalData(**tables, meta={"source": f"folder:{folder.name}", "has_ratings": has_ratings, "has_emotion": bool(has_emotion)})


def declared_facts(data: CanonicalData, settings: DataSettings) -> dict:
    """The data facts from params, checked against what the source delivered."""
    has_ratings = bool(data.meta.get("has_ratings")) and len(data.ratings) > 0
    present = data.dimensions()
    if has_ratings and present != settings.dimensions:
        raise InputError(
            f"data.source {data.meta.get('source')!r} has rating dimensions {present}, but data.dimensions is "
            f"{settings.dimensions}; set data.dimensions to the dimensions the data has"
        )
    if has_ratings and "effectiveness" not in present:
        raise InputError("the data has ratings but no effectiveness column; the reward models need effectiveness")
    if data.meta.get("source") == "sample" and settings.rating_scale.as_meta() != {"min": 1, "max": 7, "kind": "integer"}:
        raise InputError(
            f"data.source sample rates on an integer 1-7 scale, but data.rating_scale is {settings.rating_scale.as_meta()}"
        )
    return {
        "dimensions": present if has_ratings else [],
        "rating_scale": settings.rating_scale.as_meta(),
        "rated_sources": list(settings.rated_sources),
    }


def check_text(data: CanonicalData, origin: str) -> None:
    """No stored string holds a control character (other than tab/newline/CR), a surrogate
    or an unassigned code point; InputError with count and example row ids otherwise."""
    for name in TABLES:
        frame = getattr(data, name)
        id_column = ID_COLUMNS[name]
        cells = []
        for record in frame.to_dict("records"):
            for column, value in record.items():
                cells.append((f"{name}.{column} of {record.get(id_column)!r}", value))
        check_strings(cells, origin)


# ----------------------------------------------------------------------------- canonical IO


def _records(frame: pd.DataFrame) -> list[dict]:
    out = []
    for record in frame.to_dict("records"):
        clean = {}
        for key, value in record.items():
            if value is ABSENT:
                continue  # an absent rating key stays absent
            if isinstance(value, (np.integer, np.floating)):
                value = value.item()
            if isinstance(value, float) and np.isnan(value):
                value = None
            clean[key] = value
        out.append(clean)
    return out


def write_canonical(data: CanonicalData, folder: str | Path) -> None:
    """Write the tables and meta.json atomically as one folder."""
    with atomic_dir(folder) as tmp:
        for name in TABLES:
            write_jsonl(tmp / f"{name}.jsonl", _records(getattr(data, name)))
        write_json(tmp / "meta.json", data.meta)


def load_canonical(folder: str | Path) -> CanonicalData:
    """Read a canonical folder as written: values keep their JSON types; a rating key that a
    row lacks is ``ABSENT`` (an explicit null stays None), so validation can tell them apart."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: canonical data folder not found")
    tables = {}
    for name, columns in TABLES.items():
        records = [r for _, r in read_jsonl_lines(folder / f"{name}.jsonl")]
        keys = list(columns)
        for record in records:
            keys += [k for k in record if k not in keys]
        if name == "ratings":  # a dimension no row has is not a column
            keys = [k for k in keys if k not in RATING_DIMENSIONS or any(k in r for r in records)]
        rows = [[r.get(k, ABSENT if name == "ratings" and k in RATING_DIMENSIONS else None) for k in keys] for r in records]
        tables[name] = pd.DataFrame(rows, columns=keys, dtype=object)
    meta_path = folder / "meta.json"
    meta = read_json(meta_path) if meta_path.exists() else {}
    return CanonicalData(**tables, meta=meta)


def scale_from_meta(meta: dict, where: str) -> RatingScale:
    try:
        return RatingScale(**meta["rating_scale"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{where}: meta.json has no valid rating_scale ({exc}); re-run ingest") from exc
