"""Reading the texts the guard checks (JSONL, CSV, Parquet, plain text) into text units.

Normalisation lives in ``reappreg.guard.normalise`` (re-exported here for callers that read
sources and tokenise in one place).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from reappreg.errors import InputError
from reappreg.guard.normalise import NORMALISATION, letters, normalise, tokens
from reappreg.io import read_jsonl

__all__ = ["NORMALISATION", "SourceSpec", "SourceTexts", "TextUnit", "check_sizes", "letters", "normalise", "read_source",
           "tokens"]


# ----------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Group:
    """Records that may together hold one answer: one author, one conversation, the adjacent
    records of one file (``fragments.fragment_groups`` forms them; ``fragments`` checks them
    together). With a ``window``, only pieces within that many consecutive records of the
    group (in its order) are put together; without, the whole group's."""

    source: str
    label: str                 # "author_id=a7", "adjacent", ...
    members: tuple[int, ...]   # unit indices, in the group's order
    window: int | None = None  # records


@dataclass(frozen=True)
class SourceSpec:
    """A file to check and where its ids and texts are.

    Written ``[NAME=]PATH:ID_FIELD:TEXT_FIELD[,TEXT_FIELD...]``; NAME is the file name of the
    guarded copy (default: the source's own file name).
    """

    path: Path
    id_field: str | None = None
    text_fields: tuple[str, ...] = ()
    name: str | None = None

    @classmethod
    def parse(cls, spec: str, *, default_id: str | None = None, default_text: tuple[str, ...] = ()) -> "SourceSpec":
        name = None
        head, sep, rest = spec.partition("=")
        if sep and "/" not in head and ":" not in head and rest:
            name, spec = head, rest
            if not name.strip() or name in {".", ".."}:
                raise InputError(f"source spec '{head}={rest}': empty or invalid guarded file name")
        # Split from the right so a path may itself contain ':' (rare, but not ours to forbid).
        parts = spec.rsplit(":", 2)
        if len(parts) == 3 and parts[1] and parts[2]:
            path, id_field, text = parts
            fields = tuple(f.strip() for f in text.split(",") if f.strip())
            if not fields:
                raise InputError(f"source spec '{spec}': no text field after the last ':'")
            return cls(Path(path), id_field, fields, name)
        if ":" in spec and not Path(spec).exists():
            raise InputError(f"source spec '{spec}': expected [NAME=]PATH:ID_FIELD:TEXT_FIELD[,TEXT_FIELD...]")
        return cls(Path(spec), default_id, default_text, name)

    @property
    def guarded_name(self) -> str:
        return self.name or self.path.name

    def describe(self) -> str:
        prefix = f"{self.name}=" if self.name else ""
        return f"{prefix}{self.path}:{self.id_field}:{','.join(self.text_fields)}"


@dataclass(frozen=True)
class TextUnit:
    """One text to check: a field of a record in a source file."""

    source: str
    record_id: str
    field: str
    text: str


@dataclass
class SourceTexts:
    spec: SourceSpec
    records: list[dict]
    units: list[TextUnit]
    format: str


@dataclass(frozen=True)
class SourceSummary:
    """What the certificate records of one training source, from whichever engine read it
    (the local scan reads every source here; on Ray each actor reads its shard)."""

    spec: SourceSpec
    md5: str
    records: int
    texts: int


def _check_records(path: Path, records: list[dict], id_field: str, text_fields: tuple[str, ...], where) -> list[TextUnit]:
    units: list[TextUnit] = []
    seen: dict[str, int] = {}
    for i, record in enumerate(records):
        if id_field not in record:
            raise InputError(f"{path}: {where(i)} has no id field '{id_field}'")
        rid = str(record[id_field])
        if rid in seen:
            raise InputError(f"{path}: {where(i)} repeats id '{rid}' (first at {where(seen[rid])})")
        seen[rid] = i
        for field in text_fields:
            if field not in record:
                raise InputError(f"{path}: {where(i)} (id '{rid}') has no text field '{field}'")
            value = record[field]
            if value is None:
                value = ""
            if not isinstance(value, str):
                raise InputError(f"{path}: {where(i)} (id '{rid}') field '{field}' is {type(value).__name__}, expected text")
            units.append(TextUnit(str(path), rid, field, value))
    return units


