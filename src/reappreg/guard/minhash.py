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


def _band_keys(lsh: Any, signatures: np.ndarray) -> list[list[bytes]]:
    """Each signature's bucket key in every band, as datasketch's MinHashLSH computes it
    (``bytes(hashvalues[start:end].byteswap().data)``), for all signatures at once."""
    keys = []
    for start, end in lsh.hashranges:
        band = np.ascontiguousarray(signatures[:, start:end]).byteswap()
        keys.append(band.view(f"V{band.itemsize * (end - start)}").ravel().tolist())
    return keys


def lsh_candidates(lsh: Any, signatures: np.ndarray) -> list[set[int]]:
    """``set(lsh.query(m))`` for every signature row, with the band lookups batched.

    Same index, same buckets, same answer as datasketch's ``MinHashLSH.query``; it only
    computes the bucket keys of many signatures in one numpy pass instead of one query at a
    time. ``HeldoutIndex`` checks the equality against ``query`` when it is built.
    """
    keys = _band_keys(lsh, signatures)
    # DictSetStorage.get is ``self._dict.get(key, set())``: look the plain dict up directly
    # (HeldoutIndex checks the result against ``MinHashLSH.query`` whenever it is built).
    gets = [table._dict.get if isinstance(getattr(table, "_dict", None), dict) else table.get for table in lsh.hashtables]
    out: list[set[int]] = []
    for row in range(len(signatures)):
        found: set[int] = set()
        for get, band in zip(gets, keys):
            bucket = get(band[row])
            if bucket:
                found |= bucket
        out.append(found)
    return out
