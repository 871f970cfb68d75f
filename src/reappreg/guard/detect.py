"""The detectors, the held-out index they query, and the (multi-process) scan.

All detectors work on integer keys of grams (``hashing``), so the same code checks against
the held-out texts (inside the pipeline) and against a published sketch that holds only
keyed hashes (outside teams). Every text is seen in two views (``normalise``): words and
letters.

* ``ngram``: exact word n-gram containment, |G(A) ∩ G(T)| / |G(A)| for a held-out answer A
  and a training text T (a short answer embedded in a long text scores 1.0), or a shared
  passage of at least ``ngram.min_run`` consecutive words. Exact: a sorted-key join.
* ``minhash``: Jaccard similarity of word-shingle sets for light paraphrase (word edits,
  reordering). Candidates from a datasketch ``MinHashLSH`` index of the answers; every
  candidate is scored exactly, so a score is the true Jaccard. Only LSH can miss a pair,
  with probability (1 - J^r)^b (``config.lsh_error_rates``).
* ``chars``: the same exact containment / shared-run test on windows of ``chars.n`` letters
  of the letter view (skeleton, no spaces, no punctuation, no digits). Spaces removed, words
  split by hyphens or odd separators, look-alike letters: none changes the letter view, so
  none hides a copy. Pieces of an answer spread inside one longer text add up here (the
  containment counts every shared window wherever it is).
* ``fragments``: an answer spread over several records of one group (one author, one
  conversation, one source file: ``check_units(groups=...)``). Each record contributes its
  *pieces*: runs of shared letter windows at least ``fragments.min_piece`` letters long
  (a short stock phrase is not a piece). A hit when the pieces of two or more records of a
  group together cover at least ``fragments.coverage`` of an answer's letters while no single
  record does (that one is the per-record detectors' case); the hit names every
  contributing record. Stock phrasing does not count: windows found in at least
  ``fragments.stock_answers`` held-out answers (an opener or closer many answers share,
  decided from the held-out side alone) are removed before pieces are measured. Exact.

* ``edits``: a copy with an edit in many of its words (typos, inserted words, function words
  swapped, tenses shifted): the answer's content words (stems, one-edit typo neighbourhoods)
  matched in order (LCS) inside a stretch of ``edits.span`` x the answer's content words;
  a hit when the match covers ``edits.threshold`` of them (``edits`` module). Exact.

Locality: ``ngram`` and ``chars`` containment is counted inside a stretch of the text
``span`` times the answer's length (words or letters), the best such stretch, so phrases an
answer shares with a long unrelated document never add up across its whole length.

Tokenizer views (``views``): every text is also checked as ``decode(encode(text))`` of each
consuming model's tokenizer, against the answers seen through the same tokenizer, whenever
that round trip changes its words. Whatever a tokenizer normalises away cannot hide a leak.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.decode import DECODE_VIEWS
from reappreg.guard.edits import edit_hits
from reappreg.guard.fragments import Group, _letters_per_text, fragment_hits
from reappreg.guard.hashing import _NGRAM, _SHINGLE, FastHasher
from reappreg.guard.index import TEXT_VIEW, AnswerMeta, GramTable, HeldoutIndex, TextView
from reappreg.guard.minhash import minhash_signatures
from reappreg.guard.normalise import ascii_words, scan_views, tokens
from reappreg.guard.spans import shared_spans_many
from reappreg.guard.text import TextUnit

__all__ = ["DETECTORS", "TEXT_VIEW", "AnswerMeta", "Group", "HeldoutIndex", "Hit", "check_units", "scan_texts"]

DETECTORS = ("ngram", "minhash", "chars", "fragments", "edits")


# ----------------------------------------------------------------------------- hits


@dataclass
class Hit:
    """One (training text or group, held-out answer, detector) at or above its threshold."""

    source: str
    record_id: str         # the record flagged (for fragments: one member of the group)
    field: str
    answer_id: str
    answer_source: str | None
    detector: str          # one of DETECTORS
    score: float           # exact containment / Jaccard / group coverage / in-order matched fraction
    threshold: float
    reason: str            # "containment" | "min_run" | "jaccard" | "coverage" | "lcs"
    shared_count: int      # distinct shared grams (edits: answer content words matched in order)
    longest_run: int       # longest shared run (words for ngram, letters for chars; 0 otherwise)
    answer_grams: int      # the answer's gram count for this detector (edits: its content words)
    view: str = TEXT_VIEW  # "text" or the tokenizer view in which it was found
    members: list[str] = field(default_factory=list)  # fragments: the records that together hold it
    shared: list[str] = field(default_factory=list)   # shared passages, normalised words, in text order
    group: str | None = None  # fragments: the group ("author_id=a7", "file") whose records hold it

    def to_record(self, with_shared: bool = True) -> dict[str, Any]:
        record = asdict(self)
        record["score"] = round(self.score, 6)
        if not with_shared:
            record.pop("shared")
        return record

    @property
    def record_ids(self) -> list[str]:
        """The training records this hit flags (one: a fragments hit is reported per member)."""
        return [self.record_id]


# (local text index, answer index, detector, score, reason, shared count, longest run)
RawHit = tuple[int, int, str, float, str, int, int]


def _longest_runs(member: np.ndarray) -> np.ndarray:
    """Longest run of True down each column of a (positions x answers) boolean matrix."""
    if not len(member):
        return np.zeros(member.shape[1], dtype=np.int64)
    idx = np.arange(len(member))[:, None]
    last_false = np.maximum.accumulate(np.where(member, -1, idx), axis=0)
    return (idx - last_false).max(axis=0)


def _local_containment(member: np.ndarray, keys: np.ndarray, lengths: np.ndarray, counts: np.ndarray, *,
                       n: int, span: float, letter_coverage: bool) -> np.ndarray:
    """Per column of ``member`` (text positions x answers): the containment inside the best
    stretch of the text ``span`` times the answer's length.

    Stretches start at every multiple of the answer's length L and are ``span * L`` long, so
    any part of the text up to ``(span - 1) * L`` long lies whole inside one of them (a
    copy with inserted words or filler around it included). Inside a stretch each distinct
    gram counts once (at its first place there): distinct shared grams over the answer's
    grams, or with ``letter_coverage`` the answer's letters covered by distinct shared windows.
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
        if letter_coverage:
            order = np.lexsort((p, k))
            _, letters = _letters_per_text(k[order], p[order], n)
            out[c] = min(letters.max() / max(int(lengths[c]), 1), 1.0)
        else:
            out[c] = np.bincount(k).max() / max(int(counts[c]), 1)
    return out


