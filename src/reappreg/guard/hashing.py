"""Integer keys of word grams and letter grams, unkeyed (in the pipeline) or keyed (sketches).

Word grams are hashed from each token's UTS #39 skeleton (``normalise.skeleton``), so a
look-alike letter of another script gives the same key; the token hash is cached per
distinct token, so the skeleton costs one ICU call per vocabulary entry.

Letter grams (the ``chars`` and ``fragments`` detectors) are windows of ``n`` letters of the
letter view (``normalise.letters``). Their unkeyed key is a polynomial rolling hash mod 2^64
over mixed code points, computed for all windows of a batch at once from prefix sums with
the modular inverse of the (odd) base, then the splitmix64 finaliser. The keyed key is
BLAKE2b keyed with the sketch key over the unkeyed key (a PRF of the window up to a 2^-64
chance of two windows sharing an unkeyed key).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Sequence
from itertools import chain

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.normalise import skeleton


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
    code = {_NGRAM: 1, _SHINGLE: 2, "ch": 3}[domain]
    return _mix64_int((code << 40) | (n << 20) | length)


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _gram_of_hashes(hashes: Sequence[int], domain: str, n: int) -> int:
    """One gram's key from its token keys (the scalar twin of ``_grams_from``)."""
    acc = _gram_seed(domain, n, len(hashes))
    for h in hashes:
        acc = (acc * _POLY + int(h)) & _MASK64
    return _mix64_int(acc)


def _grams_from(th: np.ndarray, tid: np.ndarray, lengths: np.ndarray, n: int, domain: str) -> tuple[np.ndarray, np.ndarray]:
    """Keys of every n-gram inside one text (texts of fewer than n tokens: one gram of all)."""
    count_full = max(len(th) - n + 1, 0)
    if count_full:
        acc = np.full(count_full, _gram_seed(domain, n, n), dtype=np.uint64)
        with np.errstate(over="ignore"):
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
        starts = _offsets(lengths)
        extra = np.fromiter((_gram_of_hashes(th[starts[i] : starts[i + 1]].tolist(), domain, n) for i in short),
                            dtype=np.uint64, count=len(short))
        keys = np.concatenate([keys, extra])
        key_tid = np.concatenate([key_tid, short])
        order = np.argsort(key_tid, kind="stable")
        keys, key_tid = keys[order], key_tid[order]
    counts = np.bincount(key_tid, minlength=len(lengths))
    return keys, _offsets(counts)


