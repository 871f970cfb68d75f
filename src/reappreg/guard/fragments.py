"""The ``fragments`` detector: one answer spread over several records of one group (one
author, one conversation, one source file: ``fragment_groups``), found from the pieces the
scan collects.

Each record contributes its *pieces*: runs of shared letter windows at least
``fragments.min_piece`` letters long (a short stock phrase is not a piece). A hit when the
pieces of two or more records of a group together cover at least ``fragments.coverage`` of
an answer's letters while no single record does (that one is the per-record detectors'
case); the hit names every contributing record. Stock phrasing does not count: windows found
in at least ``fragments.stock_answers`` held-out answers (an opener or closer many answers
share, decided from the held-out side alone) are removed before pieces are measured. Exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from reappreg.guard.containment import letters_per_text
from reappreg.guard.detector import TEXT_VIEW, Batch, Detector, GroupContext, Hit
from reappreg.guard.grams import GramTable
from reappreg.guard.spans import letter_spans
from reappreg.guard.text import Group, SourceTexts, record_ids
from reappreg.settings.guard import FragmentsSettings

if TYPE_CHECKING:
    from reappreg.guard.detector import AnswerMeta, DetectorIndex


STOCK_RUN_SHARE = 0.8  # a shared run this much stock is an opener/closer (tests: both directions)


def fragment_hits(index: DetectorIndex, pieces: np.ndarray, groups: Sequence[tuple[int, Sequence[int]]],
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

    table = index.letters
    n, threshold = index.settings.chars.n, index.settings.fragments.coverage
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
        _, fresh_letters = letters_per_text(pieces[0, sel][first], pieces[2, sel][first], n)
        coverage = min(int(fresh_letters.sum()) / int(lengths[a]), 1.0)
        if coverage < threshold:
            continue
        # every record holding a piece is named (copies of one piece over many records too)
        texts = np.unique(pieces[0, sel])
        named = texts[~flagged[texts]]  # flagged records count, but are reported on their own
        if len(named):
            out.append((g, a, coverage, int(shared.data[j]), sorted(named.tolist())))
    return out


def stock_windows(table: GramTable, answers: Sequence[AnswerMeta], min_answers: int) -> np.ndarray:
    """Mask over ``table.keys``: the held-out answers' stock phrasing, decided from the answers
    alone: letter windows found in >= ``min_answers`` distinct answers and, where every answer
    names its vignette, in answers to >= 2 vignettes (an opener or closer is said about any
    scenario; a phrase only answers to one vignette share is its content, and a piece of it
    must count). A piece made only of such windows never counts towards a fragment."""
    ids = np.unique(np.array([a.answer_id for a in answers], dtype=object), return_inverse=True)[1].ravel()
    coo = table.matrix.tocoo()
    pairs = np.unique(np.stack([coo.row.astype(np.int64), ids[coo.col].astype(np.int64)]), axis=1)
    stock = np.bincount(pairs[0], minlength=len(table.keys)) >= min_answers
    if all(a.vignette_id is not None for a in answers):
        vignettes = np.unique(np.array([str(a.vignette_id) for a in answers], dtype=object), return_inverse=True)[1].ravel()
        per_vignette = np.unique(np.stack([coo.row.astype(np.int64), vignettes[coo.col].astype(np.int64)]), axis=1)
        stock &= np.bincount(per_vignette[0], minlength=len(table.keys)) >= 2
    return stock


def pieces(table: GramTable, grams: np.ndarray, offsets: np.ndarray, n: int, min_piece: int, looked_up=None) -> np.ndarray:
    """(local text index, held-out letter-gram position, place in the text) of every shared
    window that lies in a run of shared windows spanning at least ``min_piece`` letters; 3 x k."""
    pos, matched = looked_up if looked_up is not None else table.lookup(grams)
    idx = np.flatnonzero(matched)
    if not len(idx):
        return np.zeros((3, 0), dtype=np.int64)
    text_of = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))[idx]
    starts = np.ones(len(idx), dtype=bool)
    starts[1:] = (np.diff(idx) != 1) | (np.diff(text_of) != 0)
    run_id = np.cumsum(starts) - 1
    run_letters = np.bincount(run_id)[run_id] + n - 1
    keep = run_letters >= min_piece
    return np.stack([text_of[keep], pos[idx[keep]], idx[keep] - offsets[text_of[keep]]])


def fragment_groups(sources: Sequence[SourceTexts], settings) -> list[Group]:
    """The groups whose records may together hold one answer, over the units of ``sources``
    in order: a record's several text fields, each value of each ``fragments.group_fields``
    field, and (``fragments.whole_file``) each source file."""

    fragments = settings.fragments
    groups: list[Group] = []
    start = 0
    for src in sources:
        path = str(src.spec.path)
        by_record: dict[str, list[int]] = {}
        for i, unit in enumerate(src.units):
            by_record.setdefault(unit.record_id, []).append(start + i)
        groups += [Group(path, f"record={rid}", tuple(m)) for rid, m in by_record.items() if len(m) > 1]
        record_fields = dict(zip(record_ids(src), src.records))
        for field_name in fragments.group_fields:
            by_value: dict[str, list[str]] = {}
            for rid in by_record:
                value = record_fields[rid].get(field_name)
                if value not in (None, ""):
                    by_value.setdefault(str(value), []).append(rid)
            groups += [Group(path, f"{field_name}={value}", tuple(u for rid in rids for u in by_record[rid]))
                       for value, rids in sorted(by_value.items()) if len(rids) > 1]
        if fragments.whole_file and len(src.units) > 1:
            groups.append(Group(path, "file", tuple(range(start, start + len(src.units)))))
        start += len(src.units)
    return groups


def group_counts(groups: Sequence[Group]) -> dict[str, int]:
    """How many groups of each kind (``record``, each group field, ``file``)."""
    counts: dict[str, int] = {}
    for g in groups:
        kind = g.label.split("=", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


class FragmentsDetector(Detector):
    """Per batch it collects pieces (``collect``); its hits come from groups of records
    (``fragment_hits``, called by ``detect.check_units`` once every batch is scanned)."""

    name = "fragments"
    settings_model = FragmentsSettings
    label = "fragments spread over records"
    shown = ("min_piece", "coverage", "group_fields")
    groupwise = True

    def derive(self, index: DetectorIndex) -> None:
        # after ``chars`` (registry order): stock windows over its letter table
        index.stock = stock_windows(index.letters, index.answers, index.settings.fragments.stock_answers)

    def collect(self, index: DetectorIndex, batch: Batch) -> np.ndarray:
        grams, offsets = batch.letter_grams
        return pieces(index.letters, grams, offsets, index.settings.chars.n, index.settings.fragments.min_piece,
                      batch.letter_lookup)

    def group_hits(self, context: GroupContext, collected: np.ndarray) -> list[tuple[tuple, Hit]]:
        """One hit per member record of a group whose records together hold an answer."""
        index, units, groups, unit_of, view_of = context.index, context.units, context.groups, context.unit_of, context.view_of
        max_shared = context.max_shared
        variants_of: dict[int, list[int]] = {}
        for ti, ui in enumerate(unit_of):
            variants_of.setdefault(ui, []).append(ti)
        expanded = [(gi, [t for u in g.members for t in variants_of[u]]) for gi, g in enumerate(groups)]
        # a record's fields and views count as one record
        record_keys = [f"{u.source}\0{u.record_id}" for u in units]
        record_number = {key: i for i, key in enumerate(dict.fromkeys(record_keys))}
        record_of_unit = np.fromiter(map(record_number.__getitem__, record_keys), dtype=np.int64, count=len(units))
        record_of = record_of_unit[np.asarray(unit_of, dtype=np.int64)]
        flagged = np.isin(record_of, record_of[[ti for ti, *_ in context.hits]])
        found = fragment_hits(index, collected, expanded, len(context.texts), record_of, flagged)
        spans_of = self.spans(index, context.texts, [(t, f[1]) for f in found for t in f[4]], max_shared)
        threshold = self.threshold(index.settings)
        out: list[tuple[tuple, Hit]] = []
        position = 0
        for gi, ai, coverage, shared_count, contributors in found:
            group, meta = groups[gi], index.answers[ai]
            member_ids = list(dict.fromkeys(units[unit_of[t]].record_id for t in contributors))
            spans = [span for found_spans in spans_of[position : position + len(contributors)] for span in found_spans]
            position += len(contributors)
            views_used = sorted({view_of[t] for t in contributors})
            # One hit per member record, under its own id, with the group beside it: a
            # record is flagged (and quarantined) by name, never by a group label.
            for member in member_ids:
                hit = Hit(source=group.source, record_id=member, field="*", answer_id=meta.answer_id,
                          answer_source=meta.source, detector=self.name, score=coverage,
                          threshold=threshold, reason="coverage", shared_count=shared_count,
                          longest_run=0, answer_grams=self.answer_grams(index, ai),
                          view=TEXT_VIEW if views_used == [TEXT_VIEW] else "+".join(views_used),
                          members=member_ids, shared=list(dict.fromkeys(spans))[:max_shared], group=group.label)
                out.append(((group.source, member, "*", meta.answer_id, self.name), hit))
        return out

    def spans(self, index: DetectorIndex, texts: Sequence[str], requests, limit: int) -> list[list[str]]:
        return letter_spans(index, texts, requests, limit)

    def threshold(self, settings) -> float:
        return settings.fragments.coverage

    def answer_grams(self, index: DetectorIndex, answer: int) -> int:
        return len(index.letter_sets[answer])