def _containment_hits(table: GramTable, n_texts: int, grams: np.ndarray, offsets: np.ndarray, *, n: int,
                      containment: float, min_run: int | None, detector: str, span: float,
                      letter_coverage: bool = False, looked_up=None) -> list[RawHit]:
    """Exact containment and longest shared run for every (text, answer) sharing a gram.

    Containment is the fraction of the answer's grams found in the text, or with
    ``letter_coverage`` the fraction of the answer's letters that lie inside shared windows,
    so pieces of an answer spread through a text add up to what they cover; both counted
    inside the best stretch of ``span`` times the answer's length (``_local_containment``),
    so phrases shared with a long document far apart never add up.
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
    shared = shared_csr.tocoo()  # entries in CSR order (row by row)
    if letter_coverage:
        # a window covers at most n letters: pairs that cannot reach the threshold are skipped
        need_score = shared.data * n >= containment * table.lengths[shared.col]
        score = np.zeros(len(shared.data))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            score = shared.data / table.counts[shared.col]
        need_score = np.zeros(len(shared.data), dtype=bool)
    # Longest shared run for every pair that is a hit by containment or could be one by run:
    # a run of R units is R - n + 1 consecutive matched positions, so only pairs with at
    # least that many matched positions (counted with multiplicity) can have one.
    run_needed = (score >= containment) | need_score
    if min_run:
        need = max(min_run - n + 1, 1)
        with_mult = positions @ table.matrix
        # `positions` and `distinct` share one sparsity structure, so the two products do too
        # and their entries align one to one; checked, because the alignment is what makes
        # this right.
        if not (np.array_equal(with_mult.indptr, shared_csr.indptr) and np.array_equal(with_mult.indices, shared_csr.indices)):
            raise RuntimeError("guard: gram count matrices lost alignment (scipy sparse behaviour changed)")
        run_needed |= with_mult.data >= need
    longest = np.zeros(len(shared.data), dtype=np.int64)
    candidate = np.flatnonzero(run_needed)  # row-major order: grouped by text
    groups = np.split(candidate, np.flatnonzero(np.diff(shared.row[candidate])) + 1) if len(candidate) else []
    for js in groups:
        r = shared.row[js[0]]
        lo, hi = offsets[r], offsets[r + 1]
        cols = shared.col[js]
        member = np.zeros((hi - lo, len(js)), dtype=bool)
        present = np.flatnonzero(matched[lo:hi])
        member[present] = table.matrix[pos[lo:hi][present]][:, cols].toarray() > 0
        runs = _longest_runs(member)
        units = np.where(runs > 0, runs + n - 1, 0)
        longest[js] = np.minimum(units, table.lengths[cols])
        score[js] = _local_containment(member, grams[lo:hi], table.lengths[cols], table.counts[cols], n=n,
                                       span=span, letter_coverage=letter_coverage)
    by_containment = score >= containment
    by_run = longest >= min_run if min_run else np.zeros(len(longest), dtype=bool)
    return [
        (int(shared.row[j]), int(shared.col[j]), detector, float(score[j]),
         "containment" if by_containment[j] else "min_run", int(shared.data[j]), int(longest[j]))
        for j in np.flatnonzero(by_containment | by_run)
    ]


def _minhash_hits(index: HeldoutIndex, n_texts: int, sh: np.ndarray, sh_off: np.ndarray) -> list[RawHit]:
    """LSH candidates (datasketch's index, looked up in batch), each scored by exact Jaccard
    of the shingle sets."""
    t = index.config.jaccard
    answer_sizes, answer_sets = index.shingle_sizes, index.shingle_sets
    lo_size, hi_size = answer_sizes.min() * t, answer_sizes.max() / t
    counts = np.diff(sh_off)
    # J >= t needs t <= |S(A)| / |S(T)| <= 1/t, and |S(T)| <= count: texts that cannot reach
    # any answer's size range skip the query (the exact size is checked again below).
    queried_mask = (counts > 0) & (counts >= lo_size)
    queried = np.flatnonzero(queried_mask)
    if not len(queried):
        return []
    keep = np.repeat(queried_mask, counts)  # the shingles of the queried texts
    sub_off = np.zeros(len(queried) + 1, dtype=np.int64)
    np.cumsum(counts[queried], out=sub_off[1:])
    signatures = minhash_signatures(sh[keep], sub_off, index._permutations)
    rows, answers = index._bands.pairs(signatures)
    if not len(rows):
        return []
    bounds = sh_off.tolist()
    hits: list[RawHit] = []
    text_set: set[int] = set()
    current = -1
    for row, a in zip(queried[rows].tolist(), answers.tolist()):
        if row != current:
            current = row
            text_set = set(sh[bounds[row] : bounds[row + 1]].tolist())
        size, other = len(text_set), answer_sets[a]
        other_size = len(other)
        if size < lo_size or size > hi_size or other_size < size * t or size < other_size * t:
            continue
        inter = len(text_set.intersection(other))
        jaccard = inter / (size + other_size - inter)
        if jaccard >= t:
            hits.append((row, a, "minhash", jaccard, "jaccard", inter, 0))
    return hits


def _pieces(table: GramTable, grams: np.ndarray, offsets: np.ndarray, n: int, min_piece: int, looked_up=None) -> np.ndarray:
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


@contextlib.contextmanager
def _without_cyclic_gc():
    """Run without the cyclic garbage collector, then restore it as it was.

    The scan allocates millions of short-lived lists and tuples and creates no reference
    cycles, so the collector never frees anything here; its full passes over everything alive
    (every training unit) cost about 40% of the reporting step in the benchmark. Reference
    counting still frees all of it as before.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class ScanResult:
    hits: list[RawHit]
    pieces: np.ndarray  # 3 x k (text index, held-out letter-gram position, place in the text)
    spans: list[list[str]] = field(default_factory=list)  # shared passages per hit (with max_shared > 0)


@_without_cyclic_gc()
def _scan(index: HeldoutIndex, texts: Sequence[str], max_shared: int = 0) -> ScanResult:
    """Every per-text detector over one batch of texts, and the batch's fragment pieces;
    with ``max_shared`` the shared passages of each hit too (in the worker, in parallel)."""
    config = index.config
    both = [scan_views(t) for t in texts]
    specs = [(config.ngram_n, _NGRAM), (config.shingle_words, _SHINGLE)]
    if isinstance(index.hasher, FastHasher):
        (ng, ng_off), (sh, sh_off) = index.hasher.grams_of_views([b[0] for b in both], specs)
    else:  # a keyed sketch hasher takes token lists
        (ng, ng_off), (sh, sh_off) = index.hasher.grams_many(
            [ascii_words(b[0]) if isinstance(b[0], str) else b[0] for b in both], specs)
    lg, lg_off = index.hasher.letter_grams([b[1] for b in both], config.chars_n)
    n = len(texts)
    hits = _containment_hits(index.ngrams, n, ng, ng_off, n=config.ngram_n, containment=config.ngram_containment,
                             min_run=config.ngram_min_run, detector="ngram", span=config.ngram_span)
    hits += _minhash_hits(index, n, sh, sh_off)
    looked_up = index.letters.lookup(lg)
    hits += _containment_hits(index.letters, n, lg, lg_off, n=config.chars_n, containment=config.chars_containment,
                              min_run=config.chars_min_run, detector="chars", span=config.chars_span,
                              letter_coverage=True, looked_up=looked_up)
    spans = shared_spans_many(index, texts, [(i, a, detector) for i, a, detector, *_ in hits], max_shared) if max_shared else []
    if config.edits_enabled:
        word_lists = [ascii_words(b[0]) if isinstance(b[0], str) else b[0] for b in both]
        found, found_spans = edit_hits(index, word_lists, max_shared)
        hits += found
        if max_shared:
            spans += found_spans
    return ScanResult(hits, _pieces(index.letters, lg, lg_off, config.chars_n, config.fragments_min_piece, looked_up), spans)


_WORKER_INDEX: HeldoutIndex | None = None


def _init_worker(blob: bytes) -> None:
    global _WORKER_INDEX
    _WORKER_INDEX = pickle.loads(blob)


def _worker_scan(start: int, texts: list[str], max_shared: int) -> tuple[int, ScanResult]:
    assert _WORKER_INDEX is not None, "worker started without an index"
    return start, _scan(_WORKER_INDEX, texts, max_shared)


def _pool_context() -> tuple[Any, tuple]:
    """(multiprocessing context, initargs) for the scan's worker pool.

    Where the platform can fork, workers are forked with the index already in memory (a
    module global set just before the pool starts): no pickling, no re-import, no index
    rebuild, which on a 2-core machine cost as much as the scan itself. The workers only run
    numpy/scipy/ICU code and leave through ``os._exit``, so the parent's other threads
    (tokenizers, MLflow) are never touched in them. Elsewhere (macOS, Windows) a spawned
    worker unpickles the index once. Either way the results are the same.
    """
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork"), ()
    return multiprocessing.get_context("spawn"), (pickle.dumps(_WORKER_INDEX),)


def scan_batches(index: HeldoutIndex, texts: Sequence[str], *, workers: int = 1, chunk_size: int = 2000,
                 progress: Callable[[int], None] | None = None, max_shared: int = 0) -> ScanResult:
    """Per-text hits (global text index, ...) and fragment pieces for ``texts``, deterministic;
    with ``max_shared`` also each hit's shared passages (``ScanResult.spans``).

    With ``workers > 1`` and more than one chunk, chunks go to a process pool
    (``_pool_context``); results do not depend on ``workers``.
    """
    global _WORKER_INDEX
    if workers < 1 or chunk_size < 1:
        raise InputError(f"guard: workers ({workers}) and chunk_size ({chunk_size}) must be >= 1")
    chunks = [(s, list(texts[s : s + chunk_size])) for s in range(0, len(texts), chunk_size)]
    found: list[tuple[RawHit, list[str]]] = []
    pieces: list[np.ndarray] = [np.zeros((3, 0), dtype=np.int64)]

    def collect(start: int, result: ScanResult) -> None:
        spans = result.spans or [[] for _ in result.hits]
        found.extend(((start + i, *rest), shared) for (i, *rest), shared in zip(result.hits, spans))
        pieces.append(result.pieces + np.array([[start], [0], [0]], dtype=np.int64))

    if workers == 1 or len(chunks) <= 1:
        for start, chunk in chunks:
            collect(start, _scan(index, chunk, max_shared))
            if progress:
                progress(len(chunk))
    else:
        _WORKER_INDEX = index
        try:
            ctx, initargs = _pool_context()
            with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=ctx,
                                     initializer=_init_worker if initargs else None, initargs=initargs) as pool:
                futures = {pool.submit(_worker_scan, start, chunk, max_shared): len(chunk) for start, chunk in chunks}
                for future in as_completed(futures):
                    collect(*future.result())
                    if progress:
                        progress(futures[future])
        finally:
            _WORKER_INDEX = None
    found.sort(key=lambda f: (f[0][0], f[0][1], f[0][2]))
    all_pieces = np.concatenate(pieces, axis=1)
    order = np.lexsort((all_pieces[2], all_pieces[0]))
    return ScanResult([hit for hit, _ in found], all_pieces[:, order], [shared for _, shared in found] if max_shared else [])


