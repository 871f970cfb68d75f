"""The report's building blocks: tables, figures (matplotlib, rendered to PNG) and sections."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.evidence.formatting import fmt
from reappreg.io import read_json


def walk(obj: Any, path: tuple) -> Any:
    """The value at ``path`` (dict keys, list indices) in ``obj``; None where the path breaks."""
    for key in path:
        if isinstance(obj, Mapping):
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def read_if_present(path: Path | None) -> Any:
    """A pipeline file's JSON, or None when it is absent or unreadable: the report describes what
    is there, and its sections name what is missing."""
    if path is None or not path.is_file():
        return None
    try:
        return read_json(path)
    except InputError:
        return None


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]
    caption: str = ""


@dataclass
class Figure:
    title: str
    png: bytes
    caption: str = ""


@dataclass
class Details:
    """Raw numbers folded away: a collapsed ``<details>`` block (HTML and GitHub markdown)."""

    summary: str
    blocks: list[Table | str] = field(default_factory=list)


@dataclass(frozen=True)
class Fact:
    """One number (or word) the summary shows, and where it was read: ``path`` walks the JSON
    file ``source`` (dict keys and list indices); ``count`` means the number of records at
    ``path`` (a JSONL file's lines when ``path`` is empty). Tests re-read every fact."""

    value: Any
    source: str
    path: tuple = ()
    count: bool = False


@dataclass
class SummaryLine:
    title: str
    anchor: str
    verdict: str            # the answer in a word or two: PASS, FAIL, healthy, NOT trusted, ...
    sentences: list[str]
    facts: list[Fact] = field(default_factory=list)
    ok: bool | None = None  # colours the verdict; None: neither good nor bad (not checked, missing)
    # Numbers that compare across rows (one per reward model, say): one kind of number per column,
    # each cell's numbers among ``facts``; shown under the sentences.
    table: Table | None = None


@dataclass
class Summary:
    lines: list[SummaryLine]


@dataclass
class Section:
    title: str
    sources: list[str]
    blocks: list[Table | Figure | Details | Summary | str] = field(default_factory=list)
    # Why evidence is missing: "<file>: not found (written by `dvc repro <stage>`)", ...
    missing: list[str] = field(default_factory=list)
    anchor: str = ""

    def __post_init__(self):
        if not self.anchor:
            self.anchor = slug(self.title)


def slug(title: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")



def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def num(value: Any) -> float | None:
    if value in (None, ""):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None



def count(value: Any) -> Any:
    """A count read from CSV (``"13.0"``) as the int it is; other values as :func:`num` reads them."""
    value = num(value)
    return int(value) if value is not None and value.is_integer() else value


def empty_reason(row: Mapping[str, Any]) -> str | None:
    """Why a win-rate row has no value (None when it has one)."""
    if num(row.get("win_rate")) is not None:
        return None
    n, unparseable = num(row.get("n")) or 0, num(row.get("n_unparseable")) or 0
    if n == 0 and unparseable:
        return f"no scored judgment: all {int(unparseable)} judgment(s) unparseable"
    if n == 0:
        return "no judgment for this row"
    return "win-rate not recorded"



# --------------------------------------------------------------------------- figures


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def curves_figure(history: list[Mapping[str, Any]], keys: list[str]) -> Figure:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    ncols = 2
    nrows = max(1, math.ceil(len(keys) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(9, 2.6 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        points = [(row["step"], row[key]) for row in history if is_number(row.get(key)) and is_number(row.get("step"))]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, "-o", markersize=4)
            ax.annotate(fmt(ys[-1]), (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(key.rsplit("/", 1)[-1])
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    return Figure("Policy health per training step", _png(fig), "One panel per logged health metric; the last value is labelled.")


def forest_figure(title: str, rows: list[Mapping[str, Any]]) -> Figure:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 0.6 * len(rows) + 1.8))
    ys = list(range(len(rows)))[::-1]
    names, labelled = [], set()

    def label(name: str) -> str | None:
        if name in labelled:
            return None
        labelled.add(name)
        return name

    for y, row in zip(ys, rows):
        names.append(f"{row.get('row')} (n={fmt(count(row.get('n')))})")
        value = num(row.get("win_rate"))
        for offset, kind, color in ((0.16, "iid", "#888888"), (-0.16, "vignette-cluster", "#d62728")):
            key = "iid" if kind == "iid" else "cluster"
            low, high = num(row.get(f"{key}_low")), num(row.get(f"{key}_high"))
            if low is not None and high is not None:
                ax.hlines(y + offset, low, high, color=color, linewidth=2.2, zorder=2, label=label(f"{kind} 95% interval"))
                ax.plot([low, high], [y + offset] * 2, "|", color=color, markersize=9, zorder=2)
        if value is None:
            ax.annotate(empty_reason(row), (0.5, y), ha="center", va="center", fontsize=8, color="#a00", style="italic")
            continue
        ax.plot(value, y, "D", color="black", markerfacecolor="white", markeredgewidth=1.6, markersize=8, zorder=4,
                label=label("win-rate"))
        ax.annotate(fmt(value), (value, y), textcoords="offset points", xytext=(9, 0), va="center", fontsize=8, zorder=5,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    ax.axvline(0.5, color="#555", linestyle=":", linewidth=1)
    ax.set_yticks(ys, names)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.8, len(rows) - 0.2)
    ax.set_xlabel("win-rate against the held-out answer (dotted line: 0.5)")
    ax.set_ylabel("vignette, then pooled")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    if labelled:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)
    return Figure(title, _png(fig), "Diamond: win-rate (labelled). Grey: iid Wilson interval. Red: vignette-cluster interval. "
                                    "Rows without a value say why.")
