"""Exact containment of held-out grams in texts: the scoring the ``ngram`` and ``chars``
detectors share (sorted-key joins, longest shared runs, containment inside the best stretch),
every shared gram counted at its stock weight (``stock``; ``GramTable.weights``)."""

from __future__ import annotations

import numpy as np

from reappreg.guard.detector import RawHit
from reappreg.guard.grams import GramTable


def letters_per_text(texts: np.ndarray, places: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(texts, letters covered in each) by windows of ``n`` at ``places``, rows sorted by (text, place)."""
    if not len(texts):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    same = np.zeros(len(texts), dtype=bool)
    same[:-1] = texts[1:] == texts[:-1]
    step = np.full(len(texts), n, dtype=np.int64)
    step[:-1] = np.where(same[:-1], np.minimum(places[1:] - places[:-1], n), n)
    unique, start = np.unique(texts, return_index=True)
    return unique, np.add.reduceat(step, start)


def _longest_runs(member: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Longest run of True down each column of a (positions x answers) boolean matrix, each
    position counted at its weight (``weights``, per row; 1 without)."""
    if not len(member):
        return np.zeros(member.shape[1], dtype=np.float64)
    idx = np.arange(len(member))[:, None]
    w = member.astype(np.float64) if weights is None else member * np.asarray(weights, dtype=np.float64)[:, None]
    total = np.vstack([np.zeros((1, member.shape[1])), np.cumsum(w, axis=0)])  # total[i] = sum of rows < i
    last_false = np.maximum.accumulate(np.where(member, -1, idx), axis=0)
    run = total[idx[:, 0] + 1] - np.take_along_axis(total, last_false + 1, axis=0)
    return run.max(axis=0)


def _local_containment(member: np.ndarray, keys: np.ndarray, place_weights: np.ndarray, lengths: np.ndarray,
                       answer_weight: np.ndarray, mean_weight: np.ndarray, *, n: int, span: float,
                       letter_coverage: bool) -> np.ndarray:
    """Per column of ``member`` (text positions x answers): the containment inside the best
    stretch of the text ``span`` times the answer's length.

    Stretches start at every multiple of the answer's length L and are ``span * L`` long, so
    any part of the text up to ``(span - 1) * L`` long lies whole inside one of them (a
    copy with inserted words or filler around it included). Inside a stretch each distinct
    gram counts once (at its first place there), at its stock weight (``place_weights``: the
    weight of the gram at each text position): the shared grams' weight over the answer's
    (``answer_weight``), or with ``letter_coverage`` the letters the distinct shared windows
    cover, times their mean weight, over the answer's letters times its windows' mean weight.
    """
    out = np.zeros(member.shape[1])
    for c in range(member.shape[1]):
        places = np.flatnonzero(member[:, c])
        if not len(places):
            continue
        stride = max(int(lengths[c]), 1)
        width = int(np.ceil(span * stride))
        offsets = np.arange(-(-width // stride))
        stretch = places[:, None] // stride - offsets[None, :]
        inside = (stretch >= 0) & (places[:, None] < stretch * stride + width)
        k, which = stretch[inside], np.broadcast_to(np.arange(len(places))[:, None], stretch.shape)[inside]
        p, key = places[which], keys[places[which]]
        order = np.lexsort((p, key, k))  # by stretch, then gram, first place first
        k, p, key = k[order], p[order], key[order]
        first = np.ones(len(k), dtype=bool)
        first[1:] = (k[1:] != k[:-1]) | (key[1:] != key[:-1])
        k, p = k[first], p[first]
        w = place_weights[p]
        if letter_coverage:
            order = np.lexsort((p, k))
            stretches, letters = letters_per_text(k[order], p[order], n)
            mean_w = np.bincount(k, weights=w)[stretches] / np.bincount(k)[stretches]
            denominator = max(int(lengths[c]), 1) * max(float(mean_weight[c]), 1e-12)
            out[c] = min(float((letters * mean_w).max()) / denominator, 1.0)
        else:
            out[c] = min(float(np.bincount(k, weights=w).max()) / max(float(answer_weight[c]), 1e-12), 1.0)
    return out


def containment_hits(table: GramTable, n_texts: int, grams: np.ndarray, offsets: np.ndarray, *, n: int,
                      containment: float, min_run: int | None, detector: str, span: float,
                      letter_coverage: bool = False, looked_up=None) -> list[RawHit]:
    """Exact containment and longest shared run for every (text, answer) sharing a gram.

    Containment is the fraction of the answer's grams found in the text, or with
    ``letter_coverage`` the fraction of the answer's letters that lie inside shared windows,
    so pieces of an answer spread through a text add up to what they cover; both counted
    inside the best stretch of ``span`` times the answer's length (``_local_containment``),
    so phrases shared with a long document far apart never add up, and both by stock weight
    (``stock``): a gram of stock phrasing shared counts for its weight. A shared run is as
    long as the weight of its grams plus ``n - 1``.
    """
    from scipy.sparse import csr_matrix

    pos, matched = looked_up if looked_up is not None else table.lookup(grams)
    if not matched.any():
        return []
    text_of = np.repeat(np.arange(n_texts, dtype=np.int64), np.diff(offsets))
    # texts x held-out grams (matched positions, with multiplicity) times grams x answers
    positions = csr_matrix((np.ones(int(matched.sum()), dtype=np.int32), (text_of[matched], pos[matched])),
                           shape=(n_texts, len(table.keys)))
    distinct = positions.copy()
    distinct.data[:] = 1  # a repeated gram in the text counts once
    shared_csr = distinct @ table.matrix
    weighted_csr = distinct @ table.weighted
    _check_aligned(weighted_csr, shared_csr)
    shared = shared_csr.tocoo()  # entries in CSR order (row by row)
    if letter_coverage:
        # a window covers at most n letters at weight at most 1: pairs that cannot reach the
        # threshold are skipped
        need_score = shared.data * n >= containment * table.lengths[shared.col] * table.mean_weight[shared.col]
        score = np.zeros(len(shared.data))
    else:
        # the shared grams' weight over the whole text bounds the weight in any stretch
        score = weighted_csr.data / np.maximum(table.answer_weight[shared.col], 1e-12)
        need_score = np.zeros(len(shared.data), dtype=bool)
    # Longest shared run for every pair that is a hit by containment or could be one by run:
    # a run of R units is R - n + 1 consecutive matched positions (weight at most 1 each), so
    # only pairs with at least that many matched positions (with multiplicity) can have one.
    run_needed = (score >= containment) | need_score
    if min_run:
        need = max(min_run - n + 1, 1)
        with_mult = positions @ table.matrix
        # `positions` and `distinct` share one sparsity structure, so the two products do too
        # and their entries align one to one; checked, because the alignment is what makes
        # this right.
        _check_aligned(with_mult, shared_csr)
        run_needed |= with_mult.data >= need
    longest = np.zeros(len(shared.data), dtype=np.float64)
    candidate = np.flatnonzero(run_needed)  # row-major order: grouped by text
    groups = np.split(candidate, np.flatnonzero(np.diff(shared.row[candidate])) + 1) if len(candidate) else []
    for js in groups:
        r = shared.row[js[0]]
        lo, hi = offsets[r], offsets[r + 1]
        cols = shared.col[js]
        member = np.zeros((hi - lo, len(js)), dtype=bool)
        present = np.flatnonzero(matched[lo:hi])
        member[present] = table.matrix[pos[lo:hi][present]][:, cols].toarray() > 0
        place_weights = np.where(matched[lo:hi], table.weights[pos[lo:hi]], 0.0)
        runs = _longest_runs(member, place_weights)
        units = np.where(runs > 0, runs + n - 1, 0.0)
        longest[js] = np.minimum(units, table.lengths[cols])
        score[js] = _local_containment(member, grams[lo:hi], place_weights, table.lengths[cols],
                                       table.answer_weight[cols], table.mean_weight[cols], n=n, span=span,
                                       letter_coverage=letter_coverage)
    by_containment = score >= containment
    by_run = longest >= min_run if min_run else np.zeros(len(longest), dtype=bool)
    return [
        (int(shared.row[j]), int(shared.col[j]), detector, float(score[j]),
         "containment" if by_containment[j] else "min_run", int(shared.data[j]), int(np.floor(longest[j] + 1e-9)))
        for j in np.flatnonzero(by_containment | by_run)
    ]


def _check_aligned(product, reference) -> None:
    if not (np.array_equal(product.indptr, reference.indptr) and np.array_equal(product.indices, reference.indices)):
        raise RuntimeError("guard: gram count matrices lost alignment (scipy sparse behaviour changed)")
