"""Reporting: the passages a training text shares with a held-out answer, as normalised words."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reappreg.guard.hashing import _NGRAM, _SHINGLE
from reappreg.guard.index import HeldoutIndex
from reappreg.guard.normalise import letter_tokens, letters, tokens


def _merge_spans(hit_positions: list[int], n: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for p in hit_positions:
        if spans and p <= spans[-1][1]:
            spans[-1] = (spans[-1][0], p + n)
        else:
            spans.append((p, p + n))
    return spans


def shared_spans(index: HeldoutIndex, text: str, answer: int, detector: str, limit: int) -> list[str]:
    """The passages of ``text`` (normalised words) made of grams the answer also has, in
    text order; overlapping grams are merged, so a copied sentence shows as one span."""
    return shared_spans_many(index, [text], [(0, answer, detector)], limit)[0]


def shared_spans_many(index: HeldoutIndex, texts: Sequence[str], requests: Sequence[tuple[int, int, str]],
                      limit: int) -> list[list[str]]:
    """``shared_spans`` for many (text index, answer index, detector) requests: each text is
    normalised once and the texts of one gram kind are hashed in one vectorised call."""
    config = index.config
    out: list[list[str]] = [[] for _ in requests]
    def firsts(spans: list[str]) -> list[str]:
        return list(dict.fromkeys(spans))[:limit]

    word_kinds = {"ngram": (config.ngram_n, _NGRAM, index.ngrams), "minhash": (config.shingle_words, _SHINGLE, index.shingles)}
    for detector, (n, domain, table) in word_kinds.items():
        wanted = [k for k, r in enumerate(requests) if r[2] == detector]
        if not wanted:
            continue
        text_ids = sorted({requests[k][0] for k in wanted})
        toks = {t: tokens(texts[t]) for t in text_ids}
        keys, offsets = index.hasher.grams([toks[t] for t in text_ids], n, domain)  # the keys the scan used
        row = {t: i for i, t in enumerate(text_ids)}
        for k in wanted:
            t, answer, _ = requests[k]
            found = np.isin(keys[offsets[row[t]] : offsets[row[t] + 1]], table.answer_keys(answer))
            if 0 < len(toks[t]) < n:
                out[k] = [" ".join(toks[t])] if found.any() else []
            else:
                out[k] = firsts([" ".join(toks[t][lo:hi]) for lo, hi in _merge_spans(np.flatnonzero(found).tolist(), n)])
    wanted = [k for k, r in enumerate(requests) if r[2] in ("chars", "fragments")]
    if wanted:
        n = config.chars_n
        text_ids = sorted({requests[k][0] for k in wanted})
        words = {t: letter_tokens(texts[t]) for t in text_ids}
        parts = {t: [letters([w]) for w in words[t]] for t in text_ids}
        keys, offsets = index.hasher.letter_grams(["".join(parts[t]) for t in text_ids], n)
        row = {t: i for i, t in enumerate(text_ids)}
        for k in wanted:
            t, answer, _ = requests[k]
            ends = np.cumsum([len(v) for v in parts[t]])
            found = np.isin(keys[offsets[row[t]] : offsets[row[t] + 1]], index.letters.answer_keys(answer))
            spans = []
            for lo, hi in _merge_spans(np.flatnonzero(found).tolist(), n):
                first, last = int(np.searchsorted(ends, lo, side="right")), int(np.searchsorted(ends, hi - 1, side="right"))
                spans.append(" ".join(words[t][first : last + 1]))
            out[k] = firsts(spans)
    return out
