"""The ``edits`` detector: a held-out answer copied with an edit in many of its words.

What it catches, and why the other detectors miss it
----------------------------------------------------
A typo in every third word, a random word inserted after every second word, every function
word swapped for another, every verb's tense shifted: each leaves almost no word n-gram
(``ngram``), few word shingles (``minhash``) and few 25-letter windows (``chars``) of the
answer intact, yet the copy still carries the answer's content words, in the answer's order.
This detector compares exactly that.

Design
------
* **Content-word view.** The words of the word view (``normalise``), each through its UTS #39
  skeleton (``normalise.skeleton``: look-alike letters of other scripts fold, as for every
  other detector); function words (``STOP_WORDS``, a fixed closed-class list: articles,
  pronouns, prepositions, conjunctions, auxiliaries and modals, and the adverbs and
  quantifiers that carry no content) are dropped. Swapping one function word for another, or
  inserting one, therefore changes nothing here.
* **Stems.** Each content word is stemmed with the Snowball English stemmer (the maintained
  Porter2 algorithm, from ``snowballstemmer``'s pure-Python implementation, so the stems do
  not depend on whether the C ``PyStemmer`` happens to be installed; its version is part of
  ``EDITS_VERSION``). Regular tense and number changes (-s, -ed, -ing) give the same stem.
* **Typos.** Two words match when they are within one edit (a letter changed, dropped, added,
  or two neighbours swapped): every word is keyed by itself and, for words of at least
  ``MIN_TYPO_LETTERS`` letters, by each of its one-letter deletions (SymSpell's deletion
  neighbourhood); words one edit apart share a key. Keys are hashes, so this works from a
  keyed sketch exactly as from the held-out texts. (A shared deletion can also join two words
  two edits apart, "abcd"/"abde"; a single word matching proves nothing, the in-order match
  below is what decides.) Short words (< 4 letters) are matched exactly or by stem only:
  their deletions are 2-letter strings that half the vocabulary shares.
* **Candidates.** Per batch, every distinct word of the texts is looked up once; a sparse
  product gives, for every (text, answer), how many of the answer's content words the text
  matches at all. Only pairs where that reaches ``edits.threshold`` x the answer's content
  words are scored (the in-order match can only be smaller).
* **Score: in-order match inside a stretch.** The longest common subsequence of the answer's
  content words and the text's content words (a text word matches an answer word when they
  share a key), computed bit-parallel (Hyyroe 2004: one big-integer step per matching text
  word), inside stretches of the text ``edits.span`` x the answer's content length that
  start at every multiple of that length (so any passage up to ``(span - 1)`` answer lengths
  lies whole in one of them: a copy with a word inserted after every word and filler around
  it included). The score is the best stretch's LCS over the answer's content words; a hit at
  ``>= edits.threshold``. Order matters: humans writing about the same scenario use the same
  content words, but not the answer's in the answer's order; and locality matters: the
  answer's content words scattered over a long document never add up, since only one stretch
  counts.
* **Short answers** (fewer than ``edits.min_answer_words`` content words) are left to the
  exact detectors: a few content words in order are too common to prove a copy (a stock
  reframe, "learn from this mistake and do better next time").

Keys, and the sketch
--------------------
Each content word of an answer gives one key per stem and per typo variant. In the pipeline
(``FastHasher``) a key is an unkeyed 64-bit hash (``hashing.token_key`` of the string, with a
domain seed), stored with the answer position. In a sketch (``KeyedHasher``) a key is the
first 8 bytes of HMAC-SHA256(sketch key, domain | string), and the position it belongs to is
stored XOR-masked with the next 8 bytes of the same HMAC: whoever lacks the key sees a sorted
list of (random-looking key, random-looking number) pairs per answer and cannot even tell
which keys belong to one word (so not the words' lengths or order either); a key holder's
text word with the same HMAC unmasks the position. A key holder can, as the sketch module
says of every word key, confirm guesses, here single words (a vocabulary of 10^5 words is
10^6 HMACs): with the ``edits`` part, the sketch key gives away the answers' content words
and their order to whoever enumerates a vocabulary, so the key is as confidential as the
held-out answers themselves (``sketch`` module docstring).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
from collections.abc import Sequence
from itertools import chain
from importlib import metadata
from typing import Any

import numpy as np

from reappreg.errors import InputError
from reappreg.guard.detector import Batch, Detector, RawHit
from reappreg.guard.hashing import _mix64, _mix64_int, token_key, token_keys
from reappreg.guard.normalise import skeleton
from reappreg.settings.guard import EditsSettings

MIN_TYPO_LETTERS = 4  # a word of this many letters is keyed by its one-letter deletions too
# ... and at most this many: a word's deletions cost its length squared, and a "word" of a
# million letters (a base64 blob, a minified file) would take gigabytes. No English word an
# answer uses is longer; a longer token is matched exactly or by stem.
MAX_TYPO_LETTERS = 40

# Function words: closed-class English words a copy can swap, drop or insert without changing
# what it says. Lower case, apostrophes removed as the word view removes them.
STOP_WORDS = frozenset("""
a an the this that these those there here some any each every either neither no nor not none all both half
another other such own same so than too very just only also even ever still yet already again once
i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves one ones someone something anyone anything everyone
everything nobody nothing somebody anybody everybody whom whose who what which whatever whichever whoever
when where why how whenever wherever however
am is are was were be been being have has had having do does did doing done
can could may might must shall should will would ought need dare
cant couldnt wont wouldnt shouldnt dont doesnt didnt isnt arent wasnt werent hasnt havent hadnt mustnt mightnt
im ive id ill youre youve youd youll hes shes its were weve wed well theyre theyve theyd theyll thats theres
whats whos lets
of in on at by for with about against between into through during before after above below to from up down
out off over under within without upon onto toward towards across along around behind beyond near among
via per like unlike since until till while whilst though although because unless whether if then else
and but or as yet so
more most less least much many few several lot lots
quite rather really perhaps maybe just almost enough
""".split())

_DOMAIN_STEM, _DOMAIN_TYPO = "s", "t"
_SEEDS = {_DOMAIN_STEM: 0x5EED5A11E1A5D0E5, _DOMAIN_TYPO: 0x7E570BEEFCAFE7A1}


def _stemmer_version() -> str:
    try:
        return metadata.version("snowballstemmer")
    except metadata.PackageNotFoundError:  # pragma: no cover - a broken install
        return "unknown"


EDITS_VERSION = (
    f"reappreg-guard-edits/v1;snowball-english=snowballstemmer{_stemmer_version()};"
    f"stop={hashlib.sha256(' '.join(sorted(STOP_WORDS)).encode()).hexdigest()[:12]};"
    f"typo=del1>={MIN_TYPO_LETTERS}<={MAX_TYPO_LETTERS};stem<={MAX_TYPO_LETTERS};positions-masked"
)


@functools.cache
def _stemmer():
    # The pure-Python class, not ``snowballstemmer.stemmer``: that one silently switches to
    # PyStemmer's C build when it is installed, whose algorithm version may differ.
    from snowballstemmer.english_stemmer import EnglishStemmer

    return EnglishStemmer()


@functools.cache
def _stop_skeletons() -> frozenset[str]:
    return frozenset(skeleton(w) for w in STOP_WORDS) | STOP_WORDS


def content_strings(token: str) -> tuple[str, tuple[str, ...]] | None:
    """(stem, typo variants) of one word-view token, or None for a function word."""
    skel = skeleton(token)
    if not skel or token in STOP_WORDS or skel in _stop_skeletons():
        return None
    variants = {skel}
    if len(skel) > MAX_TYPO_LETTERS:
        # no English word is that long: a "word" of a million letters (a run of symbol letters,
        # a blob) is its own stem; the pure-Python stemmer would take seconds per megabyte
        return skel, tuple(variants)
    if MIN_TYPO_LETTERS <= len(skel):
        variants.update(skel[:i] + skel[i + 1 :] for i in range(len(skel)))
    return _stemmer().stemWord(skel), tuple(sorted(variants))


def content_words(tokens: Sequence[str]) -> list[str]:
    """The content words of a token list (function words dropped), for reports and tests."""
    return [t for t in tokens if content_strings(t) is not None]


class WordKeys:
    """Keys of one word's strings, per hasher: (key, mask) pairs; cached per distinct token.

    Unkeyed (``FastHasher``): ``token_key`` of the string mixed with a domain seed, mask 0.
    Keyed (a hasher with ``key``): HMAC-SHA256(key, "reappreg-guard-edits/v1|domain|string"),
    the first 8 bytes the key, the next 8 the mask of the position stored with it.
    """

    def __init__(self, hasher: Any) -> None:
        self.secret: bytes | None = getattr(hasher, "key", None)
        self._cache: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}

    def _one(self, domain: str, text: str) -> tuple[int, int]:
        if self.secret is None:
            return _mix64_int(token_key(text) ^ _SEEDS[domain]), 0
        digest = hmac.digest(self.secret, f"reappreg-guard-edits/v1|{domain}|{text}".encode("utf-8"), "sha256")
        return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:16], "little")

    def of_tokens(self, tokens: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """``of_token`` of each token; the unkeyed keys of every new token in one vectorised
        hashing pass (``hashing.token_keys``; one call per string cost 13 us)."""
        new = [t for t in dict.fromkeys(tokens) if t not in self._cache]
        if new and self.secret is None:
            found = [(t, content_strings(t)) for t in new]
            words = [(t, strings) for t, strings in found if strings is not None]
            texts = [text for _, (stem, variants) in words for text in (stem, *variants)]
            domains = np.array([_SEEDS[d] for _, (_, variants) in words for d in (_DOMAIN_STEM, *[_DOMAIN_TYPO] * len(variants))],
                               dtype=np.uint64)
            keys = _mix64(token_keys(texts) ^ domains) if texts else np.zeros(0, dtype=np.uint64)
            at = 0
            for t, strings in found:
                if strings is None:
                    self._cache[t] = None
                    continue
                k = 1 + len(strings[1])
                self._cache[t] = (keys[at : at + k], np.zeros(k, dtype=np.uint64))
                at += k
        return [self.of_token(t) for t in tokens]

    def of_token(self, token: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(keys, masks) of a token, or None for a function word."""
        if token in self._cache:
            return self._cache[token]
        strings = content_strings(token)
        if strings is None:
            out = None
        else:
            stem, variants = strings
            pairs = [self._one(_DOMAIN_STEM, stem)] + [self._one(_DOMAIN_TYPO, v) for v in variants]
            out = (np.array([k for k, _ in pairs], dtype=np.uint64), np.array([m for _, m in pairs], dtype=np.uint64))
        self._cache[token] = out
        return out


