"""Strict readers for the tabular files people import (CSV, TSV, JSONL, parquet).

A real export is read exactly as written or refused with the file, the line numbers, a count
and examples; nothing is guessed:

- CSV/TSV: invalid UTF-8, bad quoting, a wrong delimiter, blank or duplicated header names,
  and rows with more or fewer fields than the header;
- JSONL: invalid JSON, a key repeated in one object, nested values, non-finite numbers;
- every format: one column holding values of different types (``5`` on one line, ``"5"``
  on another), and text holding a forbidden character (see ``forbidden_characters``).

Cells keep the value they were read with (CSV cells are strings; blank cells are ``None``);
the importers decide what a value means.
"""

from __future__ import annotations

import csv
import io
import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from reappreg.errors import InputError
from reappreg.io import read_jsonl_lines

MAX_EXAMPLES = 5
# Whitespace controls a multi-paragraph text legitimately holds.
ALLOWED_CONTROLS = frozenset("\t\n\r")


# Characters that are certainly allowed (printable ASCII, tab, newline, CR); only the others
# are looked up in the Unicode database, which keeps large mostly-ASCII exports fast.
UNUSUAL = re.compile("[^\t\n\r\x20-\x7e]")


def forbidden_characters(text: str) -> list[tuple[int, str]]:
    """(character index, description) of every character no stored text may hold: control
    characters other than tab/newline/CR (NUL, C0, DEL, C1), surrogates (a lone half of a
    UTF-16 pair) and code points unassigned in this Python's Unicode database."""
    found = []
    for match in UNUSUAL.finditer(text):
        index, char = match.start(), match.group()
        category = unicodedata.category(char)
        if category == "Cc" and char not in ALLOWED_CONTROLS:
            kind = "control character"
        elif category == "Cs":
            kind = "surrogate"
        elif category == "Cn":
            kind = "unassigned code point"
        else:
            continue
        found.append((index, f"U+{ord(char):04X} ({kind})"))
    return found


