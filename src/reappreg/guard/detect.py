"""The two detectors, the held-out index they query, and the (multi-process) scan.

Both detectors work on integer keys of word grams (see ``FastHasher`` / ``KeyedHasher``),
so the same code checks against the held-out texts (inside the pipeline) and against a
published sketch that holds only keyed hashes (outside teams).

* ``ngram``: for each held-out answer A with n-gram set G(A) and a training text T,
  containment = |G(A) ∩ G(T)| / |G(A)|: the fraction of the answer found in the text, so a
  short answer embedded in a long text scores 1.0. A hit when containment >= ``containment``
  or, for a long answer partly copied, when text and answer share a passage of at least
  ``min_run`` consecutive words (a run of consecutive shared n-grams; a count of scattered
  shared n-grams would also fire on common stock phrases). Exact: a sorted-key join over
  all n-grams, no sampling.
* ``minhash``: Jaccard similarity of word-shingle sets, J = |S(A) ∩ S(T)| / |S(A) ∪ S(T)|,
  to catch light paraphrase (word edits, reordering). Candidates come from a datasketch
  ``MinHashLSH`` index of the answers (b bands of r rows); every candidate is then scored
  exactly on its shingle sets, so a reported score is the true Jaccard, never an estimate.
  A pair can only be missed by LSH, with probability (1 - J^r)^b (see ``lsh_error_rates``).
  A length filter skips the LSH query when no answer's set size is within [t|T|, |T|/t];
  it is exact (J >= t implies t <= |S(A)|/|S(T)| <= 1/t) and saves the query on long texts.
"""

from __future__ import annotations

import hashlib
import hmac
import multiprocessing
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.text import NORMALISATION, TextUnit, tokens

MINHASH_SCHEME = "affine32"  # datasketch >= 2.0 permutation scheme used for every signature
# Candidates come from datasketch's MinHashLSH index (its buckets, its band keys); the scan
# batches the per-band bucket lookups for many texts (``lsh_candidates``), checked against
# ``MinHashLSH.query`` every time an index is built.

# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class GuardConfig:
    """Detector parameters (the ``guard.ngram`` and ``guard.minhash`` params)."""

    ngram_n: int
    ngram_containment: float
    ngram_min_run: int | None
    shingle_words: int
    jaccard: float
    num_perm: int
    seed: int
    bands: int | None
    rows: int | None
    weights: tuple[float, float]

    @classmethod
    def from_dict(cls, detectors: dict[str, Any]) -> "GuardConfig":
        """From the nested form used in params.yaml and the certificate."""
        try:
            ng, mh = detectors["ngram"], detectors["minhash"]
            config = cls(
                ngram_n=int(ng["n"]),
                ngram_containment=float(ng["containment"]),
                ngram_min_run=None if ng.get("min_run") is None else int(ng["min_run"]),
                shingle_words=int(mh["shingle_words"]),
                jaccard=float(mh["threshold"]),
                num_perm=int(mh["num_perm"]),
                seed=int(mh["seed"]),
                bands=None if mh.get("bands") is None else int(mh["bands"]),
                rows=None if mh.get("rows") is None else int(mh["rows"]),
                weights=tuple(float(w) for w in mh.get("weights", (0.5, 0.5))),  # type: ignore[arg-type]
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"guard detector settings incomplete or malformed: {exc!r}") from exc
        return config.resolved()

    def resolved(self) -> "GuardConfig":
        """Validate, and fill bands/rows from datasketch's optimiser when they are null."""
        problems = []
        if self.ngram_n < 1:
            problems.append(f"ngram.n must be >= 1 (got {self.ngram_n})")
        if not 0 < self.ngram_containment <= 1:
            problems.append(f"ngram.containment must be in (0, 1] (got {self.ngram_containment})")
        if self.ngram_min_run is not None and self.ngram_min_run < self.ngram_n:
            problems.append(f"ngram.min_run must be >= ngram.n ({self.ngram_n}) or null (got {self.ngram_min_run})")
        if self.shingle_words < 1:
            problems.append(f"minhash.shingle_words must be >= 1 (got {self.shingle_words})")
        if not 0 < self.jaccard <= 1:
            problems.append(f"minhash.threshold must be in (0, 1] (got {self.jaccard})")
        if (self.bands is None) != (self.rows is None):
            problems.append("minhash.bands and minhash.rows must both be set or both be null")
        if problems:
            raise InputError("invalid guard settings: " + "; ".join(problems))
        if self.bands is not None:
            if self.bands < 2 or self.rows < 1 or self.bands * self.rows > self.num_perm:  # type: ignore[operator]
                raise InputError(
                    f"invalid guard settings: minhash bands x rows = {self.bands} x {self.rows} must have "
                    f"bands >= 2 and fit in num_perm = {self.num_perm}"
                )
            return self
        from datasketch import MinHashLSH

        try:
            lsh = MinHashLSH(threshold=self.jaccard, num_perm=self.num_perm, weights=self.weights)
        except ValueError as exc:
            raise InputError(f"invalid guard settings: datasketch rejected the LSH settings: {exc}") from exc
        return GuardConfig(**{**asdict(self), "bands": lsh.b, "rows": lsh.r, "weights": self.weights})

    def to_dict(self) -> dict[str, Any]:
        return {
            "normalisation": NORMALISATION,
            "ngram": {"n": self.ngram_n, "containment": self.ngram_containment, "min_run": self.ngram_min_run},
            "minhash": {
                "shingle_words": self.shingle_words,
                "threshold": self.jaccard,
                "num_perm": self.num_perm,
                "seed": self.seed,
                "bands": self.bands,
                "rows": self.rows,
                "weights": list(self.weights),
                "scheme": MINHASH_SCHEME,
                "lsh": lsh_error_rates(self.jaccard, self.bands, self.rows),  # type: ignore[arg-type]
            },
        }


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


