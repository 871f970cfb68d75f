"""The scan: every registered detector over batches of texts, against the held-out index.

All detectors work on integer keys of grams (``hashing``), so the same code checks against
the held-out texts (inside the pipeline) and against a published sketch that holds only
keyed hashes (outside teams). Every text is seen in two views (``normalise``): words and
letters. The detectors (``registry.REGISTERED``; one module each, ``detector.Detector``):

* ``ngram`` (``ngram``): exact word n-gram containment, or a long shared passage of words;
* ``minhash`` (``minhash``): Jaccard of word-shingle sets on LSH candidates, scored exactly;
* ``chars`` (``chars``): exact containment of letter windows of the letter view;
* ``fragments`` (``fragments``): an answer spread over several records of one group;
* ``edits`` (``edits``): a copy with an edit in many of its words (content words in order).

Locality: ``ngram``, ``chars`` and ``edits`` count containment inside a stretch of the text
``span`` times the answer's length (words, letters or content words), the best such stretch,
so phrases an answer shares with a long unrelated document never add up across its length.

Views: every text is also checked as each decoding view (``decode``) and as
``decode(encode(text))`` of each consuming model's tokenizer (``views``), against the
answers seen through the same tokenizer, whenever that round trip changes its words.
Whatever a tokenizer normalises away cannot hide a leak.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.attribution import attribute
from reappreg.guard.decode import decode_views
from reappreg.guard.decode import warm as warm_decoders
from reappreg.guard.detector import TEXT_VIEW, Batch, GroupContext, Hit, RawHit
from reappreg.guard.fragments import Group
from reappreg.guard.index import AnswerMeta, HeldoutIndex, TextView
from reappreg.guard.normalise import ascii_words, scan_views, shared_normalisation
from reappreg.guard.registry import BY_NAME, DETECTORS, REGISTERED
from reappreg.guard.text import TextUnit

__all__ = ["DETECTORS", "TEXT_VIEW", "AnswerMeta", "Group", "HeldoutIndex", "Hit", "check_units", "scan_texts"]



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
    # per groupwise detector, its per-batch state (``Detector.collect``: 3 x k, row 0 the text
    # index; ``fragments``: (text index, held-out letter-gram position, place in the text))
    collected: dict[str, np.ndarray]
    spans: list[list[str]] = field(default_factory=list)  # shared passages per hit (with max_shared > 0)
    # per hit: the answers its matched text is closest to and the separation (``attribution``),
    # computed where the text is (in the worker), with ``attributed``
    attributed: list[tuple[list[str], float | None]] = field(default_factory=list)
    # The texts scanned after the inputs: view round trips that change an input's words, each
    # with its input's index and its view. Hits and ``collected`` index the inputs, then these.
    extra: list[str] = field(default_factory=list)
    extra_of: list[int] = field(default_factory=list)
    extra_view: list[str] = field(default_factory=list)


@_without_cyclic_gc()
def _scan(index: HeldoutIndex, texts: Sequence[str], max_shared: int = 0,
          views: Sequence[tuple[str | list[str], str]] | None = None) -> ScanResult:
    """Every registered detector over one batch of texts: per-text hits (with ``max_shared``
    their shared passages too, in the worker, in parallel) and the groupwise detectors'
    per-batch state (the fragment pieces). ``views``: the texts' ``scan_views``, if known."""
    return _scan_batch(index, _batch(index, texts, views), max_shared)


def _batch(index: HeldoutIndex, texts: Sequence[str], views: Sequence[tuple[str | list[str], str]] | None) -> Batch:
    return Batch(index, texts, [spec for d in REGISTERED for spec in d.word_grams(index.settings)], views)