class FastHasher:
    """Unkeyed 64-bit gram keys for the in-pipeline check (fast, vectorised).

    Each distinct token gets a 64-bit key of its UTS #39 skeleton (``token_key``: a
    polynomial hash of its code points, the same as the letter windows'); a gram's key is a
    polynomial of its token keys mod 2^64, seeded by the gram length, through the splitmix64
    finaliser. Distinct grams collide with probability about 2^-64 per pair. Folded ASCII
    text (nearly all of it) is tokenised and hashed in numpy without making a Python string
    per word (``ascii_token_keys``); other text goes word by word through a cache. Both give
    the same keys (tested).
    """

    kind = "poly64-skeleton/v3"  # v3: token keys are polynomial hashes of the skeleton, vectorised for ASCII

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}

    def __getstate__(self) -> dict:
        return {}  # workers rebuild their own token cache

    def __setstate__(self, state: dict) -> None:
        self._cache = {}

    def _token_hash(self, token: str) -> int:
        value = self._cache.get(token)
        if value is None:
            value = token_key(skeleton(token))
            self._cache[token] = value
        return value

    def _scalar(self, toks: Sequence[str], domain: str, n: int) -> int:
        return _gram_of_hashes([self._token_hash(tok) for tok in toks], domain, n)

    def grams(self, token_lists: Sequence[Sequence[str]], n: int, domain: str) -> tuple[np.ndarray, np.ndarray]:
        """Keys of every n-gram of every text, flat in text order, and per-text offsets.

        A text shorter than n (but not empty) contributes one gram: all its tokens.
        """
        return self.grams_many(token_lists, [(n, domain)])[0]

    def grams_many(self, token_lists: Sequence[Sequence[str]], specs: Sequence[tuple[int, str]]):
        """``grams`` for several (n, domain) at once, hashing each token once."""
        lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=len(token_lists))
        return self._grams_of_keys(self._list_keys(list(chain.from_iterable(token_lists))), lengths, specs)

    def grams_of_views(self, word_views: Sequence[str | Sequence[str]], specs: Sequence[tuple[int, str]]):
        """``grams_many`` of texts given as ``normalise.scan_views`` words: a folded ASCII
        string (tokenised and hashed here, vectorised) or a token list."""
        is_text = np.fromiter((isinstance(v, str) for v in word_views), dtype=bool, count=len(word_views))
        text_rows = np.flatnonzero(is_text)
        ascii_keys, ascii_counts = ascii_token_keys([word_views[i] for i in text_rows])
        list_rows = np.flatnonzero(~is_text)
        token_lists = [word_views[i] for i in list_rows]
        list_counts = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
        list_keys = self._list_keys(list(chain.from_iterable(token_lists)))
        lengths = np.zeros(len(word_views), dtype=np.int64)
        lengths[text_rows], lengths[list_rows] = ascii_counts, list_counts
        if not len(list_rows):
            return self._grams_of_keys(ascii_keys, lengths, specs)
        # tokens of both kinds back into text order (a stable sort by text)
        owner = np.concatenate([np.repeat(text_rows, ascii_counts), np.repeat(list_rows, list_counts)])
        keys = np.concatenate([ascii_keys, list_keys])[np.argsort(owner, kind="stable")]
        return self._grams_of_keys(keys, lengths, specs)

    def _list_keys(self, flat_tokens: list[str]) -> np.ndarray:
        cache = self._cache
        try:
            return np.fromiter(map(cache.__getitem__, flat_tokens), dtype=np.uint64, count=len(flat_tokens))
        except KeyError:  # new tokens: hash each distinct one once, then look all up
            for tok in set(flat_tokens).difference(cache):
                self._token_hash(tok)
            return np.fromiter(map(cache.__getitem__, flat_tokens), dtype=np.uint64, count=len(flat_tokens))

    def _grams_of_keys(self, th: np.ndarray, lengths: np.ndarray, specs: Sequence[tuple[int, str]]):
        tid = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        return [_grams_from(th, tid, lengths, n, domain) for n, domain in specs]

    def gram_key(self, toks: Sequence[str], n: int, domain: str) -> int:
        """The key of one gram (``toks`` of length n, or a whole text shorter than n)."""
        return self._scalar(toks, domain, n)

    def letter_grams(self, views: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        return letter_grams(views, n)

    def letter_key(self, window: str, n: int) -> int:
        return letter_key(window, n)


class KeyedHasher:
    """Keyed gram keys for sketches: HMAC-SHA256(key, domain | n | gram text), first 8 bytes.

    Without the key nobody can compute or test these values (HMAC is a PRF), so a sketch of
    keyed hashes reveals nothing testable about the held-out text to whoever lacks the key.
    """

    kind = "hmac-sha256-64/v2"  # v2: skeleton tokens; letter grams keyed by BLAKE2b

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise InputError("sketch key must be at least 16 bytes")
        self.key = key

    def gram_key(self, toks: Sequence[str], n: int, domain: str) -> int:
        message = f"{domain}|{n}|{len(toks)}|{' '.join(map(skeleton, toks))}".encode("utf-8")
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

    def _keyed(self, fast_keys: np.ndarray) -> np.ndarray:
        unique, inverse = np.unique(fast_keys, return_inverse=True)
        key = self.key[:64]
        keyed = np.fromiter(
            (int.from_bytes(hashlib.blake2b(int(k).to_bytes(8, "little"), key=key, digest_size=8, person=b"reappreg-ch").digest(), "little")
             for k in unique.tolist()),
            dtype=np.uint64, count=len(unique),
        )
        return keyed[inverse.ravel()]

    def letter_grams(self, views: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        keys, offsets = letter_grams(views, n)
        return self._keyed(keys), offsets

    def letter_key(self, window: str, n: int) -> int:
        return int(self._keyed(np.array([letter_key(window, n)], dtype=np.uint64))[0])



# ----------------------------------------------------------------------------- letter grams

_CHAR_SEED = 0x51ED270B27A3F1C5
_CHAR_BASE = 0x100000001B3 * 2 + 1          # odd, so it is invertible mod 2^64
_CHAR_BASE_INV = pow(_CHAR_BASE, -1, 1 << 64)
_POWERS: dict[str, np.ndarray] = {"up": np.ones(1, dtype=np.uint64), "down": np.ones(1, dtype=np.uint64)}


def _powers(count: int) -> tuple[np.ndarray, np.ndarray]:
    """base^k and base^-k mod 2^64 for k < count (cached, grown on demand)."""
    if len(_POWERS["up"]) < count:
        size = max(count, 2 * len(_POWERS["up"]))
        with np.errstate(over="ignore"):
            for name, base in (("up", _CHAR_BASE), ("down", _CHAR_BASE_INV)):
                factors = np.full(size, base, dtype=np.uint64)
                factors[0] = 1
                _POWERS[name] = np.cumprod(factors, dtype=np.uint64)
    return _POWERS["up"][:count], _POWERS["down"][:count]


def _char_codes(text: str) -> np.ndarray:
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    return _mix64(codes + _U64(_CHAR_SEED))


def letter_grams(views: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys of every window of ``n`` letters of every letter view, flat, and per-text offsets.

    A view shorter than ``n`` letters has no window (the word detectors still see it).
    """
    lengths = np.fromiter(map(len, views), dtype=np.int64, count=len(views))
    windows = np.maximum(lengths - n + 1, 0)
    total = int(lengths.sum())
    if not windows.any():
        return np.zeros(0, dtype=np.uint64), _offsets(windows)
    codes = _char_codes("".join(views))
    up, down = _powers(total + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(total + 1, dtype=np.uint64)
        np.cumsum(codes * down[:total], out=prefix[1:])
        # Every window of the concatenation at once, from slices (no gathers):
        # sum_{j<n} c[s+j] * base^(n-1-j) = (P[s+n] - P[s]) * base^(s+n-1);
        # then only the windows inside one text are kept.
        poly = (prefix[n:] - prefix[: total - n + 1]) * up[n - 1 : total]
        text_of = np.repeat(np.arange(len(views), dtype=np.int32), lengths)
        inside = text_of[: total - n + 1] == text_of[n - 1 :]
        keys = _mix64(poly[inside] ^ _U64(_gram_seed("ch", n, n)))
    return keys, _offsets(windows)


def letter_key(window: str, n: int) -> int:
    """The key of one window of ``n`` letters (the scalar twin of ``letter_grams``)."""
    if len(window) != n:
        raise ValueError(f"a letter gram has exactly {n} letters (got {len(window)})")
    acc = 0
    for c in _char_codes(window).tolist():
        acc = (acc * _CHAR_BASE + c) & _MASK64
    return _mix64_int(acc ^ _gram_seed("ch", n, n))


# ----------------------------------------------------------------------------- token keys

_TOKEN_SEED = 0x2545F4914F6CDD1D


def token_key(skeleton_text: str) -> int:
    """The key of one token from its skeleton: polynomial of its code points (as the letter
    windows), seeded by its length (the scalar twin of ``ascii_token_keys``)."""
    acc = 0
    for c in _char_codes(skeleton_text).tolist():
        acc = (acc * _CHAR_BASE + c) & _MASK64
    return _mix64_int(acc ^ _mix64_int(_TOKEN_SEED + len(skeleton_text)))


def token_keys(texts: Sequence[str]) -> np.ndarray:
    """``token_key`` of every string, in one vectorised pass (equal, tested)."""
    if not texts:
        return np.zeros(0, dtype=np.uint64)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    ends = np.cumsum(lengths)
    return _span_keys(_char_codes("".join(texts)), ends - lengths, ends)


def _span_keys(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``token_key`` of each span ``codes[start:end]`` (character codes as ``_char_codes``
    gives them), all at once from one prefix sum:
    sum_j c[s+j] * base^(L-1-j) = (P[e] - P[s]) * base^(e-1); an empty span's polynomial is 0."""
    up, down = _powers(len(codes) + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(codes) + 1, dtype=np.uint64)
        np.cumsum(codes * down[: len(codes)], out=prefix[1:])
        poly = (prefix[ends] - prefix[starts]) * up[np.maximum(ends - 1, 0)]
        return _mix64(poly ^ _mix64((ends - starts).astype(np.uint64) + _U64(_TOKEN_SEED)))


_WORD_BYTES = b"abcdefghijklmnopqrstuvwxyz0123456789"


@functools.cache
def _ascii_skeleton_steps() -> tuple[tuple[tuple[str, str], ...], bytes]:
    """How folded ASCII words become their skeletons with C-speed string calls: characters
    whose skeleton is several characters are replaced first (ICU today: ``m`` -> ``rn``), then
    one ``bytes.translate`` maps the rest (``0`` -> ``o``, ``1`` -> ``l``) and turns every
    non-word byte into a space. UTS #39 maps code point by code point, so a word's skeleton
    is its characters' skeletons in a row."""
    words = _WORD_BYTES.decode()
    skeletons = {ch: skeleton(ch) for ch in words}
    multi = tuple((ch, skel) for ch, skel in skeletons.items() if len(skel) != 1)
    # every skeleton is made of word characters, and what a replacement writes maps to itself
    if not all(skel and set(skel) <= set(words) for skel in skeletons.values()) or not all(
            skeletons[c] == c for _, skel in multi for c in skel):
        raise RuntimeError(f"guard hashing: ICU's ASCII skeletons {skeletons} no longer fit the vectorised token path")
    mapping = bytearray(b" " * 256)
    for ch, skel in skeletons.items():
        if len(skel) == 1:
            mapping[ord(ch)] = ord(skel)
    return multi, bytes(mapping)


_IS_WORD = np.zeros(256, dtype=bool)
_IS_WORD[np.frombuffer(_WORD_BYTES, dtype=np.uint8)] = True


def ascii_token_keys(word_views: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token keys of folded ASCII word views (lower case; words are the runs of ``[a-z0-9]``),
    flat in text order, and the number of tokens of each text; equal to ``token_key(skeleton(w))``
    for every word ``w`` (tested)."""
    if not word_views:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    multi, mapping = _ascii_skeleton_steps()
    views = list(word_views)
    for source, target in multi:
        views = [v.replace(source, target) if source in v else v for v in views]
    lengths = np.fromiter(map(len, views), dtype=np.int64, count=len(views))
    data = np.frombuffer(" ".join(views).encode("ascii").translate(mapping), dtype=np.uint8)
    word = _IS_WORD[data]
    edges = np.diff(np.concatenate([[False], word, [False]]).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    text_starts = _offsets(lengths + 1)[:-1]  # each text is followed by one separating space
    counts = np.bincount(np.searchsorted(text_starts, starts, side="right") - 1, minlength=len(views))
    if not len(starts):
        return np.zeros(0, dtype=np.uint64), counts
    return _span_keys(_ASCII_CODES[data], starts, ends), counts


_ASCII_CODES = _mix64(np.arange(256, dtype=np.uint64) + _U64(_CHAR_SEED))  # ``_char_codes`` of each byte
