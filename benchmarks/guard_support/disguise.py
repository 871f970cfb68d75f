"""A seeded generator of disguised leaks: what an adversary does to slip a held-out answer past
the guard. The tests and ``benchmarks/guard_bench.py`` share it (test and benchmark support,
not the library: see ``guard_support``).

``disguise(kind, rng, answer, filler)`` returns a ``Plant``: one or more training records that
together carry ``answer``. ``filler(n_words)`` supplies innocent text to hide it in. Classes:

* character level (the letters stay, the code points around them change): ``verbatim``,
  ``zero_width``, ``soft_hyphen``, ``controls`` (Cc, NUL among them), ``format_chars`` (Cf:
  bidi controls, word joiners, tag characters), ``default_ignorable`` (variation selectors,
  Hangul fillers, combining grapheme joiner, Mongolian selectors), ``private_unassigned``
  (Co and Cn code points), ``homoglyphs`` (Cyrillic/Greek look-alike letters), ``compat_forms``
  (full-width and mathematical letters), ``combining_marks`` (accents added), ``case_punct``
  (case, punctuation and whitespace scrambled);
* layout: ``hyphen_broken`` (words broken by hyphens/dashes, also at line ends),
  ``spaces_removed``, ``odd_separators`` (words joined by symbols), ``html_nbsp``
  (``&nbsp;`` between words, tags inside words), ``html_escaped``, ``markdown``,
  ``embedded_2000`` (inside 2,000 words), ``pieces_in_record`` (cut into pieces of at least
  ``MIN_PIECE_LETTERS`` letters spread through one long text), ``pieces_across_records`` (such
  pieces inside other texts, one per record), ``halves_on_rows`` (each half its own record), ``mixed`` (several of the above
  at once);
* edited: ``reordered_clauses``, ``synonyms_15`` (about 15% of the words replaced).

Per-word edits at a given rate (``edit(kind, rng, text, rate)``, ``EDIT_KINDS``; the edits
detector's benchmark ``benchmarks/guard_edit_recall.py`` and tests): ``typo`` (one letter
changed, dropped, doubled or swapped with its neighbour), ``inserted_word`` (a random word
inserted after the word), ``function_word_swap`` (a function word replaced by another),
``tense_shift`` (tense or number shifted by rule: is/was, have/had, -ed/-s/-ing, plural -s),
each applied to ``round(rate x words)`` words chosen at random among those it applies to.

Multi-record plants (``grouped``) are caught only when their records form a group (one
author, one conversation or one file), as they do in a training source.
"""

from __future__ import annotations

import html
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

Filler = Callable[[int], str]


@dataclass(frozen=True)
class Plant:
    kind: str
    texts: list[str]
    edited: bool = False   # an edited copy (recall target 0.99) rather than the same letters (1.0)
    grouped: bool = False  # spread over several records

# Look-alike letters of other scripts (Cyrillic, Greek) that UTS #39 folds to Latin.
HOMOGLYPHS = {"a": "\u0430", "c": "\u0441", "e": "\u0435", "o": "\u043e", "p": "\u0440", "x": "\u0445", "y": "\u0443",
              "i": "\u0456", "s": "\u0455", "j": "\u0458", "h": "\u04bb", "A": "\u0391", "B": "\u0392", "E": "\u0395",
              "H": "\u0397", "I": "\u0399", "K": "\u039a", "M": "\u039c", "N": "\u039d", "O": "\u039f", "T": "\u03a4",
              "n": "\u0578", "v": "\u03bd"}
CONTROLS = ["\x00", "\x01", "\x02", "\x07", "\x08", "\x0e", "\x1b", "\x7f", "\x80", "\x9f"]
FORMAT_CHARS = ["\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202e", "\u2060", "\u2061", "\u2063",
                "\u2064", "\u2066", "\u2069", "\ufeff", "\U000e0041", "\U000e0020", "\U000e007f", "\u061c", "\u180e"]
DEFAULT_IGNORABLE = ["\ufe00", "\ufe0f", "\U000e0100", "\u034f", "\u115f", "\u1160", "\u3164", "\uffa0", "\u180b",
                     "\u17b4", "\u2065", "\ufff0"]