# ----------------------------------------------------------------------------- hashing

_U64 = np.uint64
_MASK64 = (1 << 64) - 1
_POLY = 0x9E3779B97F4A7C15  # odd, so multiplication is a bijection mod 2^64
_NGRAM, _SHINGLE = "ng", "sh"


def _mix64_int(h: int) -> int:
    """splitmix64 finaliser on a Python int (the scalar twin of ``_mix64``)."""
    h &= _MASK64
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
    return h ^ (h >> 31)


def _mix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U64(30))
    h = h * _U64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> _U64(27))
    h = h * _U64(0x94D049BB133111EB)
    return h ^ (h >> _U64(31))


def _gram_seed(domain: str, n: int, length: int) -> int:
    code = 1 if domain == _NGRAM else 2
    return _mix64_int((code << 40) | (n << 20) | length)


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


class FastHasher:
    """Unkeyed 64-bit gram keys for the in-pipeline check (fast, vectorised).

    Each distinct token gets a 64-bit BLAKE2b hash (cached); a gram's key is a polynomial of
    its token hashes mod 2^64, seeded by the gram length, through the splitmix64 finaliser.
    Distinct grams collide with probability about 2^-64 per pair.
    """

    kind = "blake2b-poly64/v1"

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}

    def __getstate__(self) -> dict:
        return {}  # workers rebuild their own token cache

    def __setstate__(self, state: dict) -> None:
        self._cache = {}

    def _token_hash(self, token: str) -> int:
        value = self._cache.get(token)
        if value is None:
            value = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
            self._cache[token] = value
        return value

    def _scalar(self, toks: Sequence[str], domain: str, n: int) -> int:
        acc = _gram_seed(domain, n, len(toks))
        for tok in toks:
            acc = (acc * _POLY + self._token_hash(tok)) & _MASK64
        return _mix64_int(acc)

    def grams(self, token_lists: Sequence[Sequence[str]], n: int, domain: str) -> tuple[np.ndarray, np.ndarray]:
        """Keys of every n-gram of every text, flat in text order, and per-text offsets.

        A text shorter than n (but not empty) contributes one gram: all its tokens.
        """
        return self.grams_many(token_lists, [(n, domain)])[0]

    def grams_many(self, token_lists: Sequence[Sequence[str]], specs: Sequence[tuple[int, str]]):
        """``grams`` for several (n, domain) at once, hashing each token once."""
        lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=len(token_lists))
        cache = self._cache
        flat_tokens = [tok for toks in token_lists for tok in toks]
        for tok in set(flat_tokens).difference(cache):
            self._token_hash(tok)
        th = np.fromiter((cache[tok] for tok in flat_tokens), dtype=np.uint64, count=len(flat_tokens))
        tid = np.repeat(np.arange(len(token_lists), dtype=np.int64), lengths)
        return [self._grams_from(token_lists, th, tid, lengths, n, domain) for n, domain in specs]

    def _grams_from(self, token_lists, th, tid, lengths, n: int, domain: str) -> tuple[np.ndarray, np.ndarray]:
        count_full = max(len(th) - n + 1, 0)
        if count_full:
            acc = np.full(count_full, _gram_seed(domain, n, n), dtype=np.uint64)
            for j in range(n):
                acc = acc * _U64(_POLY) + th[j : j + count_full]
            valid = tid[:count_full] == tid[n - 1 : n - 1 + count_full]  # gram inside one text
            keys = _mix64(acc[valid])
            key_tid = tid[:count_full][valid]
        else:
            keys = np.zeros(0, dtype=np.uint64)
            key_tid = np.zeros(0, dtype=np.int64)
        short = np.flatnonzero((lengths > 0) & (lengths < n))
        if len(short):
            extra = np.fromiter((self._scalar(token_lists[i], domain, n) for i in short), dtype=np.uint64, count=len(short))
            keys = np.concatenate([keys, extra])
            key_tid = np.concatenate([key_tid, short])
            order = np.argsort(key_tid, kind="stable")
            keys, key_tid = keys[order], key_tid[order]
        counts = np.bincount(key_tid, minlength=len(token_lists))
        return keys, _offsets(counts)

    def gram_key(self, toks: Sequence[str], n: int, domain: str) -> int:
        """The key of one gram (``toks`` of length n, or a whole text shorter than n)."""
        return self._scalar(toks, domain, n)