def _scan_batch(index: HeldoutIndex, batch: Batch, max_shared: int) -> ScanResult:
    """``_scan`` of a ``Batch``."""
    settings = index.settings
    hits: list[RawHit] = []
    spans: list[list[str]] = []
    collected: dict[str, np.ndarray] = {}
    for detector in REGISTERED:
        if detector.groupwise:
            collected[detector.name] = detector.collect(index, batch)
            continue
        if not detector.enabled(settings):
            continue
        found, found_spans = detector.scan(index, batch, max_shared)
        hits += found
        if max_shared:
            spans += found_spans
    return ScanResult(hits, collected, spans)


def shared_spans(index: HeldoutIndex, text: str, answer: int, detector: str, limit: int) -> list[str]:
    """The passages of ``text`` (normalised words) made of grams the answer also has, in
    text order; overlapping grams are merged, so a copied sentence shows as one span."""
    return shared_spans_many(index, [text], [(0, answer, detector)], limit)[0]


def shared_spans_many(index: HeldoutIndex, texts: Sequence[str], requests: Sequence[tuple[int, int, str]],
                      limit: int) -> list[list[str]]:
    """``shared_spans`` for many (text index, answer index, detector) requests, each
    detector's requests in one call of its ``spans``."""
    out: list[list[str]] = [[] for _ in requests]
    for detector in REGISTERED:
        wanted = [k for k, r in enumerate(requests) if r[2] == detector.name]
        if wanted:
            found = detector.spans(index, texts, [(requests[k][0], requests[k][1]) for k in wanted], limit)
            for k, spans in zip(wanted, found):
                out[k] = spans
    return out


def _scan_chunk(index: HeldoutIndex, texts: list[str], views: Sequence[TextView], max_shared: int) -> ScanResult:
    """``_scan`` of ``texts`` and of their view round trips (``_expand_views``), each text
    normalised once (``shared_normalisation``) and its gram keys computed once (``Batch``:
    the detectors, their shared passages and the attribution read the same)."""
    with shared_normalisation():
        scanned, source, view_of, normalised = _expand_views(texts, views)
        batch = _batch(index, scanned, normalised)
        result = _scan_batch(index, batch, max_shared)
        pairs = list(dict.fromkeys((h[0], h[1]) for h in result.hits))  # one attribution per (text, answer)
        found = dict(zip(pairs, attribute(index, scanned, [((t,), a) for t, a in pairs], batch=batch)))
    result.attributed = [found[(h[0], h[1])] for h in result.hits]
    n = len(texts)
    result.extra, result.extra_of, result.extra_view = scanned[n:], source[n:], view_of[n:]
    return result


_WORKER_INDEX: HeldoutIndex | None = None
_WORKER_VIEWS: Sequence[TextView] = ()


def _init_worker(blob: bytes) -> None:
    global _WORKER_INDEX, _WORKER_VIEWS
    _WORKER_INDEX, _WORKER_VIEWS = pickle.loads(blob)


def _worker_scan(start: int, texts: list[str], max_shared: int) -> tuple[int, ScanResult]:
    assert _WORKER_INDEX is not None, "worker started without an index"
    return start, _scan_chunk(_WORKER_INDEX, texts, _WORKER_VIEWS, max_shared)


def _pool_context() -> tuple[Any, tuple]:
    """(multiprocessing context, initargs) for the scan's worker pool.

    Where the platform can fork, workers are forked with the index already in memory (a
    module global set just before the pool starts): no pickling, no re-import, no index
    rebuild, which on a 2-core machine cost as much as the scan itself. The workers run
    numpy/scipy/ICU code and the tokenizers of the views, and leave through ``os._exit``, so
    the parent's other threads (MLflow) are never touched in them. Elsewhere (macOS, Windows)
    a spawned worker unpickles the index and the views once. Either way the results are the same.
    """
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork"), ()
    return multiprocessing.get_context("spawn"), (pickle.dumps((_WORKER_INDEX, _WORKER_VIEWS)),)