# Unassigned in every Unicode version the guard's libraries carry (U+0560, listed here before,
# is a letter since Unicode 11: inserting it is an edit, not an invisible code point).
PRIVATE_UNASSIGNED = ["\ue000", "\uf8ff", "\U000f0000", "\U0010fffd", "\u0378", "\u05ff", "\U0002fffe", "\ufdd0"]
DASHES = ["-", "\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2212", "\u2e3a", "-\n", "\u2010\n"]
SEPARATORS = ["\u00b7", "/", "_", ".", "\u2022", "|", "+", "~", "\u2219", ":"]
MARKS = ["\u0301", "\u0300", "\u0308", "\u0302", "\u0327", "\u030c", "\u0323", "\u0331"]
OTHER_WORDS = ["banana", "zeppelin", "quietly", "harbour", "lantern", "copper", "meadow", "violin", "granite", "orbit",
               "pepper", "saddle", "thimble", "walnut", "marble", "candle", "ribbon", "pillow", "tunnel", "juniper"]


def _fullwidth(ch: str) -> str:
    return chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch


def _math_bold(ch: str) -> str:
    if "a" <= ch <= "z":
        return chr(0x1D41A + ord(ch) - ord("a"))
    if "A" <= ch <= "Z":
        return chr(0x1D400 + ord(ch) - ord("A"))
    return ch


def _sprinkle(rng: random.Random, text: str, pool: list[str], rate: float = 0.35) -> str:
    """Insert code points from ``pool`` between letters of words."""
    out = []
    for i, ch in enumerate(text):
        out.append(ch)
        if ch.isalpha() and i + 1 < len(text) and text[i + 1].isalpha() and rng.random() < rate:
            out.append(rng.choice(pool))
    return "".join(out)


def _words_map(text: str, fn: Callable[[str], str]) -> str:
    return re.sub(r"\S+", lambda m: fn(m.group(0)), text)


# The smallest piece an adversary may cut and still be promised a catch: a passage of this
# many letters, the guard's documented resolution (``guard.fragments.min_piece``; docs/guard.md,
# "what the guard cannot see"). A shorter piece shares too little with its answer to tell it
# from ordinary language. Pieces are cut at word boundaries.
MIN_PIECE_LETTERS = 30


class TooShort(ValueError):
    """The answer cannot be cut into pieces of ``MIN_PIECE_LETTERS`` letters for this class."""


def _letter_counts(words: list[str]) -> list[int]:
    return [sum(ch.isalpha() for ch in w) for w in words]


def _valid_cut(counts: list[int], bounds: list[int]) -> bool:
    return all(b > a and sum(counts[a:b]) >= MIN_PIECE_LETTERS for a, b in zip(bounds, bounds[1:]))


def _even_bounds(counts: list[int], count: int) -> list[int]:
    """Word-boundary cut points that split the letters as evenly as possible into ``count``."""
    total, cumulative, bounds = sum(counts), 0, [0]
    for i, c in enumerate(counts):
        cumulative += c
        if len(bounds) < count and cumulative >= total * len(bounds) / count and i + 1 < len(counts):
            bounds.append(i + 1)
    return [*bounds, len(counts)]