class KeyedHasher:
    """Keyed gram keys for sketches: HMAC-SHA256(key, domain | n | gram text), first 8 bytes.

    Without the key nobody can compute or test these values (HMAC is a PRF), so a sketch of
    keyed hashes reveals nothing testable about the held-out text to whoever lacks the key.
    """

    kind = "hmac-sha256-64/v1"

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise InputError("sketch key must be at least 16 bytes")
        self.key = key

    def gram_key(self, toks: Sequence[str], n: int, domain: str) -> int:
        message = f"{domain}|{n}|{len(toks)}|{' '.join(toks)}".encode("utf-8")
        return int.from_bytes(hmac.digest(self.key, message, "sha256")[:8], "little")

    def grams(self, token_lists: Sequence[Sequence[str]], n: int, domain: str) -> tuple[np.ndarray, np.ndarray]:
        keys: list[int] = []
        counts = np.zeros(len(token_lists), dtype=np.int64)
        for i, toks in enumerate(token_lists):
            if not toks:
                continue
            if len(toks) < n:
                keys.append(self.gram_key(toks, n, domain))
                counts[i] = 1
                continue
            for p in range(len(toks) - n + 1):
                keys.append(self.gram_key(toks[p : p + n], n, domain))
            counts[i] = len(toks) - n + 1
        return np.array(keys, dtype=np.uint64), _offsets(counts)

    def grams_many(self, token_lists: Sequence[Sequence[str]], specs: Sequence[tuple[int, str]]):
        return [self.grams(token_lists, n, domain) for n, domain in specs]


# ----------------------------------------------------------------------------- minhash

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


# ----------------------------------------------------------------------------- index


@dataclass(frozen=True)
class AnswerMeta:
    answer_id: str
    source: str | None = None
    vignette_id: str | None = None


