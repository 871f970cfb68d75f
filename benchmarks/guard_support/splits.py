"""A seeded generator of answers split over records: the assembly attack on the guard.

One held-out answer is cut into ``pieces`` consecutive pieces (1 to 6; at word boundaries,
as even in letters as the words allow, or at its clause boundaries), each piece buried in
``filler`` words of honest text (0 to 200, split at random before and after it), one piece
per record. The records are then placed in a training file among honest records:

* ``adjacent``: one after another;
* ``shuffled``: one after another, in random order;
* ``interleaved``: with honest records between them, all within ``span`` records;
* ``author``: anywhere in the file, the records naming one ``author_id`` (a grouping the
  input declares).

A piece is in scope when its own content reaches the guard's stated bound,
``fragments.min_piece`` letters, counted as the guard counts it (``piece_content``: the
letters the piece shares with its answer times their stock weight): a shorter piece, or one
that is only the answers' stock phrasing (a closer every answer uses), is out of scope.
Recall is reported per class over every split and over the splits' in-scope pieces.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Filler = Callable[[int], str]
PLACEMENTS = ("adjacent", "shuffled", "interleaved", "author")
FILLER_WORDS = (0, 40, 200)


@dataclass
class Split:
    answer: int                     # index of the answer in the held-out list
    pieces: list[str]
    texts: list[str]                # one record each: a piece in its filler
    placement: str
    filler: int
    records: list[int] = field(default_factory=list)  # where the records ended up in the file

    @property
    def shortest_piece(self) -> int:
        return min(sum(ch.isalpha() for ch in p) for p in self.pieces)


def cut(answer: str, pieces: int, rng: random.Random | None = None, by_clause: bool = False) -> list[str]:
    """``answer`` in ``pieces`` consecutive pieces at word boundaries (fewer where it has fewer
    words): by letters as evenly as the words allow, or (``by_clause``) at the clause
    boundaries (after , ; : . ! ?) nearest to even cuts."""
    words = answer.split()
    pieces = max(1, min(pieces, len(words)))
    letters = [sum(ch.isalpha() for ch in w) for w in words]
    total = sum(letters) or 1
    ends = []
    running = 0
    for i, n in enumerate(letters):
        running += n
        ends.append(running)
    bounds = [0]
    clause_ends = [i + 1 for i, w in enumerate(words[:-1]) if re.search(r"[,;:.!?]$", w)]
    for k in range(1, pieces):
        target = total * k / pieces
        candidates = [b for b in clause_ends if b > bounds[-1]] if by_clause else []
        if not candidates:
            candidates = list(range(bounds[-1] + 1, len(words) - (pieces - k) + 1))
        if not candidates:
            break
        bounds.append(min(candidates, key=lambda b: abs(ends[b - 1] - target)))
    bounds.append(len(words))
    return [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def bury(rng: random.Random, piece: str, filler: Filler, words: int) -> str:
    """``piece`` with ``words`` filler words split at random before and after it."""
    before = rng.randint(0, words)
    parts = [filler(before) if before else "", piece, filler(words - before) if words - before else ""]
    return " ".join(p for p in parts if p)


def split_answer(rng: random.Random, answer_index: int, answer: str, pieces: int, filler_words: int,
                 placement: str, filler: Filler, by_clause: bool = False) -> Split:
    """One split of an answer: its pieces each buried in ``filler_words`` of filler (give or take
    a fifth, so record lengths vary)."""
    parts = cut(answer, pieces, rng, by_clause)
    texts = [bury(rng, p, filler, max(0, round(filler_words * rng.uniform(0.8, 1.2)))) for p in parts]
    return Split(answer_index, parts, texts, placement, filler_words)


def place(rng: random.Random, honest: Sequence[str], splits: Sequence[Split], span: int) -> tuple[list[str], list[str | None]]:
    """A training file: the honest records and every split's records placed as its placement
    says; returns (texts, author per record: None for honest records, one id per ``author`` split).
    Each split's ``records`` is set to where its records ended up. ``author`` splits go anywhere
    (one record at a time); the others stay together as placed (an ``interleaved`` split's
    records, with the records between them, within ``span`` records)."""
    # the stream the other splits are placed into: honest records and the author splits' records
    stream: list[tuple[str, str | None, Split | None, int]] = [(t, None, None, -1) for t in honest]
    for k, split in enumerate(splits):
        if split.placement == "author":
            for i, text in enumerate(split.texts):
                stream.insert(rng.randrange(len(stream) + 1), (text, f"adv-{k}", split, i))
    anchored = sorted((rng.randrange(len(stream) + 1), k) for k, s in enumerate(splits) if s.placement != "author")
    slots: list[tuple[str, str | None, Split | None, int]] = []
    at = 0
    for anchor, k in anchored:
        split = splits[k]
        slots += stream[at : max(anchor, at)]
        at = max(anchor, at)
        order = list(range(len(split.texts)))
        if split.placement == "shuffled":
            rng.shuffle(order)
        gaps = [0] * len(order)
        if split.placement == "interleaved" and len(order) > 1:
            for _ in range(max(span - len(order), 0)):  # honest records between the pieces, within span
                if rng.random() < 0.5:
                    gaps[rng.randrange(len(order) - 1)] += 1
        for i, gap in zip(order, gaps):
            slots.append((split.texts[i], None, split, i))
            slots += stream[at : at + gap]
            at += len(stream[at : at + gap])
    slots += stream[at:]
    for split in splits:
        split.records = [-1] * len(split.texts)
    for row, (_, _, split, i) in enumerate(slots):
        if split is not None:
            split.records[i] = row
    return [t for t, *_ in slots], [a for _, a, *_ in slots]


def piece_content(index, piece: str, answer: int) -> float:
    """The piece's letters inside windows it shares with held-out answer ``answer`` (an index
    into ``index.answers``), times their mean stock weight: what the guard counts of it."""
    import numpy as np

    from reappreg.guard.containment import letters_per_text
    from reappreg.guard.normalise import scan_views

    n = index.settings.chars.n
    keys, _ = index.hasher.letter_grams([scan_views(piece)[1]], n)
    pos, matched = index.letters.lookup(keys)
    places = np.flatnonzero(matched)
    if not len(places):
        return 0.0
    mine = np.asarray(index.letters.matrix[pos[places]][:, answer].todense()).ravel() > 0
    places = places[mine]
    if not len(places):
        return 0.0
    _, letters = letters_per_text(np.zeros(len(places), dtype=np.int64), places, n)
    return float(letters.sum()) * float(index.letters.weights[pos[places]].mean())