def scan_texts(index: HeldoutIndex, texts: Sequence[str], *, workers: int = 1, chunk_size: int = 2000,
               progress: Callable[[int], None] | None = None) -> list[RawHit]:
    """The per-text hits of ``texts`` (no groups, no views): (text index, answer index, ...)."""
    return scan_batches(index, texts, workers=workers, chunk_size=chunk_size, progress=progress).hits


def _expand_views(texts: list[str], views: Sequence[TextView]) -> tuple[list[str], list[int], list[str]]:
    """Texts to scan: every text, plus its round trip through each view (the decoding views,
    then ``views``) where that changes its words; a decoding identical to one already
    queued for the same text is scanned once."""
    out, unit_of, view_of = list(texts), list(range(len(texts))), [TEXT_VIEW] * len(texts)
    raw_tokens: dict[int, list[str]] = {}
    queued: dict[int, set[str]] = {}
    for view in (*DECODE_VIEWS, *views):
        for i, decoded in enumerate(view.roundtrip(texts)):
            if decoded == texts[i] or decoded in queued.get(i, ()):
                continue
            if i not in raw_tokens:
                raw_tokens[i] = tokens(texts[i])
            if tokens(decoded) != raw_tokens[i]:
                queued.setdefault(i, set()).add(decoded)
                out.append(decoded)
                unit_of.append(i)
                view_of.append(view.name)
    return out, unit_of, view_of