def _cut(answer: str, count: int, rng: random.Random | None = None) -> list[str]:
    """``answer`` cut into up to ``count`` consecutive pieces (at least 2) of at least
    ``MIN_PIECE_LETTERS`` letters each: at random points with ``rng``, else evenly."""
    words = answer.split()
    counts = _letter_counts(words)
    for k in range(min(count, sum(counts) // MIN_PIECE_LETTERS), 1, -1):
        if rng is not None and len(words) > k:
            for _ in range(50):
                bounds = [0, *sorted(rng.sample(range(1, len(words)), k - 1)), len(words)]
                if _valid_cut(counts, bounds):
                    return [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]
        bounds = _even_bounds(counts, k)
        if len(bounds) == k + 1 and _valid_cut(counts, bounds):
            return [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]
    raise TooShort(f"an answer of {sum(counts)} letters cannot be cut into 2+ pieces of {MIN_PIECE_LETTERS}+ letters")


def _pieces(rng: random.Random, answer: str, count: int) -> list[str]:
    return _cut(answer, count, rng)


def _even_pieces(answer: str, count: int) -> list[str]:
    return _cut(answer, count)


# ----------------------------------------------------------------------------- classes


def _verbatim(rng, answer, filler):
    return [answer]


def _zero_width(rng, answer, filler):
    return [_sprinkle(rng, answer, ["\u200b"])]


def _soft_hyphen(rng, answer, filler):
    return [_sprinkle(rng, answer, ["\u00ad"])]


def _controls(rng, answer, filler):
    return [_sprinkle(rng, answer, CONTROLS)]


def _format_chars(rng, answer, filler):
    return [_sprinkle(rng, answer, FORMAT_CHARS)]


def _default_ignorable(rng, answer, filler):
    return [_sprinkle(rng, answer, DEFAULT_IGNORABLE)]


def _private_unassigned(rng, answer, filler):
    return [_sprinkle(rng, answer, PRIVATE_UNASSIGNED)]


def _homoglyphs(rng, answer, filler):
    return ["".join(HOMOGLYPHS[ch] if ch in HOMOGLYPHS and rng.random() < 0.6 else ch for ch in answer)]


def _compat_forms(rng, answer, filler):
    form = rng.choice([_fullwidth, _math_bold])
    return ["".join(form(ch) if rng.random() < 0.7 else ch for ch in answer)]


def _combining_marks(rng, answer, filler):
    return ["".join(ch + rng.choice(MARKS) if ch.isalpha() and rng.random() < 0.4 else ch for ch in answer)]


def _case_punct(rng, answer, filler):
    def word(w):
        w = "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in w)
        return w + rng.choice(["", "", ",", " ;", "!!", " -", "...", "\u201d"])

    return ["\u201c" + rng.choice(["  ", "\t", " \n "]).join(word(w) for w in answer.split()) + "?!"]


def _hyphen_broken(rng, answer, filler):
    def word(w):
        if len(w) < 4:
            return w
        cut = rng.randrange(2, len(w) - 1)
        return w[:cut] + rng.choice(DASHES) + w[cut:]

    return [_words_map(answer, word)]


def _spaces_removed(rng, answer, filler):
    return [re.sub(r"\s+", "", answer)]


def _odd_separators(rng, answer, filler):
    sep = rng.choice(SEPARATORS)
    return [sep.join(answer.split())]


def _html_nbsp(rng, answer, filler):
    words = [html.escape(w) for w in answer.split()]
    words = [f"<span>{w[:2]}</span>{w[2:]}" if len(w) > 3 and rng.random() < 0.3 else w for w in words]
    return ["<p>" + "&nbsp;".join(words) + "</p>"]


def _html_escaped(rng, answer, filler):
    text = html.escape(answer, quote=True)
    return ["".join(f"&#{ord(ch)};" if ch.isalpha() and rng.random() < 0.3 else ch for ch in text)]


def _markdown(rng, answer, filler):
    def word(w):
        r = rng.random()
        if r < 0.2:
            return f"**{w}**"
        if r < 0.35:
            return f"_{w}_"
        if r < 0.45:
            return f"`{w}`"
        if r < 0.5:
            return f"[{w}](https://example.org/x)"
        return w

    return ["> " + " ".join(word(w) for w in answer.split())]


def _embedded_2000(rng, answer, filler):
    return [f"{filler(1000)} {answer} {filler(1000)}"]


def _pieces_in_record(rng, answer, filler):
    parts = _pieces(rng, answer, 4)
    return [" ".join(f"{filler(rng.randint(20, 60))} {p}" for p in parts) + " " + filler(30)]


def _pieces_across_records(rng, answer, filler):
    return [f"{filler(rng.randint(10, 40))} {p} {filler(rng.randint(10, 40))}" for p in _even_pieces(answer, 3)]


def _halves_on_rows(rng, answer, filler):
    return _even_pieces(answer, 2)


def _mixed(rng, answer, filler):
    text = _homoglyphs(rng, answer, filler)[0]
    text = _sprinkle(rng, text, CONTROLS + FORMAT_CHARS + DEFAULT_IGNORABLE, 0.2)
    text = _hyphen_broken(rng, text, filler)[0]
    return [f"{filler(80)} {text} {filler(80)}"]


def _reordered_clauses(rng, answer, filler):
    clauses = [c.strip() for c in re.split(r"(?<=[.,;:!?])\s+", answer) if c.strip()]
    if len(clauses) < 2:
        words = answer.split()
        half = len(words) // 2
        clauses = [" ".join(words[:half]), " ".join(words[half:])]
    order = list(range(len(clauses)))
    while order == sorted(order):
        rng.shuffle(order)
    return [" ".join(clauses[i] for i in order)]


def _synonyms_15(rng, answer, filler):
    words = answer.split()
    count = max(1, round(0.15 * len(words)))
    for i in rng.sample(range(len(words)), count):
        words[i] = rng.choice(OTHER_WORDS)
    return [" ".join(words)]


CLASSES: dict[str, Callable[[random.Random, str, Filler], list[str]]] = {
    "verbatim": _verbatim, "zero_width": _zero_width, "soft_hyphen": _soft_hyphen, "controls": _controls,
    "format_chars": _format_chars, "default_ignorable": _default_ignorable, "private_unassigned": _private_unassigned,
    "homoglyphs": _homoglyphs, "compat_forms": _compat_forms, "combining_marks": _combining_marks,
    "case_punct": _case_punct, "hyphen_broken": _hyphen_broken, "spaces_removed": _spaces_removed,
    "odd_separators": _odd_separators, "html_nbsp": _html_nbsp, "html_escaped": _html_escaped, "markdown": _markdown,
    "embedded_2000": _embedded_2000, "pieces_in_record": _pieces_in_record,
    "pieces_across_records": _pieces_across_records, "halves_on_rows": _halves_on_rows, "mixed": _mixed,
    "reordered_clauses": _reordered_clauses, "synonyms_15": _synonyms_15,
}
EDITED = frozenset({"reordered_clauses", "synonyms_15"})
GROUPED = frozenset({"pieces_across_records", "halves_on_rows"})


CUT = frozenset({"pieces_in_record", "pieces_across_records", "halves_on_rows"})


# ----------------------------------------------------------------------------- per-word edits

# Closed-class words a copy can swap for one another (all of them are function words of the
# edits detector, ``edits.STOP_WORDS``; tested).
FUNCTION_WORDS = ["the", "a", "an", "this", "that", "these", "those", "some", "any", "each", "every", "my", "your",
                  "his", "her", "its", "our", "their", "of", "in", "on", "at", "by", "for", "with", "about", "into",
                  "from", "to", "over", "under", "and", "but", "or", "so", "because", "although", "while", "if",
                  "then", "than", "as", "it", "they", "we", "you", "he", "she", "i", "me", "him", "them", "us",
                  "is", "are", "was", "were", "be", "been", "can", "could", "will", "would", "may", "might",
                  "should", "must", "do", "does", "did", "have", "has", "had", "not", "very", "just", "also"]
_FUNCTION_SET = frozenset(FUNCTION_WORDS)
INSERT_WORDS = OTHER_WORDS + ["really", "actually", "honestly", "basically", "maybe", "totally", "window", "river",
                              "seven", "purple", "yesterday", "coffee", "engine", "planet", "garden", "silver"]
_IRREGULAR = {"is": "was", "was": "is", "are": "were", "were": "are", "has": "had", "have": "had", "had": "has",
              "do": "did", "does": "did", "did": "does", "can": "could", "could": "can", "will": "would",
              "would": "will", "feel": "felt", "felt": "feels", "make": "made", "made": "makes", "take": "took",
              "took": "takes", "give": "gave", "gave": "gives", "think": "thought", "thought": "thinks",
              "say": "said", "said": "says", "go": "went", "went": "goes", "get": "got", "got": "gets",
              "come": "came", "came": "comes", "know": "knew", "knew": "knows", "find": "found", "found": "finds",
              "tell": "told", "told": "tells", "leave": "left", "left": "leaves", "see": "saw", "saw": "sees"}
_WORD = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)
EDIT_KINDS = ("typo", "inserted_word", "function_word_swap", "tense_shift")
EDIT_RATES = (0.10, 0.20, 0.33)


def _case_like(template: str, word: str) -> str:
    return word.capitalize() if template[:1].isupper() else word


def _typo(rng: random.Random, core: str) -> str:
    letters = [i for i, ch in enumerate(core) if ch.isalpha()]
    if len(letters) < 2:
        return core
    i = rng.choice(letters)
    op = rng.choice(["change", "drop", "double", "swap"])
    if op == "change":
        new = rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c != core[i].lower()])
        return core[:i] + new + core[i + 1 :]
    if op == "drop":
        return core[:i] + core[i + 1 :]
    if op == "double":
        return core[:i] + core[i] + core[i:]
    j = i + 1 if i + 1 < len(core) and core[i + 1].isalpha() else i - 1
    a, b = min(i, j), max(i, j)
    if core[a] == core[b]:
        return core[:a] + core[a + 1 :]  # swapping equal letters changes nothing: drop one
    return core[:a] + core[b] + core[a] + core[b + 1 :]