def check_sizes(units: list[TextUnit], max_chars: int) -> None:
    """Refuse any text longer than ``max_chars`` (``guard.max_text_chars``), naming it: a
    text is checked whole or not at all, never silently truncated."""
    over = [u for u in units if len(u.text) > max_chars]
    if over:
        named = ", ".join(f"{u.source} record '{u.record_id}' field '{u.field}' ({len(u.text):,} chars)" for u in over[:5])
        more = f" and {len(over) - 5} more" if len(over) > 5 else ""
        raise InputError(f"guard: {len(over)} text(s) longer than guard.max_text_chars={max_chars:,}: {named}{more}; "
                         "split them into records or raise the limit")


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, paragraph text) for blank-line separated paragraphs."""
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            if not current:
                start = lineno
            current.append(line)
        elif current:
            out.append((start, "\n".join(current)))
            current = []
    if current:
        out.append((start, "\n".join(current)))
    return out


def read_source(spec: SourceSpec) -> SourceTexts:
    """Read a JSONL, CSV, Parquet or plain-text file into text units.

    JSONL, CSV and Parquet need ``spec.text_fields``; a missing ``spec.id_field`` means records are
    named by line (``line:N``). Plain text (any other suffix) is split into blank-line
    separated paragraphs, each one text named ``line:N`` by its first line.
    """
    path = spec.path
    if not path.exists():
        raise InputError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix in {".jsonl", ".ndjson"}:
        records = read_jsonl(path)
        fmt = "jsonl"
        where = lambda i: f"record {i + 1}"  # noqa: E731 - records are numbered, blank lines skipped
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            records = pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow raises its own error types for a damaged file
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc
        fmt = "parquet"
        where = lambda i: f"row {i + 1}"  # noqa: E731
    elif suffix == ".csv":
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not valid UTF-8 (byte offset {exc.start})") from exc
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            records = [dict(row) for row in reader]
        except csv.Error as exc:
            raise InputError(f"{path}: CSV error near line {reader.line_num}: {exc}") from exc
        fmt = "csv"
        where = lambda i: f"row {i + 2}"  # noqa: E731 - row 1 is the header
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not valid UTF-8 (byte offset {exc.start})") from exc
        records = [{"id": f"line:{line}", "text": para} for line, para in _paragraphs(text)]
        units = [TextUnit(str(path), r["id"], "text", r["text"]) for r in records]
        return SourceTexts(spec, records, units, "text")
    if not spec.text_fields:
        raise InputError(f"{path}: name the text field(s) to check ({fmt} needs PATH:ID_FIELD:TEXT_FIELD or --text-field)")
    if spec.id_field is None:
        records = [{**r, "__line__": f"line:{i + 1}"} for i, r in enumerate(records)]
        units = _check_records(path, records, "__line__", spec.text_fields, where)
        records = [{k: v for k, v in r.items() if k != "__line__"} for r in records]
    else:
        units = _check_records(path, records, spec.id_field, spec.text_fields, where)
    return SourceTexts(spec, records, units, fmt)


def read_training(spec: SourceSpec, max_chars: int) -> SourceTexts:
    """A training source as ``read_source`` reads it, refused when it holds no record or a
    text longer than ``max_chars`` (both engines read their sources through this)."""
    src = read_source(spec)
    if not src.records:
        raise InputError(f"{spec.path}: training source is empty (no records): refusing to certify an empty set")
    check_sizes(src.units, max_chars)
    return src


def record_ids(src: SourceTexts) -> list[str]:
    """The id of each record of a source, in order (line numbers where it names no id field)."""
    if src.format == "text":
        return [str(r["id"]) for r in src.records]
    if src.spec.id_field is None:
        return [f"line:{i + 1}" for i in range(len(src.records))]
    return [str(r[src.spec.id_field]) for r in src.records]