@_without_cyclic_gc()
def check_units(
    index: HeldoutIndex,
    units: Sequence[TextUnit],
    *,
    groups: Sequence[Group] = (),
    views: Sequence[TextView] = (),
    workers: int = 1,
    chunk_size: int = 2000,
    max_shared: int = 10,  # shared passages spelled out per hit
    progress: Callable[[int], None] | None = None,
) -> list[Hit]:
    """Every hit of ``units`` (and of ``groups`` of them) against ``index``, in every view.

    One hit per (record or group, answer, detector): the best score over the views and over
    the answer's variants.
    """
    texts, unit_of, view_of = _expand_views([u.text for u in units], views)
    result = scan_batches(index, texts, workers=workers, chunk_size=chunk_size, progress=progress, max_shared=max_shared)
    config = index.config
    thresholds = {"ngram": config.ngram_containment, "minhash": config.jaccard, "chars": config.chars_containment,
                  "fragments": config.fragments_coverage, "edits": config.edits_threshold}
    sizes = {"ngram": index.ngram_sets, "minhash": index.shingle_sets, "chars": index.letter_sets, "fragments": index.letter_sets,
             "edits": [range(n) for n, _ in index.edit_keys]}
    best: dict[tuple, Hit] = {}

    def offer(key: tuple, hit: Hit) -> None:
        current = best.get(key)
        if current is None or (hit.score, hit.view == TEXT_VIEW) > (current.score, current.view == TEXT_VIEW):
            best[key] = hit

    for (ti, ai, detector, score, reason, shared_count, longest_run), shared in zip(result.hits, result.spans or [[]] * len(result.hits)):
        unit, meta = units[unit_of[ti]], index.answers[ai]
        hit = Hit(source=unit.source, record_id=unit.record_id, field=unit.field, answer_id=meta.answer_id,
                  answer_source=meta.source, detector=detector, score=score, threshold=thresholds[detector],
                  reason=reason, shared_count=shared_count, longest_run=longest_run,
                  answer_grams=len(sizes[detector][ai]), view=view_of[ti], shared=shared)
        offer((unit.source, unit.record_id, unit.field, meta.answer_id, detector), hit)

    if groups:
        variants_of: dict[int, list[int]] = {}
        for ti, ui in enumerate(unit_of):
            variants_of.setdefault(ui, []).append(ti)
        expanded = [(gi, [t for u in g.members for t in variants_of[u]]) for gi, g in enumerate(groups)]
        # a record's fields and views count as one record
        record_keys = [f"{u.source}\0{u.record_id}" for u in units]
        record_number = {key: i for i, key in enumerate(dict.fromkeys(record_keys))}
        record_of_unit = np.fromiter(map(record_number.__getitem__, record_keys), dtype=np.int64, count=len(units))
        record_of = record_of_unit[np.asarray(unit_of, dtype=np.int64)]
        flagged = np.isin(record_of, record_of[[ti for ti, *_ in result.hits]])
        found = fragment_hits(index, result.pieces, expanded, len(texts), record_of, flagged)
        spans_of = shared_spans_many(index, texts, [(t, f[1], "fragments") for f in found for t in f[4]], max_shared)
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
                          answer_source=meta.source, detector="fragments", score=coverage,
                          threshold=config.fragments_coverage, reason="coverage", shared_count=shared_count,
                          longest_run=0, answer_grams=len(index.letter_sets[ai]),
                          view=TEXT_VIEW if views_used == [TEXT_VIEW] else "+".join(views_used),
                          members=member_ids, shared=list(dict.fromkeys(spans))[:max_shared], group=group.label)
                offer((group.source, member, "*", meta.answer_id, "fragments"), hit)
    return sorted(best.values(), key=lambda h: (h.source, h.record_id, h.field, h.answer_id, DETECTORS.index(h.detector)))
