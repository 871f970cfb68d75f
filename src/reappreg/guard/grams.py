"""Held-out gram keys of one kind and which answers have them (``GramTable``): a sorted key
array and a (keys x answers) matrix for exact joins, with a bitmap prefilter, and each key's
stock weight (``stock``: 1 unless the gram is stock phrasing, set by the detector that owns
the table when the index is derived)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_PREFILTER_BITS = 22
_U64_MASK = np.uint64((1 << _PREFILTER_BITS) - 1)


class GramTable:
    """Held-out gram keys of one kind (word n-grams or letter windows) and which answers have them."""

    def __init__(self, sets: Sequence[frozenset[int]], lengths: Sequence[int]) -> None:
        from scipy.sparse import csr_matrix

        pairs_key = np.fromiter((k for s in sets for k in s), dtype=np.uint64)
        pairs_ans = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
        order = np.lexsort((pairs_ans, pairs_key))
        pairs_key, pairs_ans = pairs_key[order], pairs_ans[order]
        self.keys, first = np.unique(pairs_key, return_index=True)
        ptr = np.append(first, len(pairs_key)).astype(np.int64)
        self.counts = np.array([len(s) for s in sets], dtype=np.int64)
        self.lengths = np.array(lengths, dtype=np.int64)  # words / letters per answer (caps a run)
        # held-out grams x answers, 1 where the answer has the gram
        self.matrix = csr_matrix((np.ones(len(pairs_ans), dtype=np.int32), pairs_ans.astype(np.int64), ptr),
                                 shape=(len(self.keys), len(sets)))

        self._by_answer = self.matrix.tocsc()
        self.set_weights(np.ones(len(self.keys), dtype=np.float64))

        # A bitmap over the low bits of the keys rules most grams out before the exact
        # sorted-key search (a prefilter only: every candidate is then compared exactly).
        self._bits = np.zeros(1 << _PREFILTER_BITS, dtype=bool)
        self._bits[(self.keys & _U64_MASK).astype(np.intp)] = True

    def set_weights(self, weights: np.ndarray) -> None:
        """Each key's stock weight (``stock.gram_weights``), and per answer the weight of its
        grams (``answer_weight``) and their mean (``mean_weight``)."""
        from scipy.sparse import csr_matrix

        self.weights = np.asarray(weights, dtype=np.float64)
        self.answer_weight = np.asarray(self.matrix.T @ self.weights).ravel()
        self.mean_weight = self.answer_weight / np.maximum(self.counts, 1)
        # held-out grams x answers, the gram's weight where the answer has it: the same sparsity
        # structure as ``matrix`` entry for entry, so products with either align one to one
        rows = np.repeat(np.arange(len(self.keys)), np.diff(self.matrix.indptr))
        self.weighted = csr_matrix((self.weights[rows] * self.matrix.data, self.matrix.indices, self.matrix.indptr),
                                   shape=self.matrix.shape)

    def answer_keys(self, answer: int) -> np.ndarray:
        """The sorted gram keys of one answer."""
        return self.keys[self._by_answer.indices[self._by_answer.indptr[answer] : self._by_answer.indptr[answer + 1]]]

    def lookup(self, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``keys``, matched) for each gram."""
        pos = np.zeros(len(grams), dtype=np.int64)
        matched = np.zeros(len(grams), dtype=bool)
        if not len(self.keys) or not len(grams):
            return pos, matched
        maybe = np.flatnonzero(self._bits[(grams & _U64_MASK).astype(np.intp)])
        found = np.minimum(np.searchsorted(self.keys, grams[maybe]), len(self.keys) - 1)
        pos[maybe] = found
        matched[maybe] = self.keys[found] == grams[maybe]
        return pos, matched
