"""The ``fragments`` detector: one answer spread over several records of one group (one
author, one conversation, one source file), found from the pieces the scan collects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reappreg.guard.index import HeldoutIndex


@dataclass(frozen=True)
class Group:
    """Records that may together hold one answer: one author, one conversation, one file."""

    source: str
    label: str                 # "author_id=a7", "file", ...
    members: tuple[int, ...]   # unit indices


def _letters_per_text(texts: np.ndarray, places: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(texts, letters covered in each) by windows of ``n`` at ``places``, rows sorted by (text, place)."""
    if not len(texts):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    same = np.zeros(len(texts), dtype=bool)
    same[:-1] = texts[1:] == texts[:-1]
    step = np.full(len(texts), n, dtype=np.int64)
    step[:-1] = np.where(same[:-1], np.minimum(places[1:] - places[:-1], n), n)
    unique, start = np.unique(texts, return_index=True)
    return unique, np.add.reduceat(step, start)


def _letters_covered(places: np.ndarray, n: int) -> int:
    """Letters inside the union of windows of ``n`` starting at ``places`` (sorted)."""
    if not len(places):
        return 0
    ends = places + n
    gaps = np.maximum(places[1:] - ends[:-1], 0)  # places are sorted, so windows overlap or follow
    return int(ends[-1] - places[0] - gaps.sum()) if len(places) > 1 else n


def fragment_hits(index: HeldoutIndex, pieces: np.ndarray, groups: Sequence[tuple[int, Sequence[int]]],
                  n_texts: int, record_of: np.ndarray | None = None,
                  flagged: np.ndarray | None = None) -> list[tuple[int, int, float, int, list[int]]]:
    """(group index, answer index, coverage, shared windows, contributing texts) for every group
    whose members' pieces cover >= ``fragments.coverage`` of an answer's letters while no
    single member does, with >= 2 contributors. Pieces of stock phrasing do not count: runs
    whose every window is in >= ``stock_answers`` held-out answers (``stock_windows``) and in
    >= ``stock_records`` clean training records (``record_of`` maps a text to its record,
    default each text its own; ``flagged`` marks texts the per-record detectors flagged,
    which do not count: copies of answers cannot make their phrases stock).

    Each distinct window counts once in a group (at its first place), so the same stock
    piece repeated over many records covers no more than it does once.
    """
    from scipy.sparse import csr_matrix

    config, table = index.config, index.letters
    n, threshold = config.chars_n, config.fragments_coverage
    lengths = table.lengths
    if pieces.shape[1]:
        # A piece (a run of shared windows in one text) made only of windows that many answers
        # and many training records share is stock phrasing, not a piece of an answer.
        new_run = np.ones(pieces.shape[1], dtype=bool)
        new_run[1:] = (np.diff(pieces[0]) != 0) | (np.diff(pieces[2]) != 1)
        run_id = np.cumsum(new_run) - 1
        # Records using a window inside a short run (a phrase, not a copied passage) count
        # towards its use in training text; copies of a whole answer do not make it stock.
        short = (np.bincount(run_id)[run_id] + n - 1) < (config.chars_min_run or 2 * config.fragments_min_piece)
        if flagged is not None:
            short &= ~np.asarray(flagged)[pieces[0]]
        records = (np.arange(n_texts) if record_of is None else np.asarray(record_of))[pieces[0]]
        record_key = np.unique(np.stack([pieces[1][short], records[short]]), axis=1)
        in_records = np.bincount(record_key[0], minlength=len(table.keys))
        stock = index.stock & (in_records >= config.fragments_stock_records)
        # Coverage is then measured on the letters outside stock phrasing: each stock window
        # takes about one letter off its answer's length.
        lengths = np.maximum(table.lengths - np.asarray(table.matrix.T @ stock.astype(np.int64)).ravel(), 1)
        # A run that is mostly stock windows is an opener or closer, not a piece; in the
        # pieces kept, the stock windows themselves do not count.
        is_stock = stock[pieces[1]]
        mostly_stock = np.bincount(run_id, weights=is_stock) * 2 >= np.bincount(run_id)
        pieces = pieces[:, ~mostly_stock[run_id] & ~is_stock]
    if not pieces.shape[1] or not groups:
        return []
    text_pieces = csr_matrix((np.ones(pieces.shape[1], dtype=np.int32), (pieces[0], pieces[1])),
                             shape=(n_texts, len(table.keys)))
    text_pieces.data[:] = 1
    rows = np.repeat(np.arange(len(groups)), [len(m) for _, m in groups])
    cols = np.fromiter((t for _, m in groups for t in m), dtype=np.int64, count=len(rows))
    membership = csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, cols)), shape=(len(groups), n_texts))
    covered = membership @ text_pieces
    covered.data[:] = 1
    shared = (covered @ table.matrix).tocoo()
    # a window covers at most n letters: only pairs that could reach the threshold are scored
    candidates = np.flatnonzero((shared.data * n >= threshold * lengths[shared.col]) & (lengths[shared.col] > 0))
    if not len(candidates):
        return []
    members_of: dict[int, np.ndarray] = {}
    in_answer: dict[int, np.ndarray] = {}
    out = []
    for j in candidates:
        g, a = int(shared.row[j]), int(shared.col[j])
        if a not in in_answer:
            in_answer[a] = np.flatnonzero(np.isin(pieces[1], table._by_answer.indices[table._by_answer.indptr[a] : table._by_answer.indptr[a + 1]]))
        if g not in members_of:
            members_of[g] = np.asarray(groups[g][1], dtype=np.int64)
        sel = in_answer[a]
        sel = sel[np.isin(pieces[0, sel], members_of[g])]
        # pieces are sorted by (text, place): the first occurrence of a window in the group wins
        first = np.zeros(len(sel), dtype=bool)
        first[np.unique(pieces[1, sel], return_index=True)[1]] = True
        texts_all, places_all = pieces[0, sel], pieces[2, sel]
        fresh_texts, fresh_letters = _letters_per_text(texts_all[first], places_all[first], n)
        length = int(lengths[a])
        coverage = min(int(fresh_letters.sum()) / length, 1.0)
        if coverage < threshold or len(fresh_texts) < 2:
            continue
        # A record that alone covers the answer is the per-record detectors' case (and stock
        # phrases of its neighbours must not be flagged with it).
        if _letters_per_text(texts_all, places_all, n)[1].max() >= threshold * length:
            continue
        per_text = dict(zip(fresh_texts.tolist(), fresh_letters.tolist()))
        out.append((g, a, coverage, int(shared.data[j]), sorted(per_text)))
    return out
