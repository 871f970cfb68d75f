"""Stock phrasing, weighted by measured frequency (params ``guard.stock``).

A phrase that many held-out answers share across scenarios ("it makes sense to feel", a
closer said about any situation), or that honest writing uses often (a reference corpus
such as Sharma et al.'s reframes), proves nothing when a training text shares it: honest
texts use it too. Each held-out gram (word n-gram, word shingle, letter window) therefore
carries a weight measured from its frequency, never from a list of phrases:

* **held-out answers** ``c(g)``: how many distinct answers hold it, when they answer two or
  more scenarios (``vignette_id``; every answer counts as its own where some name none), and
  1 when they all answer one scenario: a phrase the answers to one scenario share is that
  scenario's content (a piece of it must count); said about several scenarios, it is stock,
  the more so the more answers say it. Variants of one answer (its tokenizer views) count once;
* **reference documents** ``r(g)`` out of ``R``: how many documents of the honest reference
  corpus (``stock.reference``; optional) hold it.

    w(g) = min(1, stock.contexts / c(g), stock.reference_rate * R / r(g))

A gram in at most ``contexts`` answers (or one scenario's answers) and at most
``reference_rate`` of the reference documents weighs 1; one that twenty answers to several
scenarios say weighs ``contexts / 20``. The detectors that
count shared grams (``ngram``, ``minhash``, ``chars``, ``fragments``) count them by weight:
containment is the shared grams' weight over the answer's weight, a shared run is as long as
its weight, a letter window covers its letters at its weight. A verbatim copy still scores
1.0 (every gram, every weight shared); a text that shares only stock phrasing scores about
the stock weight. Training texts never decide a weight: they are the attacker's to write,
and counting them would let repetition launder a copied piece into "stock" (tests).

The reference corpus is read once per index; only the counts of grams the held-out answers
also have are kept (in the index, the certificate's summary and the sketch, keyed there like
every other gram). Its md5 is recorded, and the audit refuses a reference that changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from reappreg.errors import InputError

if TYPE_CHECKING:
    from reappreg.guard.grams import GramTable
    from reappreg.settings.guard import StockSettings


@dataclass
class Reference:
    """What the index keeps of the honest reference corpus: its size and md5, and per weighted
    gram kind (a detector's name) the sorted held-out keys it holds with their document counts."""

    docs: int = 0
    md5: str | None = None
    path: str | None = None
    counts: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def count_of(self, kind: str, keys: np.ndarray) -> np.ndarray:
        """Reference documents holding each of ``keys`` (0 for a key it lacks)."""
        found = self.counts.get(kind)
        out = np.zeros(len(keys), dtype=np.int64)
        if found is None or not len(found[0]) or not len(keys):
            return out
        ref_keys, ref_counts = found
        at = np.minimum(np.searchsorted(ref_keys, keys), len(ref_keys) - 1)
        hit = ref_keys[at] == keys
        out[hit] = ref_counts[at[hit]]
        return out

    def describe(self) -> dict[str, Any]:
        """What the certificate says of it (path, md5, documents, grams counted per kind)."""
        return {"path": self.path, "md5": self.md5, "documents": self.docs,
                "heldout_grams_found": {k: int(len(v[0])) for k, v in sorted(self.counts.items())}}


def read_reference(settings: StockSettings) -> tuple[list[str], str | None, str | None]:
    """(texts, md5, path) of the reference corpus ``settings.reference`` (JSONL or CSV with the
    ``reference_field`` column, or plain text by paragraph); ([], None, None) without one."""
    if settings.reference is None:
        return [], None, None
    from reappreg.guard.text import SourceSpec, read_source
    from reappreg.hashing import dvc_md5

    path = Path(settings.reference)
    if not path.is_file():
        raise InputError(f"guard.stock.reference: {path} not found (an honest reference corpus, or null)")
    source = read_source(SourceSpec(path, None, (settings.reference_field,)))
    texts = [u.text for u in source.units if u.text.strip()]
    if not texts:
        raise InputError(f"guard.stock.reference: {path} holds no text in field '{settings.reference_field}'")
    return texts, dvc_md5(path), str(path)


def document_counts(keys: np.ndarray, offsets: np.ndarray, wanted: Sequence[frozenset[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted keys, documents holding each) of the grams of the documents (``keys`` flat,
    split by ``offsets``) that are among ``wanted`` (the held-out answers' key sets)."""
    held = np.fromiter({k for s in wanted for k in s}, dtype=np.uint64)
    held.sort()
    if not len(keys) or not len(held):
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    doc = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    at = np.minimum(np.searchsorted(held, keys), len(held) - 1)
    mine = held[at] == keys
    pairs = np.unique(np.stack([at[mine], doc[mine]]), axis=1)  # each (gram, document) once
    found, counts = np.unique(pairs[0], return_counts=True)
    return held[found], counts.astype(np.int64)


def contexts(table: GramTable, answers: Sequence[Any]) -> np.ndarray:
    """Per key of ``table``: the distinct answers holding it where they answer two or more
    scenarios (or some answer names none), else 1 (module docstring); an answer's variants
    count once. ``answers``: the index's ``AnswerMeta`` (answer_id, vignette_id)."""
    if not len(table.keys):
        return np.zeros(0, dtype=np.int64)
    answer_ids = np.unique(np.array([a.answer_id for a in answers], dtype=object), return_inverse=True)[1].ravel()
    coo = table.matrix.tocoo()
    pairs = np.unique(np.stack([coo.row.astype(np.int64), answer_ids[coo.col].astype(np.int64)]), axis=1)
    counts = np.bincount(pairs[0], minlength=len(table.keys)).astype(np.int64)
    if answers and all(a.vignette_id is not None for a in answers):
        scenario = np.unique(np.array([str(a.vignette_id) for a in answers], dtype=object), return_inverse=True)[1].ravel()
        per_scenario = np.unique(np.stack([coo.row.astype(np.int64), scenario[coo.col].astype(np.int64)]), axis=1)
        one_scenario = np.bincount(per_scenario[0], minlength=len(table.keys)) < 2
        counts[one_scenario] = 1
    return counts


def gram_weights(table: GramTable, answers: Sequence[Any], kind: str, reference: Reference | None,
                 settings: StockSettings) -> np.ndarray:
    """The weight of each key of ``table`` (see the module docstring); all 1 when
    ``stock.enabled`` is false."""
    weights = np.ones(len(table.keys), dtype=np.float64)
    if not settings.enabled or not len(table.keys):
        return weights
    weights = np.minimum(weights, settings.contexts / np.maximum(contexts(table, answers), 1))
    if reference is not None and reference.docs:
        counts = reference.count_of(kind, table.keys)
        allowed = settings.reference_rate * reference.docs
        weights = np.minimum(weights, np.where(counts > allowed, allowed / np.maximum(counts, 1), 1.0))
    return weights


def summary(index: Any) -> dict[str, Any]:
    """What the certificate's ``heldout.stock`` says: per weighted gram kind, how many held-out
    grams weigh less than 1 and their mean weight, and the reference corpus."""
    out: dict[str, Any] = {}
    for kind, table in getattr(index, "stock_tables", {}).items():
        w = table.weights
        light = w < 1
        out[kind] = {"grams": int(len(w)), "weighted_as_stock": int(light.sum()),
                     "mean_weight_of_stock": round(float(w[light].mean()), 6) if light.any() else None}
    reference = getattr(index, "reference", None)
    out["reference"] = reference.describe() if reference is not None and reference.docs else None
    return out
