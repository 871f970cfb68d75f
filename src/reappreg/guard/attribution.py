"""Attribution: which held-out answers a hit's matched text is closest to, and by how much.

Held-out answers to one scenario share sentences (a core reframing in several answers, each
in its own frame), so a training text that carries one answer's core holds its siblings'
core too, and whichever sibling is shortest may be the only one over a detector's threshold.
A hit must therefore not name one answer where several explain the matched text equally.

For a hit of answer ``a`` on a text, the *matched text* ``M(a)`` is the set of the text's
letters (its letter view) covered by the letter windows it shares with ``a``. Every answer
``b`` is scored by how much of the matched text it shares too, ``|M(a) & M(b)|`` (never more
than ``|M(a)|``). The hit's ``closest`` are every answer that shares all of it, up to the
letter view's resolution: less than one window (``chars.n`` letters) short, which a chance
letter or two at a passage's edge can make (``a`` among them; two answers that match equally
are named together). ``separation`` is the share of the matched text that only those answers
hold: ``(|M(a)| - max |M(a) & M(b)|) / |M(a)|`` over the answers not among the closest (1.0
when no other answer shares any of it). A fragments hit's matched text is its pieces in every
contributing record. Where a text shares no letter window with ``a`` (an edited copy found by
its content words alone), its word shingles (``minhash.shingle_words``) measure the same, in
words; where it shares neither, the hit names ``a`` alone and its separation is not measured
(None).

Exact: the same gram keys and tables the detectors use, from held-out texts or a sketch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from reappreg.guard.hashing import _SHINGLE
from reappreg.guard.normalise import ascii_words, scan_views

if TYPE_CHECKING:
    from reappreg.guard.detector import Batch, DetectorIndex

MAX_COMPARED = 200  # answers compared per hit: those sharing most windows with the matched text


class _Text:
    """One text's matched windows, per kind (letters, shingles): the text's places of grams found
    in the held-out table and, for each (place, answer) that shares it, the pair (sorted by
    answer), computed once per text whatever the number of its hits."""

    def __init__(self, index: DetectorIndex, text: str, batch: Batch | None = None, at: int = 0) -> None:
        """``batch``: the scan's batch holding the text (at ``at``), whose keys are the text's own."""
        from reappreg.guard.hashing import FastHasher

        shingle_words = index.settings.minhash.shingle_words
        if batch is not None:
            keys, offsets = batch.letter_grams
            letter_keys = keys[offsets[at] : offsets[at + 1]]
            keys, offsets = batch.word_grams(shingle_words, _SHINGLE)
            shingle_keys = keys[offsets[at] : offsets[at + 1]]
        else:
            words, letter_view = scan_views(text)
            letter_keys, _ = index.hasher.letter_grams([letter_view], index.settings.chars.n)
            spec = [(shingle_words, _SHINGLE)]
            if isinstance(index.hasher, FastHasher):
                (shingle_keys, _), = index.hasher.grams_of_views([words], spec)
            else:  # a keyed sketch hasher takes token lists
                (shingle_keys, _), = index.hasher.grams_many([ascii_words(words) if isinstance(words, str) else words], spec)
        self.kinds = {"letters": _matched(index.letters, letter_keys, index.settings.chars.n),
                      "shingles": _matched(index.shingles, shingle_keys, shingle_words)}


def _matched(table, keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(place of each (place, answer) pair, its answer, per answer the start of its pairs, n)."""
    pos, matched = table.lookup(keys)
    places = np.flatnonzero(matched)
    rows = pos[places]
    by_gram = table.matrix  # held-out grams x answers, CSR
    counts = by_gram.indptr[rows + 1] - by_gram.indptr[rows]
    pair_place = np.repeat(places, counts)
    starts = np.repeat(by_gram.indptr[rows], counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    pair_answer = by_gram.indices[starts].astype(np.int64)
    order = np.argsort(pair_answer, kind="stable")
    pair_place, pair_answer = pair_place[order], pair_answer[order]
    bounds = np.searchsorted(pair_answer, np.arange(by_gram.shape[1] + 1))
    return pair_place, pair_answer, bounds, n


def _coverage(places: np.ndarray, n: int, lo: int, length: int) -> np.ndarray:
    """Boolean coverage of [lo, lo + length) by windows of ``n`` at ``places``."""
    starts = np.clip(places - lo, 0, length)
    ends = np.clip(places - lo + n, 0, length)
    marks = np.bincount(starts, minlength=length + 1) - np.bincount(ends, minlength=length + 1)
    return np.cumsum(marks[:-1]) > 0


def attribute(index: DetectorIndex, texts: Sequence[str], requests: Sequence[tuple[Sequence[int], int]],
              batch: Batch | None = None) -> list[tuple[list[str], float | None]]:
    """For each (text indexes, answer index) request: (the answer ids closest to the matched
    text, sorted; the separation) (module docstring). ``batch``: the scan's ``Batch`` of
    ``texts``, whose gram keys are used instead of hashing the texts again."""
    cache: dict[int, _Text] = {}
    out: list[tuple[list[str], float | None]] = []
    for text_ids, answer in requests:
        for t in text_ids:
            if t not in cache:
                cache[t] = _Text(index, texts[t], batch, t)
        result = None
        for kind in ("letters", "shingles"):
            result = _attribute_kind(index, [cache[t].kinds[kind] for t in text_ids], answer)
            if result is not None:
                break
        out.append(result or ([index.answers[answer].answer_id], None))
    return out


def n_of(found: Sequence[tuple]) -> int:
    return int(found[0][3]) if found else 1


def _attribute_kind(index: DetectorIndex, found: Sequence[tuple], answer: int) -> tuple[list[str], float] | None:
    """``attribute`` on one kind of gram (None: the texts share none of ``answer``'s)."""
    own = 0
    shared: dict[str, int] = {}
    for pair_place, pair_answer, bounds, n in found:
        mine = pair_place[bounds[answer] : bounds[answer + 1]]
        if not len(mine):
            continue
        lo = int(mine.min())
        length = int(mine.max()) + n - lo
        cover_a = _coverage(mine, n, lo, length)
        own += int(cover_a.sum())
        inside = (pair_place + n > lo) & (pair_place < lo + length) & (pair_answer != answer)
        near_place, near_answer = pair_place[inside], pair_answer[inside]
        compared, counts = np.unique(near_answer, return_counts=True)
        if len(compared) > MAX_COMPARED:
            compared = compared[np.argsort(-counts, kind="stable")[:MAX_COMPARED]]
        cuts = np.searchsorted(near_answer, compared), np.searchsorted(near_answer, compared, side="right")
        in_text: dict[str, int] = {}  # per answer id: its best variant in this text
        for b, first, last in zip(compared.tolist(), *cuts):
            together = int((cover_a & _coverage(near_place[first:last], n, lo, length)).sum())
            answer_id = index.answers[b].answer_id
            in_text[answer_id] = max(in_text.get(answer_id, 0), together)
        for answer_id, together in in_text.items():
            shared[answer_id] = shared.get(answer_id, 0) + together
    if not own:
        return None
    me = index.answers[answer].answer_id
    shared.pop(me, None)  # another variant (tokenizer view) of the same answer
    tie = own - n_of(found) + 1  # less than one window short of all of it: as close
    closest = sorted({me, *(b for b, c in shared.items() if c >= tie)})
    others = [c for b, c in shared.items() if c < tie]
    return closest, round((own - max(others, default=0)) / own, 6)
