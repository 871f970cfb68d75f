"""The canonical dataset: schema and importers (the seeded sample generator is ``reappreg.sample``).

Canonical schema (a folder of JSONL files, one object per line, sorted keys):

- ``vignettes.jsonl``: vignette_id, title, scenario, emotion
- ``reappraisals.jsonl``: reappraisal_id, vignette_id, author_id, source, text
  (source ``human`` for rated human reappraisals; ``gpt-4-0314`` or an opponent name for
  held-out answers)
- ``ratings.jsonl``: rating_id, reappraisal_id, vignette_id, rater_id, effectiveness,
  empathy, novelty, specificity (Likert 1-7)
- ``meta.json``: where the data came from and which parts it has (``has_ratings``,
  ``has_emotion``), so validation checks the columns a source actually provides.

Importers keep values as they were read (a rating of ``"five"`` stays a string): the
validation stage, not the importer, decides what is acceptable and says why.
"""

from __future__ import annotations

import csv
import hashlib
import io
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.io import atomic_dir, read_json, read_jsonl, write_json, write_jsonl

VIGNETTE_COLUMNS = ["vignette_id", "title", "scenario", "emotion"]
REAPPRAISAL_COLUMNS = ["reappraisal_id", "vignette_id", "author_id", "source", "text"]
RATING_DIMENSIONS = ["effectiveness", "empathy", "novelty", "specificity"]
RATING_COLUMNS = ["rating_id", "reappraisal_id", "vignette_id", "rater_id", *RATING_DIMENSIONS]
TABLES = {"vignettes": VIGNETTE_COLUMNS, "reappraisals": REAPPRAISAL_COLUMNS, "ratings": RATING_COLUMNS}
TEXT_COLUMNS = {"vignettes": ["title", "scenario"], "reappraisals": ["text"]}

# The project's own flat import format: one row per rating (held-out answers and unrated
# texts have empty rater/rating cells). Real exports usually look like this.
FLAT_COLUMNS = [
    "vignette_id", "title", "scenario", "emotion",
    "reappraisal_id", "author_id", "source", "text",
    "rater_id", *RATING_DIMENSIONS,
]
FLAT_OPTIONAL = {"title", "emotion", "author_id", "source", "rater_id", *RATING_DIMENSIONS}


@dataclass
class CanonicalData:
    vignettes: pd.DataFrame
    reappraisals: pd.DataFrame
    ratings: pd.DataFrame
    meta: dict = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {"vignettes": len(self.vignettes), "reappraisals": len(self.reappraisals), "ratings": len(self.ratings)}


# ----------------------------------------------------------------------------- reading raw files


def _decode(path: Path) -> str:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}: line {line} is not valid UTF-8 (byte offset {exc.start}); re-export the file as UTF-8") from exc
    return text


def read_table(path: str | Path) -> pd.DataFrame:
    """Read CSV, JSONL or parquet with every cell kept as read (strings for CSV).

    Malformed files (truncated rows, bad quoting, wrong delimiter) raise InputError
    naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            return pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types; all mean "not a readable parquet"
            raise InputError(f"{path}: not a readable parquet file ({exc})") from exc
    if suffix in {".jsonl", ".ndjson"}:
        return pd.DataFrame(read_jsonl(path))
    if suffix not in {".csv", ".tsv"}:
        raise InputError(f"{path}: unsupported file type '{suffix}' (use .csv, .tsv, .jsonl or .parquet)")
    text = _decode(path)
    delimiter = "\t" if suffix == ".tsv" else ","
    rows = list(_csv_rows(path, text, delimiter))
    if not rows:
        raise InputError(f"{path}: file is empty")
    header = [h.strip() for h in rows[0][1]]
    if len(header) == 1 and any(sep in header[0] for sep in ";\t|"):
        found = next(sep for sep in ";\t|" if sep in header[0])
        raise InputError(f"{path}: header has one column; the file looks {found!r}-delimited, expected {delimiter!r}")
    for lineno, row in rows[1:]:
        if len(row) != len(header):
            raise InputError(
                f"{path}: line {lineno} has {len(row)} fields, header has {len(header)} "
                "(truncated line, stray delimiter or bad quoting)"
            )
    return pd.DataFrame([row for _, row in rows[1:]], columns=header)


def _csv_rows(path: Path, text: str, delimiter: str):
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    try:
        for row in reader:
            if row:  # blank lines carry no record
                yield (reader.line_num, row)
    except csv.Error as exc:
        raise InputError(f"{path}: line {reader.line_num}: malformed CSV ({exc}); check quoting") from exc
    if text and not text.endswith(("\n", "\r")) and text.count('"') % 2:
        raise InputError(f"{path}: ends inside a quoted field (truncated file or unclosed quote)")


# ----------------------------------------------------------------------------- importers


def _normalise_text(value):
    """NFC-normalise strings so visually equal texts are byte-equal downstream."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    return value


