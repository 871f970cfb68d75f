"""The ``fragments`` detector: one answer spread over several records of one group (one
author, one conversation, one source file), found from the pieces the scan collects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reappreg.guard.index import HeldoutIndex


STOCK_RUN_SHARE = 0.8  # a shared run this much stock is an opener/closer (tests: both directions)


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


def fragment_hits(index: HeldoutIndex, pieces: np.ndarray, groups: Sequence[tuple[int, Sequence[int]]],
                  n_texts: int, record_of: np.ndarray | None = None,
                  flagged: np.ndarray | None = None) -> list[tuple[int, int, float, int, list[int]]]:
    """(group index, answer index, coverage, shared windows, contributing texts) for every group
    whose members' pieces cover >= ``fragments.coverage`` of an answer's letters while no
    single member does, with >= 2 contributors.

    Stock phrasing is decided from the held-out answers alone (``index.stock``: letter windows
    found in >= ``fragments.stock_answers`` answers), never from how often training records
    use a window: the training records are the attacker's to write, so counting them would
    let filler records repeating pieces of an answer turn those pieces into "stock". A stock
    window covers nothing, and coverage is measured on the letters outside stock phrasing
    (an answer made mostly of stock phrasing is then covered by its own words only).

    Records the per-record detectors flagged (``flagged``, per text: its record has a hit)
    count towards the group's coverage but are not named again (they are blocked already,
    and held-out answers of one vignette share phrases, so a copy of one answer holds pieces
    of its neighbours): the hit names the other contributing texts, and is dropped when
    there are none. ``record_of`` maps a text to its record (default: each text its own).

    Each distinct window counts once in a group (at its first place), so the same stock
    piece repeated over many records covers no more than it does once.
    """
    from scipy.sparse import csr_matrix

    config, table = index.config, index.letters
    n, threshold = config.chars_n, config.fragments_coverage
    # Coverage is measured on the letters outside stock phrasing: each stock window takes
    # about one letter off its answer's length, and stock windows cover nothing.
    lengths = np.maximum(table.lengths - np.asarray(table.matrix.T @ index.stock.astype(np.int64)).ravel(), 1)
    if pieces.shape[1]:
        # A run of shared windows at least 80% stock is an opener or closer with a few letters
        # of what follows it, not a piece (those boundary windows are in no other answer, but
        # they are mostly the stock phrase); in the runs kept, the stock windows themselves do
        # not count.
        new_run = np.ones(pieces.shape[1], dtype=bool)
        new_run[1:] = (np.diff(pieces[0]) != 0) | (np.diff(pieces[2]) != 1)
        run_id = np.cumsum(new_run) - 1
        is_stock = index.stock[pieces[1]]
        stock_share = np.bincount(run_id, weights=is_stock) / np.bincount(run_id)
        pieces = pieces[:, (stock_share[run_id] < STOCK_RUN_SHARE) & ~is_stock]
    if not pieces.shape[1] or not groups:
        return []
    records = np.arange(n_texts) if record_of is None else np.asarray(record_of)
    flagged = np.zeros(n_texts, dtype=bool) if flagged is None else np.asarray(flagged)
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
    candidates = np.flatnonzero(shared.data * n >= threshold * lengths[shared.col])
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
        if len(set(records[np.unique(pieces[0, sel])].tolist())) < 2:
            continue  # one record alone (in any of its views) is the per-record detectors' case
        # pieces are sorted by (text, place): the first occurrence of a window in the group wins
        first = np.zeros(len(sel), dtype=bool)
        first[np.unique(pieces[1, sel], return_index=True)[1]] = True
        _, fresh_letters = _letters_per_text(pieces[0, sel][first], pieces[2, sel][first], n)
        coverage = min(int(fresh_letters.sum()) / int(lengths[a]), 1.0)
        if coverage < threshold:
            continue
        # every record holding a piece is named (copies of one piece over many records too)
        texts = np.unique(pieces[0, sel])
        named = texts[~flagged[texts]]  # flagged records count, but are reported on their own
        if len(named):
            out.append((g, a, coverage, int(shared.data[j]), sorted(named.tolist())))
    return out
