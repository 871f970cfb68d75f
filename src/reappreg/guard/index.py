"""The held-out index: what the scan needs to know about the held-out answers, and no text.

``HeldoutIndex`` holds, per answer (and per tokenizer-view variant of it), the integer keys
of its word n-grams, word shingles and letter windows (``hashing``), its MinHash signature
and datasketch's LSH index over the signatures, and the keys of its content words with
their (masked) positions for the ``edits`` detector (``edits.EditsTable``); ``GramTable``
turns one kind of keys into a sorted array and a (keys x answers) matrix for exact joins.
Built from held-out texts (``HeldoutIndex.build``) or from a keyed sketch
(``sketch.index_from_sketch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.detector import TEXT_VIEW
from reappreg.guard.edits import EditsTable, answer_keys
from reappreg.guard.hashing import _NGRAM, _SHINGLE
from reappreg.guard.minhash import MINHASH_SCHEME, BandLookup, lsh_candidates, minhash_permutations, minhash_signatures
from reappreg.guard.normalise import text_views
from reappreg.settings.guard import GuardSettings

_PREFILTER_BITS = 22
_U64_MASK = np.uint64((1 << _PREFILTER_BITS) - 1)


class TextView(Protocol):
    """A way a consuming model sees text (``views.TokenizerView``)."""

    name: str

    def roundtrip(self, texts: Sequence[str]) -> list[str]: ...


# ----------------------------------------------------------------------------- index


@dataclass(frozen=True)
class AnswerMeta:
    answer_id: str
    source: str | None = None
    vignette_id: str | None = None
    view: str = TEXT_VIEW  # "text", or the tokenizer view this variant of the answer is


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

        # A bitmap over the low bits of the keys rules most grams out before the exact
        # sorted-key search (a prefilter only: every candidate is then compared exactly).
        self._bits = np.zeros(1 << _PREFILTER_BITS, dtype=bool)
        self._bits[(self.keys & _U64_MASK).astype(np.intp)] = True

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


@dataclass(eq=False)
class HeldoutIndex:
    """What the scan needs about the held-out answers: gram key sets and signatures, no text.

    Built from held-out texts (``build``) or from a sketch (``sketch.index_from_sketch``).
    ``answers`` may hold several variants of one answer (its tokenizer views).
    """

    settings: GuardSettings  # the detector settings (``guard.*`` params, or a certificate / sketch)
    hasher: Any
    answers: list[AnswerMeta]
    ngram_sets: list[frozenset[int]]
    shingle_sets: list[frozenset[int]]
    signatures: np.ndarray
    token_counts: list[int]
    letter_sets: list[frozenset[int]]
    letter_counts: list[int]
    view_names: tuple[str, ...] = ()  # tokenizer views the answers were expanded with
    # ``edits``: per answer (content words, k x 2 array of (key, masked position)), ``edits.answer_keys``
    edit_keys: list[tuple[int, np.ndarray]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.answers:
            raise InputError("held-out set is empty: there is nothing to guard against")
        if len(self.edit_keys) != len(self.answers):
            raise InputError(f"held-out index: {len(self.edit_keys)} edits entries for {len(self.answers)} answers")
        self._derive()

    def _derive(self) -> None:
        from datasketch import LeanMinHash, MinHashLSH

        self.ngrams = GramTable(self.ngram_sets, self.token_counts)
        self.letters = GramTable(self.letter_sets, self.letter_counts)
        self.shingles = GramTable(self.shingle_sets, [len(s) for s in self.shingle_sets])
        self.stock = stock_windows(self.letters, self.answers, self.settings.fragments.stock_answers)
        self.shingle_sizes = np.array([len(s) for s in self.shingle_sets], dtype=np.int64)
        self.edits = EditsTable(self.edit_keys, self.hasher)
        self._permutations = minhash_permutations(self.settings.minhash.num_perm, self.settings.minhash.seed)
        self._lsh = MinHashLSH(num_perm=self.settings.minhash.num_perm, params=(self.settings.minhash.bands, self.settings.minhash.rows))
        with self._lsh.insertion_session() as session:
            for i, sig in enumerate(self.signatures):
                session.insert(i, LeanMinHash(seed=self.settings.minhash.seed, hashvalues=sig, scheme=MINHASH_SCHEME))
        self._bands = BandLookup(self._lsh, self.signatures)
        # The batched lookups must give exactly what datasketch's own query gives.
        probe = self.signatures[: min(len(self.signatures), 64)]
        expected = [set(self._lsh.query(LeanMinHash(seed=self.settings.minhash.seed, hashvalues=s, scheme=MINHASH_SCHEME)))
                    for s in probe]
        if lsh_candidates(self._bands, probe) != expected:
            raise RuntimeError("guard: batched LSH lookups disagree with MinHashLSH.query (datasketch changed)")

    def __getstate__(self) -> dict:
        return {k: self.__dict__[k] for k in ("settings", "hasher", "answers", "ngram_sets", "shingle_sets", "signatures",
                                              "token_counts", "letter_sets", "letter_counts", "view_names", "edit_keys")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._derive()

    @property
    def answer_ids(self) -> list[str]:
        """Distinct answer ids (variants of one answer counted once), in order."""
        return list(dict.fromkeys(a.answer_id for a in self.answers))

    @classmethod
    def build(cls, answers: Sequence[AnswerMeta], texts: Sequence[str], settings: GuardSettings, hasher: Any,
              views: Sequence[TextView] = ()) -> "HeldoutIndex":
        if not answers:
            raise InputError("held-out set is empty: there is nothing to guard against")
        both = [text_views(t) for t in texts]
        token_lists, views_text = [b[0] for b in both], [b[1] for b in both]
        for meta, toks in zip(answers, token_lists):
            if not toks:
                raise InputError(f"held-out answer '{meta.answer_id}' has no words after normalisation")
        metas = list(answers)
        # Tokenizer views only: the decoding views (``decode``) undo what was done to a copy,
        # and are compared with the answers as written.
        for view in views:
            for meta, toks, decoded in zip(answers, token_lists[: len(answers)], view.roundtrip(list(texts))):
                view_tokens, view_letters = text_views(decoded)
                if view_tokens and view_tokens != toks:
                    metas.append(AnswerMeta(meta.answer_id, meta.source, meta.vignette_id, view.name))
                    token_lists.append(view_tokens)
                    views_text.append(view_letters)
        (ng, ng_off), (sh, sh_off) = hasher.grams_many(
            token_lists, [(settings.ngram.n, _NGRAM), (settings.minhash.shingle_words, _SHINGLE)]
        )
        lg, lg_off = hasher.letter_grams(views_text, settings.chars.n)

        def sets(keys, off):
            return [frozenset(keys[off[i] : off[i + 1]].tolist()) for i in range(len(metas))]

        signatures = minhash_signatures(sh, sh_off, minhash_permutations(settings.minhash.num_perm, settings.minhash.seed))
        return cls(settings, hasher, metas, sets(ng, ng_off), sets(sh, sh_off), signatures,
                   [len(t) for t in token_lists], sets(lg, lg_off), [len(v) for v in views_text],
                   tuple(v.name for v in views), answer_keys(hasher, token_lists))


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