def describe_forbidden(text: str) -> str | None:
    """One line naming the first forbidden characters of ``text``, or None if it is clean."""
    found = forbidden_characters(text)
    if not found:
        return None
    shown = ", ".join(f"{what} at character {index + 1}" for index, what in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return shown + more


@dataclass
class RawTable:
    """Cells as read (object dtype, blank = None) and where each row came from."""

    path: Path
    frame: pd.DataFrame
    locations: list[str]  # "line 7" (CSV/TSV/JSONL: first line of the record) or "row 7" (parquet)

    def where(self, position: int) -> str:
        return f"{self.path}: {self.locations[position]}"


def _examples(items: list[str]) -> str:
    shown = "; ".join(items[:MAX_EXAMPLES])
    return shown + (f"; ... ({len(items) - MAX_EXAMPLES} more)" if len(items) > MAX_EXAMPLES else "")


def _decode(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}: line {line} is not valid UTF-8 (byte offset {exc.start}); re-export the file as UTF-8") from exc


def _check_header(path: Path, header: list[str], where: str) -> None:
    blank = [str(i + 1) for i, name in enumerate(header) if not str(name).strip()]
    if blank:
        raise InputError(f"{path}: {where}: column(s) {', '.join(blank)} have a blank name; name every column")
    seen: dict[str, int] = {}
    repeated = []
    for i, name in enumerate(header):
        if name in seen:
            repeated.append(f"{name!r} (columns {seen[name] + 1} and {i + 1})")
        seen.setdefault(name, i)
    if repeated:
        raise InputError(f"{path}: {where}: duplicated column name(s) {', '.join(repeated)}; each column must be named once")


def _read_delimited(path: Path, delimiter: str) -> RawTable:
    text = _decode(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    records: list[tuple[int, list[str]]] = []
    start = 1
    try:
        for row in reader:
            if row:  # blank lines carry no record
                records.append((start, row))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise InputError(f"{path}: line {reader.line_num}: malformed {path.suffix[1:].upper()} ({exc}); check quoting") from exc
    if text and not text.endswith(("\n", "\r")) and text.count('"') % 2:
        raise InputError(f"{path}: ends inside a quoted field (truncated file or unclosed quote)")
    if not records:
        raise InputError(f"{path}: file is empty")
    header = [h.strip() for h in records[0][1]]
    if len(header) == 1 and any(sep in header[0] for sep in ";\t|,".replace(delimiter, "")):
        found = next(sep for sep in ";\t|,".replace(delimiter, "") if sep in header[0])
        raise InputError(f"{path}: header has one column; the file looks {found!r}-delimited, expected {delimiter!r}")
    _check_header(path, header, "line 1 (header)")
    ragged = [f"line {line} has {len(row)}" for line, row in records[1:] if len(row) != len(header)]
    if ragged:
        raise InputError(
            f"{path}: {len(ragged)} row(s) do not have the header's {len(header)} fields "
            f"(truncated line, stray delimiter or bad quoting): {_examples(ragged)}"
        )
    rows = [[cell if cell.strip() else None for cell in row] for _, row in records[1:]]
    frame = pd.DataFrame(rows, columns=header, dtype=object)
    return RawTable(path, frame, [f"line {line}" for line, _ in records[1:]])


def _read_jsonl(path: Path) -> RawTable:
    records = read_jsonl_lines(path)
    if not records:
        raise InputError(f"{path}: file is empty")
    columns: dict[str, None] = {}
    nested = []
    for line, record in records:
        for key, value in record.items():
            columns.setdefault(key, None)
            if isinstance(value, (dict, list)):
                nested.append(f"line {line} key {key!r}")
    if nested:
        raise InputError(f"{path}: {len(nested)} value(s) are JSON objects or lists, expected flat values: {_examples(nested)}")
    _check_header(path, list(columns), "keys")
    rows = [[_blank_to_none(record.get(key)) for key in columns] for _, record in records]
    frame = pd.DataFrame(rows, columns=list(columns), dtype=object)
    return RawTable(path, frame, [f"line {line}" for line, _ in records])


def _read_parquet(path: Path) -> RawTable:
    import pyarrow.parquet as pq
    import pyarrow.types as pat

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types; all mean "not a readable parquet"
        raise InputError(f"{path}: not a readable parquet file ({exc})") from exc
    _check_header(path, table.column_names, "schema")
    nested = [f.name for f in table.schema if pat.is_nested(f.type)]
    if nested:
        raise InputError(f"{path}: column(s) {nested} hold nested values (lists/structs), expected flat values")
    rows = table.to_pylist()
    frame = pd.DataFrame([[_blank_to_none(r[c]) for c in table.column_names] for r in rows], columns=table.column_names, dtype=object)
    return RawTable(path, frame, [f"row {i + 1}" for i in range(len(rows))])


def _blank_to_none(value):
    if isinstance(value, str) and not value.strip():
        return None
    return value


def _kind(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def _check_cells(table: RawTable) -> None:
    """Finite numbers, one value type per column, no forbidden character in any string."""
    problems: list[str] = []
    count = 0
    for column in table.frame.columns:
        values = table.frame[column].tolist()
        by_kind: dict[str, list[int]] = {}
        for position, value in enumerate(values):
            kind = _kind(value)
            if kind is not None:
                by_kind.setdefault(kind, []).append(position)
            if isinstance(value, float) and not math.isfinite(value):
                count += 1
                problems.append(f"{table.locations[position]} column {column!r}: {value} is not a finite number")
            if isinstance(value, str):
                bad = describe_forbidden(value)
                if bad:
                    count += 1
                    problems.append(f"{table.locations[position]} column {column!r}: {bad}")
        if len(by_kind) > 1:
            majority = max(by_kind, key=lambda k: len(by_kind[k]))
            for kind, positions in by_kind.items():
                if kind == majority:
                    continue
                count += len(positions)
                shown = ", ".join(f"{table.locations[p]} ({values[p]!r})" for p in positions[:MAX_EXAMPLES])
                problems.append(
                    f"column {column!r} mixes value types: {len(positions)} {kind} value(s) among "
                    f"{len(by_kind[majority])} {majority} values, e.g. {shown}"
                )
    if problems:
        raise InputError(
            f"{table.path}: {count} bad cell(s) (allowed in text: any assigned character except control "
            f"characters other than tab, newline and carriage return):\n  - " + "\n  - ".join(problems[:MAX_EXAMPLES * 2])
            + (f"\n  ... ({len(problems) - MAX_EXAMPLES * 2} more)" if len(problems) > MAX_EXAMPLES * 2 else "")
        )
    bad_names = [f"{name!r}: {describe_forbidden(name)}" for name in map(str, table.frame.columns) if describe_forbidden(name)]
    if bad_names:
        raise InputError(f"{table.path}: column name(s) hold forbidden characters: {_examples(bad_names)}")


READERS = {".csv": lambda p: _read_delimited(p, ","), ".tsv": lambda p: _read_delimited(p, "\t"),
           ".jsonl": _read_jsonl, ".ndjson": _read_jsonl, ".parquet": _read_parquet}


def read_table(path: str | Path) -> RawTable:
    """Read one tabular file strictly; any defect raises InputError (see the module doc)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise InputError(f"{path}: unsupported file type '{path.suffix}' (use {', '.join(sorted(READERS))})")
    table = reader(path)
    _check_cells(table)
    return table


def check_strings(cells: Iterable[tuple[str, object]], origin: str) -> None:
    """InputError listing every (where, value) whose string holds a forbidden character."""
    problems = [f"{where}: {describe_forbidden(v)}" for where, v in cells if isinstance(v, str) and describe_forbidden(v)]
    if problems:
        raise InputError(f"{origin}: {len(problems)} value(s) hold forbidden characters: {_examples(problems)}")