@dataclass(eq=False)
class HeldoutIndex:
    """What the scan needs about the held-out answers: their gram key sets and signatures.

    Built from held-out texts (``build``) or from a sketch (``sketch.index_from_sketch``);
    holds no text either way.
    """

    config: GuardConfig
    hasher: Any
    answers: list[AnswerMeta]
    ngram_sets: list[frozenset[int]]
    shingle_sets: list[frozenset[int]]
    signatures: np.ndarray
    token_counts: list[int]  # words per answer (caps a reported run at the answer's length)
    # Derived lookup structures (``_derive``) are plain attributes, rebuilt after unpickling
    # so a worker process receives only the key sets and signatures.

    def __post_init__(self) -> None:
        if not self.answers:
            raise InputError("held-out set is empty: there is nothing to guard against")
        self._derive()

    def _derive(self) -> None:
        from datasketch import LeanMinHash, MinHashLSH
        from scipy.sparse import csr_matrix

        pairs_key = np.fromiter((k for s in self.ngram_sets for k in s), dtype=np.uint64)
        pairs_ans = np.repeat(np.arange(len(self.ngram_sets)), [len(s) for s in self.ngram_sets])
        order = np.lexsort((pairs_ans, pairs_key))
        pairs_key, pairs_ans = pairs_key[order], pairs_ans[order]
        self._ng_keys, first = np.unique(pairs_key, return_index=True)
        self._ng_ptr = np.append(first, len(pairs_key)).astype(np.int64)
        self._ng_answers = pairs_ans.astype(np.int64)
        self._ng_counts = np.array([len(s) for s in self.ngram_sets], dtype=np.int64)
        self._ng_lengths = np.array(self.token_counts, dtype=np.int64)
        # held-out n-grams x answers, 1 where the answer has the n-gram
        self._ng_matrix = csr_matrix(
            (np.ones(len(self._ng_answers), dtype=np.int32), self._ng_answers, self._ng_ptr),
            shape=(len(self._ng_keys), len(self.answers)),
        )
        self.shingle_sizes = np.array([len(s) for s in self.shingle_sets], dtype=np.int64)
        self._permutations = minhash_permutations(self.config.num_perm, self.config.seed)
        self._lsh = MinHashLSH(num_perm=self.config.num_perm, params=(self.config.bands, self.config.rows))
        with self._lsh.insertion_session() as session:
            for i, sig in enumerate(self.signatures):
                session.insert(i, LeanMinHash(seed=self.config.seed, hashvalues=sig, scheme=MINHASH_SCHEME))
        # The batched lookups must give exactly what datasketch's own query gives.
        probe = self.signatures[: min(len(self.signatures), 64)]
        expected = [set(self._lsh.query(LeanMinHash(seed=self.config.seed, hashvalues=s, scheme=MINHASH_SCHEME)))
                    for s in probe]
        if lsh_candidates(self._lsh, probe) != expected:
            raise RuntimeError("guard: batched LSH lookups disagree with MinHashLSH.query (datasketch changed)")

    def __getstate__(self) -> dict:
        return {k: self.__dict__[k] for k in
                ("config", "hasher", "answers", "ngram_sets", "shingle_sets", "signatures", "token_counts")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._derive()

    @classmethod
    def build(cls, answers: Sequence[AnswerMeta], texts: Sequence[str], config: GuardConfig, hasher: Any) -> "HeldoutIndex":
        if not answers:
            raise InputError("held-out set is empty: there is nothing to guard against")
        token_lists = [tokens(t) for t in texts]
        for meta, toks in zip(answers, token_lists):
            if not toks:
                raise InputError(f"held-out answer '{meta.answer_id}' has no words after normalisation")
        (ng, ng_off), (sh, sh_off) = hasher.grams_many(
            token_lists, [(config.ngram_n, _NGRAM), (config.shingle_words, _SHINGLE)]
        )
        ngram_sets = [frozenset(ng[ng_off[i] : ng_off[i + 1]].tolist()) for i in range(len(answers))]
        shingle_sets = [frozenset(sh[sh_off[i] : sh_off[i + 1]].tolist()) for i in range(len(answers))]
        signatures = minhash_signatures(sh, sh_off, minhash_permutations(config.num_perm, config.seed))
        return cls(config, hasher, list(answers), ngram_sets, shingle_sets, signatures, [len(t) for t in token_lists])


# ----------------------------------------------------------------------------- scan


@dataclass
class Hit:
    """One (training text, held-out answer, detector) pair at or above its threshold."""

    source: str
    record_id: str
    field: str
    answer_id: str
    answer_source: str | None
    detector: str          # "ngram" | "minhash"
    score: float           # exact containment (ngram) or exact Jaccard (minhash)
    threshold: float
    reason: str            # "containment" | "min_run" | "jaccard"
    shared_count: int      # distinct shared n-grams (ngram) or shared shingles (minhash)
    longest_run: int       # longest run of consecutive shared words (ngram; 0 for minhash)
    answer_grams: int      # |G(A)| or |S(A)|
    shared: list[str] = field(default_factory=list)  # shared grams, normalised, in text order

    def to_record(self, with_shared: bool = True) -> dict[str, Any]:
        record = asdict(self)
        record["score"] = round(self.score, 6)
        if not with_shared:
            record.pop("shared")
        return record


# (local text index, answer index, detector, score, reason, shared count, longest run)
RawHit = tuple[int, int, str, float, str, int, int]


def _longest_runs(member: np.ndarray) -> np.ndarray:
    """Longest run of True down each column of a (positions x answers) boolean matrix."""
    if not len(member):
        return np.zeros(member.shape[1], dtype=np.int64)
    idx = np.arange(len(member))[:, None]
    last_false = np.maximum.accumulate(np.where(member, -1, idx), axis=0)
    return (idx - last_false).max(axis=0)


def _ngram_hits(index: HeldoutIndex, n_texts: int, ng: np.ndarray, ng_off: np.ndarray) -> list[RawHit]:
    """Exact containment and longest shared run for every (text, answer) sharing an n-gram."""
    from scipy.sparse import csr_matrix

    config, keys = index.config, index._ng_keys
    if not len(ng) or not len(keys):
        return []
    pos = np.minimum(np.searchsorted(keys, ng), len(keys) - 1)
    matched = keys[pos] == ng
    if not matched.any():
        return []
    text_of = np.repeat(np.arange(n_texts, dtype=np.int64), np.diff(ng_off))
    # texts x held-out n-grams (matched positions, with multiplicity) times n-grams x answers
    positions = csr_matrix(
        (np.ones(int(matched.sum()), dtype=np.int32), (text_of[matched], pos[matched])), shape=(n_texts, len(keys))
    )
    distinct = positions.copy()
    distinct.data[:] = 1  # a repeated n-gram in the text counts once
    shared_csr = distinct @ index._ng_matrix
    shared = shared_csr.tocoo()  # entries in CSR order (row by row)
    containment = shared.data / index._ng_counts[shared.col]
    by_containment = containment >= config.ngram_containment
    # Longest shared run (in words) for every pair that is a hit by containment or could be
    # one by run: a run of R words is R - n + 1 consecutive matched positions, so only pairs
    # with at least that many matched positions (counted with multiplicity) can have one.
    run_needed = by_containment.copy()
    if config.ngram_min_run:
        need = max(config.ngram_min_run - config.ngram_n + 1, 1)
        with_mult = positions @ index._ng_matrix
        # `positions` and `distinct` share one sparsity structure, so the two products do too
        # and their entries align one to one; checked, because the alignment is what makes
        # this right.
        if not (np.array_equal(with_mult.indptr, shared_csr.indptr) and np.array_equal(with_mult.indices, shared_csr.indices)):
            raise RuntimeError("guard: n-gram count matrices lost alignment (scipy sparse behaviour changed)")
        run_needed |= with_mult.data >= need
    longest = np.zeros(len(shared.data), dtype=np.int64)
    candidate = np.flatnonzero(run_needed)  # row-major order: grouped by text
    groups = np.split(candidate, np.flatnonzero(np.diff(shared.row[candidate])) + 1) if len(candidate) else []
    for js in groups:
        r = shared.row[js[0]]
        lo, hi = ng_off[r], ng_off[r + 1]
        cols = shared.col[js]
        member = np.zeros((hi - lo, len(js)), dtype=bool)
        present = np.flatnonzero(matched[lo:hi])
        member[present] = index._ng_matrix[pos[lo:hi][present]][:, cols].toarray() > 0
        runs = _longest_runs(member)
        words = np.where(runs > 0, runs + config.ngram_n - 1, 0)
        longest[js] = np.minimum(words, index._ng_lengths[cols])
    by_run = longest >= config.ngram_min_run if config.ngram_min_run else np.zeros(len(longest), dtype=bool)
    return [
        (int(shared.row[j]), int(shared.col[j]), "ngram", float(containment[j]),
         "containment" if by_containment[j] else "min_run", int(shared.data[j]), int(longest[j]))
        for j in np.flatnonzero(by_containment | by_run)
    ]


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
    gets = [table.get for table in lsh.hashtables]
    out: list[set[int]] = []
    for row in range(len(signatures)):
        found: set[int] = set()
        for get, band in zip(gets, keys):
            bucket = get(band[row])
            if bucket:
                found |= bucket
        out.append(found)
    return out


def _minhash_hits(index: HeldoutIndex, n_texts: int, sh: np.ndarray, sh_off: np.ndarray) -> list[RawHit]:
    """LSH candidates (datasketch), each scored by exact Jaccard of the shingle sets."""
    t = index.config.jaccard
    answer_sizes, answer_sets = index.shingle_sizes, index.shingle_sets
    lo_size, hi_size = answer_sizes.min() * t, answer_sizes.max() / t
    counts = np.diff(sh_off)
    # J >= t needs t <= |S(A)| / |S(T)| <= 1/t, and |S(T)| <= count: texts that cannot reach
    # any answer's size range skip the query (the exact size is checked again below).
    queried = np.flatnonzero((counts > 0) & (counts >= lo_size))
    if not len(queried):
        return []
    signatures = minhash_signatures(sh, sh_off, index._permutations)
    bounds = sh_off.tolist()
    hits: list[RawHit] = []
    for i, found in zip(queried.tolist(), lsh_candidates(index._lsh, signatures[queried])):
        if not found:
            continue
        text_set = set(sh[bounds[i] : bounds[i + 1]].tolist())
        size = len(text_set)
        if size < lo_size or size > hi_size:
            continue
        for a in found:
            other = answer_sets[a]
            other_size = len(other)
            if other_size < size * t or size < other_size * t:
                continue
            inter = len(text_set.intersection(other))
            jaccard = inter / (size + other_size - inter)
            if jaccard >= t:
                hits.append((i, a, "minhash", jaccard, "jaccard", inter, 0))
    return hits


def _scan(index: HeldoutIndex, texts: Sequence[str]) -> list[RawHit]:
    """Both detectors over one batch of texts."""
    config = index.config
    token_lists = [tokens(t) for t in texts]
    (ng, ng_off), (sh, sh_off) = index.hasher.grams_many(
        token_lists, [(config.ngram_n, _NGRAM), (config.shingle_words, _SHINGLE)]
    )
    return _ngram_hits(index, len(texts), ng, ng_off) + _minhash_hits(index, len(texts), sh, sh_off)


_WORKER_INDEX: HeldoutIndex | None = None


def _init_worker(blob: bytes) -> None:
    global _WORKER_INDEX
    _WORKER_INDEX = pickle.loads(blob)


def _worker_scan(start: int, texts: list[str]) -> tuple[int, list[RawHit]]:
    assert _WORKER_INDEX is not None, "worker started without an index"
    return start, _scan(_WORKER_INDEX, texts)


def scan_texts(
    index: HeldoutIndex,
    texts: Sequence[str],
    *,
    workers: int = 1,
    chunk_size: int = 2000,
    progress: Callable[[int], None] | None = None,
) -> list[RawHit]:
    """Raw hits (global text index, ...) for ``texts``, in a deterministic order.

    With ``workers > 1`` and more than one chunk, chunks go to a spawn-started process pool
    (each worker unpickles the index once); results do not depend on ``workers``.
    """
    if workers < 1 or chunk_size < 1:
        raise InputError(f"guard: workers ({workers}) and chunk_size ({chunk_size}) must be >= 1")
    chunks = [(s, list(texts[s : s + chunk_size])) for s in range(0, len(texts), chunk_size)]
    results: list[RawHit] = []
    if workers == 1 or len(chunks) <= 1:
        for start, chunk in chunks:
            results.extend((start + i, *rest) for i, *rest in _scan(index, chunk))
            if progress:
                progress(len(chunk))
    else:
        blob = pickle.dumps(index)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(blob,)) as pool:
            futures = {pool.submit(_worker_scan, start, chunk): len(chunk) for start, chunk in chunks}
            for future in as_completed(futures):
                start, raw = future.result()
                results.extend((start + i, *rest) for i, *rest in raw)
                if progress:
                    progress(futures[future])
    results.sort(key=lambda h: (h[0], h[1], h[2]))
    return results