def _shift(core: str) -> str | None:
    """The word with its tense or number shifted by rule, or None where no rule applies."""
    low = core.lower()
    if low in _IRREGULAR:
        return _case_like(core, _IRREGULAR[low])
    if not low.isalpha() or len(low) < 4 or low in _FUNCTION_SET:
        return None
    if low.endswith("ied"):
        return core[:-3] + "ies"
    if low.endswith("ed"):
        return core[:-2] + ("ing" if len(low) > 5 else "s")
    if low.endswith("ing") and len(low) > 5:
        return core[:-3] + "ed"
    if low.endswith("ies"):
        return core[:-3] + "ied"
    if low.endswith("s") and not low.endswith("ss"):
        return core[:-1]
    if low.endswith("y"):
        return core[:-1] + "ies"
    return core + ("es" if low.endswith(("sh", "ch", "x")) else "s")


def edit(kind: str, rng: random.Random, text: str, rate: float) -> str:
    """``text`` with ``round(rate x words)`` of its words edited as ``kind`` (``EDIT_KINDS``),
    the words chosen at random among those the kind applies to (all of them where fewer)."""
    if kind not in EDIT_KINDS:
        raise KeyError(f"unknown edit kind '{kind}' (known: {EDIT_KINDS})")
    words = text.split()
    parts = [_WORD.match(w).groups() for w in words]  # (leading punctuation, core, trailing)
    if kind == "typo":
        eligible = [i for i, (_, core, _) in enumerate(parts) if sum(ch.isalpha() for ch in core) >= 2]
    elif kind == "inserted_word":
        eligible = list(range(len(words)))
    elif kind == "function_word_swap":
        eligible = [i for i, (_, core, _) in enumerate(parts) if core.lower() in _FUNCTION_SET]
    else:
        eligible = [i for i, (_, core, _) in enumerate(parts) if _shift(core) is not None]
    count = min(round(rate * len(words)), len(eligible))
    chosen = set(rng.sample(eligible, count))
    out = []
    for i, (lead, core, trail) in enumerate(parts):
        if i not in chosen:
            out.append(words[i])
        elif kind == "typo":
            out.append(lead + _typo(rng, core) + trail)
        elif kind == "inserted_word":
            out.extend([words[i], rng.choice(INSERT_WORDS)])
        elif kind == "function_word_swap":
            new = rng.choice([w for w in FUNCTION_WORDS if w != core.lower()])
            out.append(lead + _case_like(core, new) + trail)
        else:
            out.append(lead + (_shift(core) or core) + trail)
    return " ".join(out)


