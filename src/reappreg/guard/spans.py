"""Reporting: the passages a training text shares with a held-out answer, as normalised words.

``word_spans`` (word grams: ``ngram``, ``minhash``) and ``letter_spans`` (letter windows:
``chars``, ``fragments``) are what the detectors' ``spans`` call (``detect.shared_spans``
asks the registered detector of each request).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from reappreg.guard.normalise import letter_ends, letter_tokens, letters, tokens

if TYPE_CHECKING:
    from reappreg.guard.grams import GramTable
    from reappreg.guard.detector import DetectorIndex


def _merge_spans(hit_positions: list[int], n: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for p in hit_positions:
        if spans and p <= spans[-1][1]:
            spans[-1] = (spans[-1][0], p + n)
        else:
            spans.append((p, p + n))
    return spans


def _firsts(spans: list[str], limit: int) -> list[str]:
    return list(dict.fromkeys(spans))[:limit]


def word_spans(index: DetectorIndex, texts: Sequence[str], requests: Sequence[tuple[int, int]], n: int, domain: int,
               table: "GramTable", limit: int, grams: tuple[np.ndarray, np.ndarray] | None = None) -> list[list[str]]:
    """Shared passages of word grams of ``n`` words (``domain``, held-out side ``table``):
    each text normalised once, its grams hashed in one vectorised call (the keys the scan used;
    ``grams``: those keys of every text, (keys, offsets), where the scan has them)."""
    out: list[list[str]] = [[] for _ in requests]
    if not requests:
        return out
    text_ids = sorted({t for t, _ in requests})
    toks = {t: tokens(texts[t]) for t in text_ids}
    if grams is None:
        keys, offsets = index.hasher.grams([toks[t] for t in text_ids], n, domain)
        row = {t: i for i, t in enumerate(text_ids)}
    else:
        (keys, offsets), row = grams, {t: t for t in text_ids}
    for k, (t, answer) in enumerate(requests):
        found = np.isin(keys[offsets[row[t]] : offsets[row[t] + 1]], table.answer_keys(answer))
        if 0 < len(toks[t]) < n:
            out[k] = [" ".join(toks[t])] if found.any() else []
        else:
            out[k] = _firsts([" ".join(toks[t][lo:hi]) for lo, hi in _merge_spans(np.flatnonzero(found).tolist(), n)], limit)
    return out


def letter_spans(index: DetectorIndex, texts: Sequence[str], requests: Sequence[tuple[int, int]], limit: int,
                 grams: tuple[np.ndarray, np.ndarray] | None = None) -> list[list[str]]:
    """Shared passages of letter windows (``chars.n`` letters), as the words that hold them
    (``grams``: the letter-window keys of every text, (keys, offsets), where the scan has them:
    the letter view is the letters of these words in a row)."""
    out: list[list[str]] = [[] for _ in requests]
    if not requests:
        return out
    n = index.settings.chars.n
    text_ids = sorted({t for t, _ in requests})
    words = {t: letter_tokens(texts[t]) for t in text_ids}
    ends = {t: letter_ends(words[t]) for t in text_ids}  # where each word's letters end in the letter view
    if grams is None:
        keys, offsets = index.hasher.letter_grams([letters(words[t]) for t in text_ids], n)
        row = {t: i for i, t in enumerate(text_ids)}
    else:
        (keys, offsets), row = grams, {t: t for t in text_ids}
    for k, (t, answer) in enumerate(requests):
        found = np.isin(keys[offsets[row[t]] : offsets[row[t] + 1]], index.letters.answer_keys(answer))
        spans = []
        for lo, hi in _merge_spans(np.flatnonzero(found).tolist(), n):
            first = int(np.searchsorted(ends[t], lo, side="right"))
            last = int(np.searchsorted(ends[t], hi - 1, side="right"))
            spans.append(" ".join(words[t][first : last + 1]))
        out[k] = _firsts(spans, limit)
    return out