def answer_keys(hasher: Any, token_lists: Sequence[Sequence[str]]) -> list[tuple[int, np.ndarray]]:
    """Per answer: (content words, k x 2 uint64 array of (key, position XOR mask)), sorted."""
    words = WordKeys(hasher)
    out = []
    for toks in token_lists:
        rows = []
        position = 0
        for tok in toks:
            found = words.of_token(tok)
            if found is None:
                continue
            keys, masks = found
            rows.append(np.stack([keys, masks ^ np.uint64(position)], axis=1))
            position += 1
        pairs = np.concatenate(rows) if rows else np.zeros((0, 2), dtype=np.uint64)
        pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))] if len(pairs) else pairs
        out.append((position, pairs))
    return out


class EditsTable:
    """The held-out side of the ``edits`` detector: sorted keys, and per key the (answer,
    masked position) postings; the answers' content lengths and global position offsets."""

    def __init__(self, entries: Sequence[tuple[int, np.ndarray]], hasher: Any) -> None:
        self.lengths = np.array([n for n, _ in entries], dtype=np.int64)
        self.offsets = np.zeros(len(entries) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])
        keys = np.concatenate([p[:, 0] for _, p in entries]) if entries else np.zeros(0, dtype=np.uint64)
        masked = np.concatenate([p[:, 1] for _, p in entries]) if entries else np.zeros(0, dtype=np.uint64)
        answer = np.repeat(np.arange(len(entries), dtype=np.int64), [len(p) for _, p in entries])
        order = np.argsort(keys, kind="stable")
        self.post_key, self.post_masked, self.post_answer = keys[order], masked[order], answer[order]
        self.words = WordKeys(hasher)
        self.total_positions = int(self.offsets[-1])

    def __getstate__(self) -> dict:
        raise TypeError("EditsTable is derived; pickle the HeldoutIndex")

    def vocab_positions(self, vocab: Sequence[str]):
        """(vocab x global answer positions) CSR matrix, 1 where the word matches that answer
        word, and which vocabulary entries are content words."""
        from scipy.sparse import csr_matrix

        found = self.words.of_tokens(vocab)
        is_content = np.fromiter((f is not None for f in found), dtype=bool, count=len(vocab))
        counts = np.fromiter((len(f[0]) if f is not None else 0 for f in found), dtype=np.int64, count=len(vocab))
        if not counts.sum() or not len(self.post_key):
            return csr_matrix((len(vocab), max(self.total_positions, 1)), dtype=np.int32), is_content
        keys = np.concatenate([f[0] for f in found if f is not None])
        masks = np.concatenate([f[1] for f in found if f is not None])
        owner = np.repeat(np.arange(len(vocab), dtype=np.int64), counts)
        lo = np.searchsorted(self.post_key, keys, side="left")
        hi = np.searchsorted(self.post_key, keys, side="right")
        hits = hi - lo
        take = np.flatnonzero(hits)
        if not len(take):
            return csr_matrix((len(vocab), max(self.total_positions, 1)), dtype=np.int32), is_content
        rep = np.repeat(take, hits[take])
        # posting index for every (key occurrence, posting) pair
        starts = np.repeat(lo[take], hits[take])
        within = np.arange(len(rep)) - np.repeat(np.cumsum(hits[take]) - hits[take], hits[take])
        post = starts + within
        answer = self.post_answer[post]
        position = (self.post_masked[post] ^ masks[rep]).astype(np.uint64)
        valid = position < self.lengths[answer].astype(np.uint64)  # a foreign key's mask gives garbage
        col = self.offsets[answer[valid]] + position[valid].astype(np.int64)
        row = owner[rep[valid]]
        matrix = csr_matrix((np.ones(len(row), dtype=np.int32), (row, col)), shape=(len(vocab), max(self.total_positions, 1)))
        matrix.sum_duplicates()
        matrix.data[:] = 1
        return matrix, is_content


