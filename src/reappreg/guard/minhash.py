"""The ``minhash`` detector: Jaccard similarity of word-shingle sets, for light paraphrase
(word edits, reordering).

Candidates come from a datasketch ``MinHashLSH`` index of the answers (looked up in batch:
``BandLookup``, with signatures identical to datasketch's: ``minhash_signatures``); every
candidate is scored exactly, so a score is the true Jaccard. Only LSH can miss a pair, with
probability (1 - J^r)^b (``lsh_error_rates``, recorded in the certificate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.detector import Batch, Detector, RawHit
from reappreg.guard.grams import GramTable
from reappreg.guard.hashing import _SHINGLE, _U64
from reappreg.guard.spans import word_spans
from reappreg.settings.guard import MinHashSettings

if TYPE_CHECKING:
    from reappreg.guard.detector import DetectorIndex

MINHASH_SCHEME = "affine32"  # datasketch >= 2.0 permutation scheme used for every signature


_U32 = np.uint32


def _fmix32(h: np.ndarray) -> np.ndarray:
    # MurmurHash3 finaliser, datasketch's affine32 pre-mix (tests assert bit equality).
    h = h ^ (h >> _U32(16))
    h = h * _U32(0x85EBCA6B)
    h = h ^ (h >> _U32(13))
    h = h * _U32(0xC2B2AE35)
    return h ^ (h >> _U32(16))


def minhash_permutations(num_perm: int, seed: int) -> np.ndarray:
    """datasketch's own affine32 permutation parameters (a, b) for (num_perm, seed)."""
    from datasketch import MinHash

    return MinHash(num_perm=num_perm, seed=seed, scheme=MINHASH_SCHEME).permutations


def minhash_signatures(keys: np.ndarray, offsets: np.ndarray, permutations: np.ndarray,
                       max_block: int = 1 << 14) -> np.ndarray:
    """MinHash signatures of many key sets at once, identical to datasketch's.

    Equals ``MinHash(num_perm, seed, scheme="affine32", hashfunc=lambda x: x)`` updated with
    the low 32 bits of each 64-bit key, per text; computed per block of keys as one
    (num_perm x keys) matrix and a segment-wise min along the contiguous axis. Empty texts
    get datasketch's all-max "empty" value.
    """
    a, b = permutations[0].astype(np.uint32), permutations[1].astype(np.uint32)
    n_texts = len(offsets) - 1
    sig = np.full((n_texts, len(a)), np.iinfo(np.uint32).max, dtype=np.uint32)
    hv, offsets = _distinct_per_text(_fmix32((keys & _U64(0xFFFFFFFF)).astype(np.uint32)), np.asarray(offsets))
    counts = np.diff(offsets)
    start_text = 0
    while start_text < n_texts:
        # As many whole texts as fit in one block of keys (at least one text).
        end_text = int(np.searchsorted(offsets, offsets[start_text] + max_block, side="right")) - 1
        end_text = min(max(end_text, start_text + 1), n_texts)
        lo, hi = offsets[start_text], offsets[end_text]
        nonempty = np.flatnonzero(counts[start_text:end_text] > 0)
        if len(nonempty):
            phv = a[:, None] * hv[None, lo:hi] + b[:, None]
            starts = (offsets[start_text:end_text][nonempty] - lo).astype(np.intp)
            sig[start_text + nonempty] = np.minimum.reduceat(phv, starts, axis=1).T
        start_text = end_text
    return sig


