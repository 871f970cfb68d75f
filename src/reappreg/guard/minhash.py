"""MinHash signatures identical to datasketch's, and batched LSH lookups equal to its query."""

from __future__ import annotations

from typing import Any

import numpy as np

from reappreg.guard.config import MINHASH_SCHEME
from reappreg.guard.hashing import _U64


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
    hv = _fmix32((keys & _U64(0xFFFFFFFF)).astype(np.uint32))
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