def scan_batches(index: HeldoutIndex, texts: Sequence[str], *, views: Sequence[TextView] = (), workers: int = 1,
                 chunk_size: int = 2000, progress: Callable[[int], None] | None = None, max_shared: int = 0) -> ScanResult:
    """Per-text hits (global text index, ...) and fragment pieces for ``texts`` and their
    ``views`` round trips, deterministic; with ``max_shared`` also each hit's shared passages
    (``ScanResult.spans``). Text indexes count ``texts`` first, then ``ScanResult.extra``.

    With ``workers > 1`` and more than one chunk, chunks go to a process pool
    (``_pool_context``), each expanded into its views there: a view's round trip (a
    tokenizer's above all) costs as much as the scan. Results do not depend on ``workers``.
    """
    global _WORKER_INDEX, _WORKER_VIEWS
    if workers < 1 or chunk_size < 1:
        raise InputError(f"guard: workers ({workers}) and chunk_size ({chunk_size}) must be >= 1")
    chunks = [(s, list(texts[s : s + chunk_size])) for s in range(0, len(texts), chunk_size)]
    results: dict[int, ScanResult] = {}
    if workers == 1 or len(chunks) <= 1:
        for start, chunk in chunks:
            results[start] = _scan_chunk(index, chunk, views, max_shared)
            if progress:
                progress(len(chunk))
    else:
        warm_decoders()  # built once here, shared by the forked workers
        _WORKER_INDEX, _WORKER_VIEWS = index, views
        if views:
            # The tokenizers ran threaded for the index; a forked worker then switches their
            # threads off (the workers are the parallelism) and says so on stderr unless told.
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            ctx, initargs = _pool_context()
            with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=ctx,
                                     initializer=_init_worker if initargs else None, initargs=initargs) as pool:
                futures = {pool.submit(_worker_scan, start, chunk, max_shared): len(chunk) for start, chunk in chunks}
                for future in as_completed(futures):
                    start, result = future.result()
                    results[start] = result
                    if progress:
                        progress(futures[future])
        finally:
            _WORKER_INDEX, _WORKER_VIEWS = None, ()
    return _merge(results, len(texts), max_shared)


def _merge(results: dict[int, ScanResult], n: int, max_shared: int) -> ScanResult:
    """One ``ScanResult`` of ``n`` inputs from the chunks' (keyed by their first input), in
    chunk order: an input keeps its global index, the extra texts follow every input."""
    merged = ScanResult([], {})
    found: list[tuple[RawHit, list[str], tuple]] = []
    collected: dict[str, list[np.ndarray]] = {d.name: [np.zeros((3, 0), dtype=np.int64)] for d in REGISTERED if d.groupwise}
    starts = sorted(results)
    for start, end in zip(starts, [*starts[1:], n]):
        result = results[start]
        # a chunk's local index -> global: its inputs keep their place, its extra texts follow every input
        shift = (start, end - start, n + len(merged.extra))
        spans = result.spans or [[] for _ in result.hits]
        places = _global_index(np.array([h[0] for h in result.hits], dtype=np.int64), *shift).tolist()
        attributed = result.attributed or [([], None)] * len(result.hits)
        found += [((place, *rest), shared, closest)
                  for place, (_, *rest), shared, closest in zip(places, result.hits, spans, attributed)]
        for name, state in result.collected.items():
            collected[name].append(np.vstack([_global_index(state[0], *shift), state[1:]]))
        merged.extra += result.extra
        merged.extra_of += [start + i for i in result.extra_of]
        merged.extra_view += result.extra_view
    found.sort(key=lambda f: (f[0][0], f[0][1], f[0][2]))
    for name, parts in collected.items():
        state = np.concatenate(parts, axis=1)
        merged.collected[name] = state[:, np.lexsort((state[2], state[0]))]
    merged.hits = [hit for hit, _, _ in found]
    merged.spans = [shared for _, shared, _ in found] if max_shared else []
    merged.attributed = [closest for _, _, closest in found]
    return merged


def _global_index(local: np.ndarray, start: int, inputs: int, offset: int) -> np.ndarray:
    return np.where(local < inputs, local + start, local - inputs + offset)