def disguise(kind: str, rng: random.Random, answer: str, filler: Filler) -> Plant:
    """``answer`` disguised as ``kind`` (one of ``CLASSES``), as one or more training texts.

    Raises ``TooShort`` for a class that cuts the answer (``CUT``) when it has too few
    letters for two pieces of ``MIN_PIECE_LETTERS`` (``can_disguise`` says beforehand)."""
    if kind not in CLASSES:
        raise KeyError(f"unknown disguise class '{kind}' (known: {sorted(CLASSES)})")
    return Plant(kind, CLASSES[kind](rng, answer, filler), edited=kind in EDITED, grouped=kind in GROUPED)


def can_disguise(kind: str, answer: str) -> bool:
    """Whether ``answer`` is long enough for ``kind`` (only the cutting classes have a minimum)."""
    return kind not in CUT or _can_cut(answer)


def _can_cut(answer: str) -> bool:
    try:
        _cut(answer, 2)
    except TooShort:
        return False
    return True


def word_filler(texts: list[str], rng: random.Random) -> Filler:
    """A filler drawing consecutive words from ``texts`` (innocent training text)."""
    words = " ".join(texts).split()
    if not words:
        raise ValueError("word_filler needs some text")

    def fill(count: int) -> str:
        start = rng.randrange(len(words))
        return " ".join(words[(start + i) % len(words)] for i in range(count))

    return fill