def _coerce_rating(value):
    """Integers stay integers, integer-valued strings become ints; anything else is kept
    as read so validation can report it (``"five"``, ``""``, ``4.5``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return value


def _blank(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or (isinstance(value, str) and value.strip() == "")


def import_flat(path: str | Path) -> CanonicalData:
    """Import the project's flat format (one row per rating) from CSV/TSV/JSONL/parquet."""
    path = Path(path)
    table = read_table(path)
    columns = set(table.columns)
    required = set(FLAT_COLUMNS) - FLAT_OPTIONAL
    missing = sorted(required - columns)
    if missing:
        raise InputError(f"{path}: missing required column(s) {missing}; expected columns {FLAT_COLUMNS}")
    extra = sorted(columns - set(FLAT_COLUMNS))
    if extra:
        raise InputError(f"{path}: unknown column(s) {extra}; expected columns {FLAT_COLUMNS}")
    table = table.map(_normalise_text)
    has_ratings = "rater_id" in columns and any(not _blank(v) for v in table["rater_id"])
    has_emotion = "emotion" in columns

    vignettes: dict[str, dict] = {}
    reappraisals: dict[str, dict] = {}
    ratings: list[dict] = []
    for row_number, row in enumerate(table.to_dict("records"), start=2):
        vid = row["vignette_id"]
        vignette = {
            "vignette_id": vid,
            "title": row.get("title") if not _blank(row.get("title")) else vid,
            "scenario": row["scenario"],
            "emotion": row.get("emotion") if has_emotion else None,
        }
        if vid in vignettes and vignettes[vid] != vignette:
            raise InputError(f"{path}: row {row_number}: vignette {vid!r} appears with different title/scenario/emotion")
        vignettes[vid] = vignette
        rid = row["reappraisal_id"]
        source = row.get("source") if not _blank(row.get("source")) else "human"
        reappraisal = {
            "reappraisal_id": rid,
            "vignette_id": vid,
            "author_id": row.get("author_id") if not _blank(row.get("author_id")) else f"unknown-{rid}",
            "source": source,
            "text": row["text"],
        }
        if rid in reappraisals and reappraisals[rid] != reappraisal:
            raise InputError(f"{path}: row {row_number}: reappraisal {rid!r} appears with different text or vignette")
        reappraisals[rid] = reappraisal
        if has_ratings and not _blank(row.get("rater_id")):
            rating = {
                "rating_id": f"{rid}-{row['rater_id']}",
                "reappraisal_id": rid,
                "vignette_id": vid,
                "rater_id": row["rater_id"],
            }
            for dim in RATING_DIMENSIONS:
                rating[dim] = _coerce_rating(row.get(dim))
            ratings.append(rating)
    meta = {"source": f"file:{path.name}", "has_ratings": has_ratings, "has_emotion": has_emotion}
    return CanonicalData(
        vignettes=pd.DataFrame(list(vignettes.values()), columns=VIGNETTE_COLUMNS),
        reappraisals=pd.DataFrame(list(reappraisals.values()), columns=REAPPRAISAL_COLUMNS),
        ratings=pd.DataFrame(ratings, columns=RATING_COLUMNS),
        meta=meta,
    )


SHARMA_COLUMNS = {"situation", "thought", "reframe", "thinking_traps_addressed"}