def scan_texts(index: HeldoutIndex, texts: Sequence[str], *, workers: int = 1, chunk_size: int = 2000,
               progress: Callable[[int], None] | None = None) -> list[RawHit]:
    """The per-text hits of ``texts`` (no groups, no views): (text index, answer index, ...)."""
    return scan_batches(index, texts, workers=workers, chunk_size=chunk_size, progress=progress).hits


def _expand_views(texts: list[str], views: Sequence[TextView]) -> tuple[list[str], list[int], list[str], list]:
    """Texts to scan: every text, plus its round trip through each view (the decoding views,
    then ``views``) where that changes its words; a decoding identical to one already
    queued for the same text is scanned once. Also each scanned text's ``scan_views``
    (computed here to compare words, so the scan does not normalise them again)."""
    out, unit_of, view_of = list(texts), list(range(len(texts))), [TEXT_VIEW] * len(texts)
    normalised = [scan_views(t) for t in texts]
    raw_words: dict[int, list[str]] = {}
    queued: dict[int, set[str]] = {}
    round_trips = [*decode_views(texts), *((view.name, view.roundtrip(texts)) for view in views)]
    for view_name, decoded_texts in round_trips:
        for i, decoded in enumerate(decoded_texts):
            if decoded == texts[i] or decoded in queued.get(i, ()):
                continue
            if i not in raw_words:
                raw_words[i] = _words_of(normalised[i])
            seen = scan_views(decoded)
            if _words_of(seen) != raw_words[i]:
                queued.setdefault(i, set()).add(decoded)
                out.append(decoded)
                unit_of.append(i)
                view_of.append(view_name)
                normalised.append(seen)
    return out, unit_of, view_of, normalised


def _words_of(views: tuple[str | list[str], str]) -> list[str]:
    """The word tokens of ``scan_views`` (``normalise.tokens`` of the text)."""
    return ascii_words(views[0]) if isinstance(views[0], str) else views[0]


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
    result = scan_batches(index, [u.text for u in units], views=views, workers=workers, chunk_size=chunk_size,
                          progress=progress, max_shared=max_shared)
    texts = [u.text for u in units] + result.extra
    unit_of = list(range(len(units))) + result.extra_of
    view_of = [TEXT_VIEW] * len(units) + result.extra_view
    settings = index.settings
    thresholds = {d.name: d.threshold(settings) for d in REGISTERED}
    best: dict[tuple, Hit] = {}

    def offer(key: tuple, hit: Hit) -> None:
        current = best.get(key)
        if current is None or (hit.score, hit.view == TEXT_VIEW) > (current.score, current.view == TEXT_VIEW):
            best[key] = hit

    # every per-text hit names the answers its matched text is closest to (``attribution``,
    # computed in the scan; groupwise detectors attribute their own hits)
    attributed = result.attributed or [([], None)] * len(result.hits)
    for (ti, ai, detector, score, reason, shared_count, longest_run), shared, (closest, separation) in zip(
            result.hits, result.spans or [[]] * len(result.hits), attributed):
        unit, meta = units[unit_of[ti]], index.answers[ai]
        hit = Hit(source=unit.source, record_id=unit.record_id, field=unit.field, answer_id=meta.answer_id,
                  answer_source=meta.source, detector=detector, score=score, threshold=thresholds[detector],
                  reason=reason, shared_count=shared_count, longest_run=longest_run,
                  answer_grams=BY_NAME[detector].answer_grams(index, ai), view=view_of[ti], shared=shared,
                  closest=closest, separation=separation)
        offer((unit.source, unit.record_id, unit.field, meta.answer_id, detector), hit)

    if groups:
        context = GroupContext(index, units, groups, texts, unit_of, view_of, result.hits, max_shared)
        for detector in REGISTERED:
            if detector.groupwise:
                for key, hit in detector.group_hits(context, result.collected[detector.name]):
                    offer(key, hit)
    return sorted(best.values(), key=lambda h: (h.source, h.record_id, h.field, h.answer_id, DETECTORS.index(h.detector)))