def shared_spans(index: HeldoutIndex, text: str, answer: int, detector: str, limit: int) -> list[str]:
    """The passages of ``text`` (normalised) made of grams the answer also has, in text order.

    Overlapping matched grams are merged, so a copied sentence shows as one span rather than
    as its n-grams.
    """
    config = index.config
    toks = tokens(text)
    if detector == "ngram":
        n, domain, target = config.ngram_n, _NGRAM, index.ngram_sets[answer]
    else:
        n, domain, target = config.shingle_words, _SHINGLE, index.shingle_sets[answer]
    if 0 < len(toks) < n:
        return [" ".join(toks)] if index.hasher.gram_key(toks, n, domain) in target else []
    spans: list[str] = []
    seen: set[str] = set()
    span_start = span_end = -1  # token range [start, end) of the span being grown
    for p in range(len(toks) - n + 1):
        if index.hasher.gram_key(toks[p : p + n], n, domain) not in target:
            continue
        if p <= span_end:  # overlaps or touches the current span
            span_end = p + n
            continue
        if span_start >= 0:
            spans.append(" ".join(toks[span_start:span_end]))
        span_start, span_end = p, p + n
    if span_start >= 0:
        spans.append(" ".join(toks[span_start:span_end]))
    out = []
    for span in spans:
        if span not in seen:
            seen.add(span)
            out.append(span)
    return out[:limit]


def check_units(
    index: HeldoutIndex,
    units: Sequence[TextUnit],
    *,
    workers: int = 1,
    chunk_size: int = 2000,
    max_shared: int = 10,  # shared passages spelled out per hit
    progress: Callable[[int], None] | None = None,
) -> list[Hit]:
    """Every hit of ``units`` against ``index``, with the shared grams spelled out."""
    raw = scan_texts(index, [u.text for u in units], workers=workers, chunk_size=chunk_size, progress=progress)
    config = index.config
    hits = []
    for ui, ai, detector, score, reason, shared_count, longest_run in raw:
        unit, meta = units[ui], index.answers[ai]
        threshold = config.jaccard if detector == "minhash" else config.ngram_containment
        size = len(index.shingle_sets[ai]) if detector == "minhash" else len(index.ngram_sets[ai])
        hits.append(
            Hit(
                source=unit.source, record_id=unit.record_id, field=unit.field,
                answer_id=meta.answer_id, answer_source=meta.source, detector=detector,
                score=score, threshold=threshold, reason=reason, shared_count=shared_count,
                longest_run=longest_run, answer_grams=size,
                shared=shared_spans(index, unit.text, ai, detector, max_shared),
            )
        )
    return hits
