"""Honest texts built from stock phrasing: what the guard must let through.

Stock phrases are *measured*, never listed: the word n-grams (4 to 12 words) that occur in at
least ``min_docs`` documents of a corpus (the held-out answers to several scenarios, or an
honest reference corpus such as Sharma et al.'s reframes), maximal ones only (a phrase inside
a longer stock phrase with the same documents is dropped). An honest text strings two to four
of them together with its own words in between (consecutive words of other honest texts):
the way people write with common phrasing about their own situation. None is a copy of a
held-out answer, so every flag on them is a false positive.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence

_WORD = re.compile(r"[A-Za-z']+")


def stock_phrases(docs: Sequence[str], *, min_docs: int = 3, lengths: tuple[int, int] = (4, 12),
                  groups: Sequence[str] | None = None, min_groups: int = 1, limit: int = 300) -> list[str]:
    """The word n-grams of ``lengths`` words found in >= ``min_docs`` documents (and, with
    ``groups``, in documents of >= ``min_groups`` distinct groups: answers to several
    scenarios), maximal, most documents first."""
    found: dict[tuple[str, ...], set[int]] = defaultdict(set)
    for d, doc in enumerate(docs):
        words = _WORD.findall(doc.lower())
        for n in range(lengths[0], lengths[1] + 1):
            for i in range(len(words) - n + 1):
                found[tuple(words[i : i + n])].add(d)
    common = {g: ds for g, ds in found.items() if len(ds) >= min_docs
              and (groups is None or len({groups[d] for d in ds}) >= min_groups)}

    def inside_longer(gram: tuple[str, ...], docs_of: set[int]) -> bool:
        """Whether a longer common phrase with the same documents holds this one."""
        n = len(gram)
        for other, other_docs in common.items():
            if len(other) > n and other_docs == docs_of and any(other[i : i + n] == gram for i in range(len(other) - n + 1)):
                return True
        return False

    ranked = sorted(common.items(), key=lambda kv: (-len(kv[1]), -len(kv[0]), kv[0]))
    out = [" ".join(g) for g, ds in ranked if not inside_longer(g, ds)]
    return out[:limit]


def stock_texts(rng: random.Random, phrases: Sequence[str], own_texts: Sequence[str], count: int, *,
                per_text: tuple[int, int] = (2, 4), own_words: tuple[int, int] = (4, 25)) -> list[str]:
    """``count`` honest texts: ``per_text`` stock phrases each, with runs of ``own_words``
    consecutive words of ``own_texts`` before, between and after them."""
    words = " ".join(own_texts).split()
    if not phrases or not words:
        raise ValueError("stock_texts needs stock phrases and some honest text")

    def own() -> str:
        k = rng.randint(*own_words)
        start = rng.randrange(len(words))
        return " ".join(words[(start + i) % len(words)] for i in range(k))

    texts = []
    for _ in range(count):
        chosen = rng.sample(list(phrases), min(rng.randint(*per_text), len(phrases)))
        parts = [own()]
        for phrase in chosen:
            parts += [phrase, own()]
        texts.append(" ".join(parts))
    return texts