def _distinct_per_text(hv: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each text's distinct values of ``hv`` (sorted) and their offsets: a signature is a min
    over the set, so a value repeated in a text (a repeated shingle) is hashed once."""
    hv, offsets = hv[offsets[0] : offsets[-1]], offsets - offsets[0]
    if len(hv) < 2:
        return hv, offsets
    text_of = np.repeat(np.arange(len(offsets) - 1, dtype=np.uint64), np.diff(offsets))
    both = np.unique((text_of << _U64(32)) | hv.astype(np.uint64))
    distinct_text = (both >> _U64(32)).astype(np.int64)
    new_offsets = np.searchsorted(distinct_text, np.arange(len(offsets)), side="left").astype(offsets.dtype)
    return (both & _U64(0xFFFFFFFF)).astype(np.uint32), new_offsets


_POLY = np.uint64(0x9E3779B97F4A7C15)


def _band_codes(signatures: np.ndarray, start: int, end: int) -> np.ndarray:
    """One uint64 per signature for its band ``[start, end)``: the band's bytes themselves
    when they fit in 8 bytes (rows x 32 bits <= 64: exact), else a 64-bit mix of them (two
    different bands share a code with probability 2^-64, which can only add a candidate,
    and every candidate is scored exactly)."""
    block = np.ascontiguousarray(signatures[:, start:end])
    width = block.dtype.itemsize * (end - start)
    if width <= 8:
        padded = np.zeros((len(block), 8), dtype=np.uint8)
        padded[:, :width] = block.view(np.uint8).reshape(len(block), width)
        return padded.view(np.uint64).ravel()
    from reappreg.guard.hashing import _mix64

    acc = np.zeros(len(block), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in block.T.astype(np.uint64):
            acc = _mix64(acc * _POLY + column)
    return acc


class BandLookup:
    """``MinHashLSH.query`` for many signatures at once.

    The index is datasketch's: the same bands (``lsh.hashranges``) over the same signatures
    that were inserted into ``lsh``, so a query signature finds an answer exactly when one of
    its bands equals that answer's band, as ``MinHashLSH.query`` does. Instead of one Python
    dict lookup per band and text, each band is a sorted array searched for all texts at once.
    ``HeldoutIndex`` checks the result against ``MinHashLSH.query`` whenever it is built.
    """

    def __init__(self, lsh: Any, signatures: np.ndarray) -> None:
        self.hashranges = list(lsh.hashranges)
        self.bands: list[tuple[np.ndarray, np.ndarray]] = []
        for start, end in self.hashranges:
            codes = _band_codes(signatures, start, end)
            order = np.argsort(codes, kind="stable")
            self.bands.append((codes[order], order.astype(np.int64)))

    def pairs(self, signatures: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(query row, answer) of every candidate pair, each pair once, sorted by row then answer."""
        rows: list[np.ndarray] = []
        answers: list[np.ndarray] = []
        for (start, end), (codes, ids) in zip(self.hashranges, self.bands):
            query = _band_codes(signatures, start, end)
            lo = np.searchsorted(codes, query, side="left")
            count = np.searchsorted(codes, query, side="right") - lo
            hit = np.flatnonzero(count)
            if not len(hit):
                continue
            sizes = count[hit]
            first = np.repeat(np.cumsum(sizes) - sizes, sizes)
            rows.append(np.repeat(hit, sizes))
            answers.append(ids[np.repeat(lo[hit], sizes) + np.arange(int(sizes.sum())) - first])
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        n_answers = max(int(max(a.max() for a in answers)) + 1, 1)
        pair = np.unique(np.concatenate(rows) * n_answers + np.concatenate(answers))
        return pair // n_answers, pair % n_answers


def lsh_candidates(lookup: BandLookup, signatures: np.ndarray) -> list[set[int]]:
    """``set(lsh.query(m))`` for every signature row (``BandLookup.pairs`` as sets)."""
    out: list[set[int]] = [set() for _ in range(len(signatures))]
    for row, answer in zip(*(a.tolist() for a in lookup.pairs(signatures))):
        out[row].add(answer)
    return out


def lsh_error_rates(threshold: float, bands: int, rows: int) -> dict[str, float]:
    """How often LSH misses a pair, for the banding in use.

    ``fn_probability_at_threshold`` is the chance that a pair with Jaccard exactly at the
    threshold is never a candidate, (1 - t^r)^b: the worst case among pairs that should be
    reported (the chance falls fast as J grows). ``fn_integral`` / ``fp_integral`` are
    datasketch's own optimisation objectives (areas under the miss / false-candidate curves
    over J in [t, 1] / [0, t]); ``fn_mean_above_threshold`` is the miss chance averaged over
    J uniform in [t, 1]. False candidates cost only time: they are scored exactly and dropped.
    """
    from datasketch.lsh import _false_negative_probability, _false_positive_probability

    fn_at = (1.0 - threshold**rows) ** bands
    fn_area = _false_negative_probability(threshold, bands, rows)
    return {
        "fn_probability_at_threshold": float(fn_at),
        "fn_integral": float(fn_area),
        "fn_mean_above_threshold": float(fn_area / (1.0 - threshold)) if threshold < 1 else 0.0,
        "fp_integral": float(_false_positive_probability(threshold, bands, rows)),
        "candidate_probability_at_threshold": float(1.0 - fn_at),
    }


def minhash_hits(index: DetectorIndex, n_texts: int, sh: np.ndarray, sh_off: np.ndarray) -> list[RawHit]:
    """LSH candidates (datasketch's index, looked up in batch), each scored by the exact
    Jaccard of the shingle sets, shingles of stock phrasing at their stock weight (``stock``):
    J = w(S(A) & S(T)) / (w(S(A)) + |S(T) - S(A)|), w the summed weight (a text's own
    shingles, which no answer has, weigh 1). A candidate's set sizes must be within the
    threshold's ratio of each other, as the unweighted Jaccard requires."""
    t = index.settings.minhash.threshold
    answer_sizes, answer_sets = index.shingle_sizes, index.shingle_sets
    answer_weight, stock = index.shingles.answer_weight, index.shingle_stock
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
            text_set = set(np.unique(sh[bounds[row] : bounds[row + 1]]).tolist())
        size, other = len(text_set), answer_sets[a]
        other_size = len(other)
        if size < lo_size or size > hi_size or other_size < size * t or size < other_size * t:
            continue
        shared = text_set.intersection(other)
        inter = len(shared)
        inter_weight = inter - sum(1.0 - stock[k] for k in shared if k in stock) if stock else float(inter)
        jaccard = min(inter_weight / (float(answer_weight[a]) + size - inter), 1.0)  # 1.0 exactly for a copy
        if jaccard >= t:
            hits.append((row, a, "minhash", jaccard, "jaccard", inter, 0))
    return hits


class MinHashDetector(Detector):
    name = "minhash"
    settings_model = MinHashSettings
    label = "MinHash-LSH (datasketch)"
    shown = ("threshold", "num_perm", "bands", "rows", "shingle_words")
    derived = ("scheme", "lsh")

    def record(self, settings) -> dict[str, Any]:
        s = settings.minhash
        return {**s.model_dump(mode="json"), "scheme": MINHASH_SCHEME,
                "lsh": lsh_error_rates(s.threshold, s.bands, s.rows)}  # type: ignore[arg-type]

    def check_derived(self, entry: dict[str, Any], source: str) -> None:
        if entry["scheme"] != MINHASH_SCHEME:
            raise InputError(f"{source}: guard minhash scheme '{entry['scheme']}' is not this version's '{MINHASH_SCHEME}'")

    def word_grams(self, settings) -> list[tuple[int, int]]:
        return [(settings.minhash.shingle_words, _SHINGLE)]

    stock_part = "shingle_sets"

    def gram_keys(self, texts) -> tuple:
        return texts.word_grams(texts.settings.minhash.shingle_words, _SHINGLE)

    def build(self, answers) -> dict[str, Any]:
        s = answers.settings.minhash
        keys, offsets = self.gram_keys(answers)
        return {"shingle_sets": answers.sets(keys, offsets),
                "signatures": minhash_signatures(keys, offsets, minhash_permutations(s.num_perm, s.seed))}

    def derive(self, index: DetectorIndex) -> None:
        """Shingle table, and datasketch's LSH index over the signatures with the batched
        lookup (checked against ``MinHashLSH.query``)."""
        from datasketch import LeanMinHash, MinHashLSH

        s = index.settings.minhash
        index.shingles = GramTable(index.shingle_sets, [len(x) for x in index.shingle_sets])
        self.weigh(index, index.shingles)
        # the shingles weighing less than 1 (stock phrasing), for the exact weighted Jaccard
        light = np.flatnonzero(index.shingles.weights < 1)
        index.shingle_stock = dict(zip(index.shingles.keys[light].tolist(), index.shingles.weights[light].tolist()))
        index.shingle_sizes = np.array([len(x) for x in index.shingle_sets], dtype=np.int64)
        index._permutations = minhash_permutations(s.num_perm, s.seed)
        lsh = MinHashLSH(num_perm=s.num_perm, params=(s.bands, s.rows))
        with lsh.insertion_session() as session:
            for i, sig in enumerate(index.signatures):
                session.insert(i, LeanMinHash(seed=s.seed, hashvalues=sig, scheme=MINHASH_SCHEME))
        index._lsh = lsh
        index._bands = BandLookup(lsh, index.signatures)
        # The batched lookups must give exactly what datasketch's own query gives.
        probe = index.signatures[: min(len(index.signatures), 64)]
        expected = [set(lsh.query(LeanMinHash(seed=s.seed, hashvalues=sig, scheme=MINHASH_SCHEME))) for sig in probe]
        if lsh_candidates(index._bands, probe) != expected:
            raise RuntimeError("guard: batched LSH lookups disagree with MinHashLSH.query (datasketch changed)")

    def from_sketch(self, fields: dict[str, list]) -> dict[str, Any]:
        return {"shingle_sets": fields["shingle_sets"], "signatures": np.vstack(fields["signatures"])}

    def scan(self, index: DetectorIndex, batch: Batch, max_shared: int) -> tuple[list[RawHit], list[list[str]]]:
        n = index.settings.minhash.shingle_words
        grams = batch.word_grams(n, _SHINGLE)
        hits = minhash_hits(index, len(batch), *grams)
        spans = word_spans(index, batch.texts, [(t, a) for t, a, *_ in hits], n, _SHINGLE, index.shingles, max_shared,
                           grams) if max_shared else []
        return hits, spans

    def spans(self, index: DetectorIndex, texts: Sequence[str], requests, limit: int) -> list[list[str]]:
        return word_spans(index, texts, requests, index.settings.minhash.shingle_words, _SHINGLE, index.shingles, limit)

    def threshold(self, settings) -> float:
        return settings.minhash.threshold

    def answer_grams(self, index: DetectorIndex, answer: int) -> int:
        return len(index.shingle_sets[answer])

    def sketch_entry(self, index: DetectorIndex, answer: int) -> dict[str, Any]:
        return {"shingles": sorted(f"{k:016x}" for k in index.shingle_sets[answer]),
                "minhash": [int(v) for v in index.signatures[answer]]}

    def read_sketch_entry(self, entry: dict[str, Any], settings) -> dict[str, Any]:
        return {"shingle_sets": frozenset(int(h, 16) for h in entry["shingles"]),
                "signatures": np.array(entry["minhash"], dtype=np.uint32)}

    def complete(self, fields: dict[str, Any], settings) -> bool:
        return bool(fields["shingle_sets"]) and len(fields["signatures"]) == settings.minhash.num_perm

    def verify_sketch(self, fields: dict[str, list], answers: Sequence[Any], settings, source: str) -> None:
        """The signatures must be those of the shingle sets (integrity of the file)."""
        shingle_sets, signatures = fields["shingle_sets"], np.vstack(fields["signatures"])
        keys = np.fromiter((k for s in shingle_sets for k in sorted(s)), dtype=np.uint64)
        offsets = np.zeros(len(shingle_sets) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in shingle_sets], out=offsets[1:])
        expected = minhash_signatures(keys, offsets, minhash_permutations(settings.minhash.num_perm, settings.minhash.seed))
        bad = np.flatnonzero((expected != signatures).any(axis=1))
        if len(bad):
            raise InputError(f"{source}: MinHash signature of answer '{answers[bad[0]].answer_id}' does not match its shingles")
