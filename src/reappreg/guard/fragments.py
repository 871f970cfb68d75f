"""The ``fragments`` detector: one answer spread over several records of one group (one
author, one conversation, one source file: ``fragment_groups``), found from the pieces the
scan collects.

Each record contributes its *pieces*: runs of shared letter windows at least
``fragments.min_piece`` letters long (a short stock phrase is not a piece). A hit when the
pieces of two or more records of a group together cover at least ``fragments.coverage`` of
an answer's letters while no single record does (that one is the per-record detectors'
case); the hit names every contributing record. Stock phrasing counts at its stock weight
(``stock``: measured from the held-out answers and the honest reference corpus, never from
training records): a run of shared windows is a piece only when its letters times their
mean weight reach ``min_piece``, and coverage counts covered letters at their windows' mean
weight over the answer's letters at its windows' mean weight. Exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from reappreg.guard.attribution import attribute
from reappreg.guard.containment import letters_per_text
from reappreg.guard.detector import TEXT_VIEW, Batch, Detector, GroupContext, Hit
from reappreg.guard.grams import GramTable
from reappreg.guard.spans import letter_spans
from reappreg.guard.text import Group, SourceTexts, record_ids
from reappreg.settings.guard import FragmentsSettings

if TYPE_CHECKING:
    from reappreg.guard.detector import DetectorIndex


def fragment_hits(index: DetectorIndex, pieces: np.ndarray, groups: Sequence[tuple[int, Sequence[int]]],
                  n_texts: int, record_of: np.ndarray | None = None, flagged: np.ndarray | None = None,
                  windows: Sequence[int | None] | None = None) -> list[tuple[int, int, float, int, list[int]]]:
    """(group index, answer index, coverage, shared windows, contributing texts) for every group
    whose members' pieces cover >= ``fragments.coverage`` of an answer's letters while no
    single member does, with >= 2 contributors.

    ``windows`` (per group, records; None: the whole group): only pieces within that many
    consecutive records of the group (its texts' order, a record's texts and views counted as
    one record) are put together; the hit's coverage is the best such run of records', and it
    names the records of every run that reaches the threshold.

    Stock phrasing is weighed from the held-out answers and the reference corpus alone
    (``index.letters.weights``, ``stock``), never from how often training records use a
    window: the training records are the attacker's to write, so counting them would let
    filler records repeating pieces of an answer turn those pieces into "stock". A run of
    shared windows whose letters times their mean weight fall short of ``min_piece`` is an
    opener or closer (with a few letters of what follows it), not a piece; coverage is the
    letters the pieces cover times their windows' mean weight over the answer's letters times
    its windows' mean weight (an answer made mostly of stock phrasing is covered by its own
    words).

    A record whose pieces are all stock phrasing (windows weighing less than 1) counts towards
    the coverage but is not named. Records the per-record detectors flagged (``flagged``, per
    text: its record has a hit)
    count towards the group's coverage but are not named again (they are blocked already,
    and held-out answers of one vignette share phrases, so a copy of one answer holds pieces
    of its neighbours): the hit names the other contributing texts, and is dropped when
    there are none. ``record_of`` maps a text to its record (default: each text its own).

    Each distinct window counts once in a group (at its first place), so the same stock
    piece repeated over many records covers no more than it does once.
    """
    from scipy.sparse import csr_matrix

    table = index.letters
    n, threshold, min_piece = index.settings.chars.n, index.settings.fragments.coverage, index.settings.fragments.min_piece
    lengths, weights = table.lengths, table.weights
    denominators = np.maximum(lengths * table.mean_weight, 1e-12)
    if pieces.shape[1]:
        new_run = np.ones(pieces.shape[1], dtype=bool)
        new_run[1:] = (np.diff(pieces[0]) != 0) | (np.diff(pieces[2]) != 1)
        run_id = np.cumsum(new_run) - 1
        run_windows = np.bincount(run_id)
        content = (run_windows + n - 1) * np.bincount(run_id, weights=weights[pieces[1]]) / run_windows
        pieces = pieces[:, content[run_id] >= min_piece]
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
    # a window covers at most n letters at weight at most 1: only pairs that could reach the
    # threshold are scored
    candidates = np.flatnonzero(shared.data * n >= threshold * denominators[shared.col])
    if not len(candidates):
        return []
    members_of: dict[int, np.ndarray] = {}
    rank_of: dict[int, dict[int, int]] = {}
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
        window = windows[g] if windows is not None else None
        if window is None:
            runs = [sel]
        else:
            if g not in rank_of:  # each text's record's place in the group (a record's texts: one place)
                places = dict.fromkeys(records[members_of[g]].tolist())
                place = {r: k for k, r in enumerate(places)}
                rank_of[g] = {int(t): place[int(records[t])] for t in members_of[g]}
            ranks = np.fromiter((rank_of[g][int(t)] for t in pieces[0, sel]), dtype=np.int64, count=len(sel))
            runs = [sel[(ranks >= r) & (ranks < r + window)] for r in np.unique(ranks).tolist()]
        best, named = 0.0, set()
        for run in runs:
            if len(set(records[np.unique(pieces[0, run])].tolist())) < 2:
                continue
            coverage = _coverage(pieces, run, n, weights, float(denominators[a]))
            if coverage >= threshold:
                best = max(best, coverage)
                # every record holding a piece of the answer's own wording is named (copies of one
                # piece over many records too); a record whose pieces are all stock phrasing
                # (every window weighs less than 1) counts but is not named: honest writing says
                # those phrases too, and its neighbours are not its doing
                own = weights[pieces[1, run]] >= 1.0
                named.update(np.unique(pieces[0, run][own]).tolist())
        if not named:
            continue
        texts = np.array(sorted(named), dtype=np.int64)
        named_texts = texts[~flagged[texts]]  # flagged records count, but are reported on their own
        if len(named_texts):
            out.append((g, a, best, int(shared.data[j]), sorted(named_texts.tolist())))
    return out


def _coverage(pieces: np.ndarray, run: np.ndarray, n: int, weights: np.ndarray, denominator: float) -> float:
    """The share of an answer the pieces ``run`` (columns of ``pieces``) cover: letters covered
    by distinct windows (each at its first place: pieces are sorted by text and place) times
    their mean stock weight, over the answer's ``denominator`` (its letters times its windows'
    mean weight)."""
    first = np.zeros(len(run), dtype=bool)
    first[np.unique(pieces[1, run], return_index=True)[1]] = True
    _, fresh_letters = letters_per_text(pieces[0, run][first], pieces[2, run][first], n)
    mean_weight = float(weights[pieces[1, run][first]].mean())
    return min(int(fresh_letters.sum()) * mean_weight / denominator, 1.0)


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
    field (the grouping the input declares: an author, a conversation, a source; the whole
    group), and each source file's adjacent records (``fragments.adjacent``: pieces within
    that many consecutive records are put together; 0 turns it off)."""

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
        if fragments.adjacent >= 2 and len(by_record) > 1:
            groups.append(Group(path, "adjacent", tuple(range(start, start + len(src.units))), window=fragments.adjacent))
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
    label = "an answer's pieces over records"
    shown = ("min_piece", "coverage", "adjacent", "group_fields")
    groupwise = True

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
        found = fragment_hits(index, collected, expanded, len(context.texts), record_of, flagged,
                              [g.window for g in groups])
        spans_of = self.spans(index, context.texts, [(t, f[1]) for f in found for t in f[4]], max_shared)
        # the matched text of a group's hit is its pieces in every contributing record
        attributed = attribute(index, context.texts, [(f[4], f[1]) for f in found])
        threshold = self.threshold(index.settings)
        out: list[tuple[tuple, Hit]] = []
        position = 0
        for (gi, ai, coverage, shared_count, contributors), (closest, separation) in zip(found, attributed):
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
                          members=member_ids, shared=list(dict.fromkeys(spans))[:max_shared], group=group.label,
                          closest=closest, separation=separation)
                out.append(((group.source, member, "*", meta.answer_id, self.name), hit))
        return out

    def spans(self, index: DetectorIndex, texts: Sequence[str], requests, limit: int) -> list[list[str]]:
        return letter_spans(index, texts, requests, limit)

    def threshold(self, settings) -> float:
        return settings.fragments.coverage

    def answer_grams(self, index: DetectorIndex, answer: int) -> int:
        return len(index.letter_sets[answer])