def lcs_bitparallel(masks: Sequence[int], length: int) -> int:
    """LCS of an answer of ``length`` words and a text given as, per text word, the bit mask of
    the answer positions it matches (Hyyroe's bit-vector algorithm; exact for any match
    relation). Text words matching nothing may be left out: they never change the result."""
    full = (1 << length) - 1
    v = full
    for m in masks:
        u = v & m
        v = ((v + u) | (v - u)) & full
    return length - v.bit_count()


def best_stretch(masks: Sequence[int], places: Sequence[int], length: int, span: float, stop_below: int = 0) -> tuple[int, int, int]:
    """(best LCS, stretch start, stretch end) over stretches of ``span * length`` content words
    of the text starting at every multiple of ``length``; ``places`` are the text content
    positions (ascending) of ``masks`` (only words matching something). A stretch holding
    fewer matching words than ``stop_below`` or than the best so far is skipped."""
    if not places:
        return 0, 0, 0
    stride = max(length, 1)
    width = max(int(math.ceil(span * stride)), 1)
    places_arr = np.asarray(places, dtype=np.int64)
    last = int(places_arr[-1])
    first_stretch = max(int(places_arr[0]) - width + 1, 0) // stride
    starts = np.arange(first_stretch, last // stride + 1, dtype=np.int64) * stride
    lows, highs = np.searchsorted(places_arr, starts), np.searchsorted(places_arr, starts + width)
    counts = highs - lows
    # A stretch's LCS is at most its matching words: visit the fullest first and stop once no
    # stretch left can reach the best (ties go to the earliest stretch, as a left-to-right scan).
    best, best_lo = 0, None
    for i in np.argsort(-counts, kind="stable").tolist():
        count = int(counts[i])
        if count < best or count <= stop_below - 1 or count == 0:
            break
        score = lcs_bitparallel(masks[int(lows[i]) : int(highs[i])], length)
        lo = int(starts[i])
        if score > best or (score == best and score > 0 and lo < best_lo):
            best, best_lo = score, lo
    best_lo = 0 if best_lo is None else best_lo
    return best, best_lo, best_lo + width


def edit_hits(index: Any, word_lists: Sequence[Sequence[str]], max_shared: int = 0) -> tuple[list[tuple], list[list[str]]]:
    """Raw hits ``(text, answer, "edits", score, "lcs", matched words, 0)`` of one batch (word
    lists: the texts' word-view tokens) and, with ``max_shared``, the text's matching words
    in the best stretch (runs of the text's words, in text order) per hit."""
    from scipy.sparse import csr_matrix

    settings, table = index.settings.edits, index.edits
    if not settings.enabled or not len(word_lists) or not table.total_positions:
        return [], []
    # every token's vocabulary index with C-level calls (dict.fromkeys, map): a generator over
    # the tokens cost a third of the detector
    tokens = list(chain.from_iterable(word_lists))
    vocab = list(dict.fromkeys(tokens))
    vocab_of = dict(zip(vocab, range(len(vocab))))
    vp, is_content = table.vocab_positions(vocab)
    if not vp.nnz:
        return [], []
    n = len(word_lists)
    lengths = np.fromiter(map(len, word_lists), dtype=np.int64, count=n)
    flat = np.fromiter(map(vocab_of.__getitem__, tokens), dtype=np.int64, count=len(tokens))
    starts = np.concatenate([[0], np.cumsum(lengths)])
    ids = [flat[starts[t] : starts[t + 1]] for t in range(n)]
    text_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
    tv = csr_matrix((np.ones(len(flat), dtype=np.int32), (text_of, flat)), shape=(n, len(vocab)))
    tv.sum_duplicates()
    tv.data[:] = 1
    tp = tv @ vp  # texts x answer positions
    tp.data[:] = 1
    n_answers = len(table.lengths)
    pa = csr_matrix((np.ones(table.total_positions, dtype=np.int32),
                     (np.arange(table.total_positions), np.repeat(np.arange(n_answers), table.lengths))),
                    shape=(max(table.total_positions, 1), n_answers))
    counts = (tp @ pa).tocoo()
    vpc = vp.tocsc()
    need = np.maximum(np.ceil(settings.threshold * table.lengths - 1e-9), 1).astype(np.int64)
    eligible = table.lengths >= settings.min_answer_words
    keep = (counts.data >= need[counts.col]) & eligible[counts.col]
    if not keep.any():
        return [], []
    pairs = sorted(zip(counts.row[keep].tolist(), counts.col[keep].tolist()))
    hits: list[tuple] = []
    spans: list[list[str]] = []
    content_of: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for t, a in pairs:
        if t not in content_of:
            mask = is_content[ids[t]]
            content_of[t] = (ids[t][mask], np.flatnonzero(mask))  # content vocab ids, their token positions
        seq, token_pos = content_of[t]
        lo_col, hi_col = int(table.offsets[a]), int(table.offsets[a + 1])
        length = hi_col - lo_col
        # The text words matching each of the answer's positions, from the answer's side: its
        # positions are few, the text's vocabulary may be a whole tokenizer's.
        word_mask: dict[int, int] = {}
        for col in range(lo_col, hi_col):
            for v in vpc.indices[vpc.indptr[col] : vpc.indptr[col + 1]].tolist():
                word_mask[v] = word_mask.get(v, 0) | (1 << (col - lo_col))
        matching = np.fromiter(word_mask, dtype=np.int64, count=len(word_mask))
        at = np.flatnonzero(np.isin(seq, matching))
        places = at.tolist()
        masks = [word_mask[v] for v in seq[at].tolist()]
        best, lo, hi = best_stretch(masks, places, length, settings.span, int(need[a]))
        score = best / length
        if best >= need[a] and score >= settings.threshold:
            hits.append((t, a, "edits", score, "lcs", best, 0))
            if max_shared:
                spans.append(_runs(word_lists[t], [int(token_pos[p]) for p in places if lo <= p < hi], max_shared))
            else:
                spans.append([])
    return hits, spans


def _runs(toks: Sequence[str], positions: Sequence[int], limit: int, gap: int = 2) -> list[str]:
    """The text's words around ``positions`` as passages: positions at most ``gap`` words
    apart join one passage (the function words between matched content words show too)."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p - runs[-1][1] <= gap:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return list(dict.fromkeys(" ".join(toks[lo : hi + 1]) for lo, hi in runs))[:limit]


class EditsDetector(Detector):
    name = "edits"
    settings_model = EditsSettings
    label = "edited copies: content words in order"
    shown = ("enabled", "threshold", "min_answer_words", "span")
    derived = ("version",)

    def enabled(self, settings) -> bool:
        return settings.edits.enabled

    def build(self, answers) -> dict[str, Any]:
        # per answer (content words, k x 2 array of (key, masked position)), ``answer_keys``
        return {"edit_keys": answer_keys(answers.hasher, answers.token_lists)}

    def derive(self, index: Any) -> None:
        index.edits = EditsTable(index.edit_keys, index.hasher)

    def record(self, settings) -> dict[str, Any]:
        return {**settings.edits.model_dump(mode="json"), "version": EDITS_VERSION}

    def check_derived(self, entry: dict[str, Any], source: str) -> None:
        if entry["version"] != EDITS_VERSION:
            raise InputError(f"{source}: guard edits detector version '{entry['version']}' is not this version's "
                             f"'{EDITS_VERSION}' (its keys would not match)")

    def scan(self, index: Any, batch: Batch, max_shared: int) -> tuple[list[RawHit], list[list[str]]]:
        if not index.settings.edits.enabled:
            return [], []
        hits, spans = edit_hits(index, batch.word_lists, max_shared)
        return hits, spans if max_shared else []

    def threshold(self, settings) -> float:
        return settings.edits.threshold

    def answer_grams(self, index: Any, answer: int) -> int:
        return index.edit_keys[answer][0]

    def sketch_entry(self, index: Any, answer: int) -> dict[str, Any]:
        content, pairs = index.edit_keys[answer]
        # (key, position XOR mask) pairs, sorted by key: without the key neither which keys
        # belong to one word nor where it stands can be told
        return {"content_words": content, "edit_keys": [f"{int(k):016x}{int(m):016x}" for k, m in pairs]}

    def read_sketch_entry(self, entry: dict[str, Any], settings) -> dict[str, Any]:
        pairs = [(int(h[:16], 16), int(h[16:], 16)) for h in entry["edit_keys"]]
        if any(len(h) != 32 for h in entry["edit_keys"]):
            raise ValueError("edit_keys entries are 32 hex digits")
        return {"edit_keys": (int(entry["content_words"]), np.array(pairs, dtype=np.uint64).reshape(-1, 2))}