def import_sharma2023(path: str | Path) -> CanonicalData:
    """Import the public reframing dataset (Sharma et al., 2023): situation -> scenario,
    reframe -> reappraisal. It has no ratings and no emotion labels; ids are derived from
    content hashes so re-imports are stable."""
    path = Path(path)
    table = read_table(path)
    missing = sorted({"situation", "reframe"} - set(table.columns))
    if missing:
        raise InputError(f"{path}: not the Sharma et al. reframing file, missing column(s) {missing}")
    table = table.map(_normalise_text)
    vignettes: dict[str, dict] = {}
    reappraisals: list[dict] = []
    for row_number, row in enumerate(table.to_dict("records"), start=2):
        situation = row["situation"].strip()
        vid = "s-" + hashlib.sha256(situation.encode("utf-8")).hexdigest()[:10]
        vignettes.setdefault(vid, {"vignette_id": vid, "title": situation[:60], "scenario": situation, "emotion": None})
        reappraisals.append(
            {
                "reappraisal_id": f"sharma-{row_number:04d}",
                "vignette_id": vid,
                "author_id": f"sharma2023-practitioner-{row_number:04d}",
                "source": "human",
                "text": row["reframe"],
            }
        )
    meta = {"source": "sharma2023", "has_ratings": False, "has_emotion": False}
    return CanonicalData(
        vignettes=pd.DataFrame(list(vignettes.values()), columns=VIGNETTE_COLUMNS),
        reappraisals=pd.DataFrame(reappraisals, columns=REAPPRAISAL_COLUMNS),
        ratings=pd.DataFrame([], columns=RATING_COLUMNS),
        meta=meta,
    )


def import_canonical_folder(folder: str | Path) -> CanonicalData:
    """A folder that already holds the three canonical tables (CSV, JSONL or parquet)."""
    folder = Path(folder)
    tables = {}
    for name, columns in TABLES.items():
        candidates = [folder / f"{name}{ext}" for ext in (".jsonl", ".csv", ".parquet")]
        found = [c for c in candidates if c.exists()]
        if not found:
            if name == "ratings":
                tables[name] = pd.DataFrame([], columns=columns)
                continue
            raise InputError(f"{folder}: no {name}.jsonl/.csv/.parquet")
        table = read_table(found[0]).map(_normalise_text)
        missing = sorted(set(columns) - set(table.columns))
        extra = sorted(set(table.columns) - set(columns))
        if missing or extra:
            raise InputError(f"{found[0]}: missing column(s) {missing}, unknown column(s) {extra}; expected {columns}")
        if name == "ratings":
            for dim in RATING_DIMENSIONS:
                table[dim] = table[dim].map(_coerce_rating).astype(object)
        tables[name] = table[columns]
    has_ratings = len(tables["ratings"]) > 0
    return CanonicalData(**tables, meta={"source": f"folder:{folder.name}", "has_ratings": has_ratings, "has_emotion": True})


def ingest(source: str, path: str | Path | None, sample_settings: dict | None = None) -> CanonicalData:
    """Dispatch on the ``data.source`` param."""
    if source == "sample":
        from reappreg.sample import generate_sample  # sample imports this module's schema

        return generate_sample(**(sample_settings or {}))
    if path is None:
        raise InputError(f"data.source is {source!r} but data.path is not set; point it at the file to import")
    path = Path(path)
    if source == "sharma2023":
        return import_sharma2023(path)
    if source == "file":
        return import_canonical_folder(path) if path.is_dir() else import_flat(path)
    raise InputError(f"unknown data.source {source!r} (sample, file, sharma2023)")


# ----------------------------------------------------------------------------- canonical IO


def _records(frame: pd.DataFrame) -> list[dict]:
    out = []
    for record in frame.to_dict("records"):
        clean = {}
        for key, value in record.items():
            if isinstance(value, np.integer):
                value = int(value)
            elif isinstance(value, float) and np.isnan(value):
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
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: canonical data folder not found")
    tables = {}
    for name, columns in TABLES.items():
        records = read_jsonl(folder / f"{name}.jsonl")
        frame = pd.DataFrame(records)
        for col in columns:
            if col not in frame.columns:
                frame[col] = pd.Series(dtype=object)
        extra = [c for c in frame.columns if c not in columns]
        tables[name] = frame[columns + extra]
    meta_path = folder / "meta.json"
    meta = read_json(meta_path) if meta_path.exists() else {}
    return CanonicalData(**tables, meta=meta)
