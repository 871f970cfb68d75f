"""Normalisation by Unicode property: what makes "the same letters" compare equal.

Every detector sees a text only through this module (version ``NORMALISATION``, recorded in
the certificate and the sketch; a check refuses a certificate or sketch made with another
version). Two views come out of one text:

* the **word view** (``tokens``): readable word tokens, used by the word n-gram and MinHash
  detectors and shown in reports;
* the **letter view** (``letters``): the UTS #39 confusable skeleton of those words with every
  non-letter removed, one string without spaces, used by the character n-gram detectors.
  Removed spaces, split words and odd separators cannot hide a copy from it.

The steps, in order (``fold``):

0. Bidi overrides: a text whose display order differs (a run under U+202E) is checked as
   stored and as displayed.
1. HTML: entities decoded to a fixpoint (``&amp;nbsp;`` is a space), comments removed in
   one linear pass (an unclosed ``<!--`` to the end, as a browser hides it), tags removed
   with quoted attribute values kept inside the tag (block tags become a space, inline tags
   nothing); markdown links keep their text, emphasis/code marks (``* _ ~ ` ``) are deleted.
2. Invisible code points are deleted by property, not by a list: general categories Cc
   (controls, NUL among them), Cf (format: zero-width, bidi, soft hyphen, tags), Cs (lone
   surrogates), Co (private use), Cn (unassigned) and every Default_Ignorable_Code_Point
   (variation selectors, Hangul fillers, combining grapheme joiner, ...). Whitespace
   controls (tab, newlines, the ASCII separators, NEL) are word boundaries instead.
3. NFKD (compatibility forms: full-width letters, ligatures, NBSP, math alphanumerics),
   every combining mark (category M) removed, THEN case folding (a mark that folds to a
   letter, U+0345, is gone first), decomposed and marks removed again.
4. Apostrophes are deleted (``don't`` = ``dont``); a dash of any kind (category Pd, minus)
   between two letters, or at a line end before a letter, is deleted (``ans-wer`` and
   ``ans-\\nwer`` are ``answer``); symbols whose confusable skeleton is a letter (``|`` for
   ``l``) become that letter.
5. Words are the runs of letters and digits; everything else is a boundary.

Confusables: each word's skeleton is computed with ICU's ``SpoofChecker.getSkeleton``, the
Unicode Consortium's own implementation of UTS #39 (data from confusables.txt of ICU's
Unicode version), through ``pyicu-wheels`` (PyICU, the maintained ICU binding, shipped as
self-contained wheels so no compiler or system ICU is needed). A Cyrillic ``а`` or a Greek
``ο`` in a Latin word therefore hashes like the Latin letter. Skeletons are cached per
distinct word, so they cost one ICU call per vocabulary entry, not per occurrence.

What has more than one reading (escapes, LaTeX and BBCode, transliteration, leetspeak) is
not folded here but checked as a view beside the text (``decode``). What this cannot fold:
translation and spelling changes; those are edits, left to the near-duplicate detector and
the semantic report.
"""

from __future__ import annotations

import contextlib
import html
import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

import icu
import numpy as np
import regex

from reappreg.guard.decode import DECODING

# The decoding views (``decode``) are part of what a certificate or sketch was made with.
NORMALISATION = (
    f"reappreg-guard-norm/v4;html(linear-comments,quoted-attrs)+markdown;bidi-overrides-applied;"
    f"drop=Cc,Cf,Cs,Co,Cn,DI;nfkd-drop-M-casefold-nfkd-drop-M;intraword-dash;"
    f"uts39-skeleton=icu{icu.ICU_VERSION}/unicode{icu.UNICODE_VERSION};python-unicode{unicodedata.unidata_version};"
    f"regex{regex.__version__};{DECODING}"
)

# Whitespace controls separate words; every other Cc/Cf/Cs/Co/Cn/DI code point is deleted.
_WHITESPACE_CONTROLS = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85"
_INVISIBLE = regex.compile(
    r"[[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Default_Ignorable_Code_Point}]--[" + _WHITESPACE_CONTROLS + r"]]+",
    flags=regex.V1,
)
_MARKS = regex.compile(r"\p{M}+")
# A tag: its attributes may hold '>' inside quotes (an attribute value never ends the tag).
# The alternatives start with distinct characters and every repeat is bounded, so a match
# attempt costs at most a few thousand steps wherever it starts: linear in the text.
_TAG = regex.compile(r"<\s*(/?)\s*([A-Za-z][A-Za-z0-9]*)\b(?:[^<>\"']|\"[^\"]{0,2000}\"|'[^']{0,2000}'){0,2000}>")
_RLO, _LRO, _PDF = "\u202e", "\u202d", "\u202c"
_MAX_BIDI_DEPTH = 125  # Unicode's max_depth for embeddings and overrides (UAX #9)
_BLOCK_TAGS = {"p", "br", "div", "li", "ul", "ol", "tr", "td", "th", "table", "h1", "h2", "h3", "h4", "h5", "h6",
               "blockquote", "pre", "hr", "section", "article", "header", "footer", "dd", "dt", "dl"}
_MD_LINK = regex.compile(r"!?\[([^\[\]]*)\]\([^()\s]*(?:\s+\"[^\"]*\")?\)")
_MD_MARKS = str.maketrans("", "", "*_~`")
_APOSTROPHES = "'\u2019\u2018\u02bc\u02b9\u0060\u00b4\u2032\uff07\u02bb\u02bd"
_DELETE_APOSTROPHES = str.maketrans("", "", _APOSTROPHES)
# A dash between letters, or ending a line before a letter (hyphenation), joins the word.
_INTRAWORD_DASH = regex.compile(r"(?<=\p{L})[\p{Pd}\u2212]+(?:[ \t]*\n\s*)?(?=\p{L})")
# Letters and digits of any script (the stdlib engine: faster than ``regex`` for this).
_TOKEN = re.compile(r"[^\W_]+")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")
_ASCII_INTRAWORD_DASH = re.compile(r"(?<=[a-z])-+(?:[ \t]*\n\s*)?(?=[a-z])")


def _spoof_checker():
    checker = getattr(_spoof_checker, "instance", None)
    if checker is None:
        checker = _spoof_checker.instance = icu.SpoofChecker()
    return checker


def _icu_skeleton(text: str) -> str:
    return _spoof_checker().getSkeleton(0, text)  # the type argument is ignored since ICU 58


@lru_cache(maxsize=1)
def _symbol_letters() -> dict[int, str]:
    """Non-alphanumeric code points whose confusable skeleton is letters (e.g. ``|`` -> ``l``).

    Scanned once over the BMP and the SMP (where every such symbol lives), one ICU call per
    non-alphanumeric code point.
    """
    table: dict[int, str] = {}
    for cp in range(0x20, 0x20000):
        ch = chr(cp)
        if ch.isalnum() or 0xD800 <= cp <= 0xDFFF or unicodedata.category(ch) in ("Cn", "Co", "Cc", "Cf", "Zs"):
            continue
        if unicodedata.category(ch) == "Pd":
            continue  # dashes are word boundaries or join a word (step 4), never letters
        skel = _MARKS.sub("", unicodedata.normalize("NFKD", _icu_skeleton(ch)).casefold())
        # Only cased letters (a symbol standing in for a Latin/Greek/Cyrillic... letter), so
        # e.g. a dash never becomes a length mark.
        if skel and skel != ch and all(unicodedata.category(c) == "Ll" for c in skel):
            table[cp] = skel
    ascii_part = {chr(cp): v for cp, v in table.items() if cp < 0x80}
    if ascii_part != {"|": "l"}:  # the ASCII fast path (``_symbols_to_letters``) assumes exactly this
        raise RuntimeError(f"guard normalisation: ICU's ASCII symbol skeletons changed to {ascii_part}; update the fast path")
    return table


_ASCII_DELETE = bytes(cp for cp in range(0x20) if chr(cp) not in _WHITESPACE_CONTROLS) + b"\x7f*_~`'"


def _strip_comments(text: str) -> str:
    """HTML comments removed in one left-to-right pass (linear: each character is looked at
    once). An unclosed ``<!--`` hides the rest of the text from a browser, so it is removed
    to the end, as a browser would not show it either."""
    if "<!--" not in text:
        return text
    out, start = [], 0
    while True:
        opened = text.find("<!--", start)
        if opened < 0:
            out.append(text[start:])
            return "".join(out)
        out.append(text[start:opened])
        closed = text.find("-->", opened + 4)
        if closed < 0:
            return "".join(out)
        start = closed + 3


_BIDI_CONTROL = re.compile(f"[{_RLO}{_LRO}{_PDF}]")


def apply_bidi_overrides(text: str) -> str:
    """Characters inside a right-to-left override (U+202E ... U+202C) in the order they are
    displayed: reversed, with a nested run kept as one unit in its own display order (UAX #9,
    rule L2, for explicit overrides). Nesting is bounded by UAX #9's depth: linear time. The
    text is walked from one control that matters to the next (at the depth limit only a PDF
    matters: further overrides are characters), a run at a time; a run inside a right-to-left
    override is reversed as it is put on the stack."""
    if _RLO not in text and _LRO not in text:
        return text
    stack: list[tuple[str, list[str]]] = [("", [])]

    def close() -> None:
        kind, items = stack.pop()
        stack[-1][1].append("".join(reversed(items) if kind == _RLO else items))

    def put(run: str) -> None:
        if run:
            stack[-1][1].append(run[::-1] if stack[-1][0] == _RLO else run)

    at = 0
    while at < len(text):
        if len(stack) <= _MAX_BIDI_DEPTH:
            found = _BIDI_CONTROL.search(text, at)
            next_at = found.start() if found else -1
        else:
            next_at = text.find(_PDF, at)
        if next_at < 0:
            put(text[at:])
            break
        control = text[next_at]
        if control == _PDF and len(stack) == 1:
            put(text[at : next_at + 1])  # a PDF that closes nothing is a character
        else:
            put(text[at:next_at])
            if control == _PDF:
                close()
            else:
                stack.append((control, []))
        at = next_at + 1
    while len(stack) > 1:  # an override closes at the end of the text (of the paragraph)
        close()
    return "".join(stack[0][1])


def _with_display_order(text: str) -> str:
    """The text as stored AND as displayed, when an override makes them differ: a copy hidden
    in either order is checked (a stray override reverses a stored copy on screen)."""
    displayed = apply_bidi_overrides(text)
    return text if displayed == text else f"{text}\n{displayed}"


def _strip_markup(text: str) -> str:
    text = _with_display_order(text)
    if "&" in text:
        for _ in range(4):  # double-escaped text (&amp;nbsp;) decodes in two rounds
            decoded = html.unescape(text)
            if decoded == text:
                break
            text = decoded
    if "<" in text:
        text = _strip_comments(text)
        text = _TAG.sub(lambda m: " " if (m.group(2) or "").lower() in _BLOCK_TAGS else "", text)
    if "](" in text:
        text = _MD_LINK.sub(r"\1", text)
    return text


def _fold_ascii(stripped: str) -> str:
    """Steps 2-4 on ASCII text whose markup is stripped: the same result as ``_fold_unicode``,
    faster (ASCII is NFKD-invariant, has no marks, casefold is lower; tests check the
    equality on random ASCII)."""
    core = stripped.encode("ascii").translate(None, _ASCII_DELETE).decode("ascii").lower()
    return _ASCII_INTRAWORD_DASH.sub("", core) if "-" in core else core


# Per text, what its normalisation made, while ``shared_normalisation`` is active (else None).
_MEMO: dict[str, dict[str, object]] | None = None


@contextlib.contextmanager
def shared_normalisation() -> Iterator[None]:
    """Within: each distinct text is normalised once, whatever asks for it (the scan's views,
    the detectors' shared passages, the attribution). The results are those of the functions
    without it; they are kept until the outermost scope ends (one batch of the scan)."""
    global _MEMO
    outer = _MEMO
    if outer is None:
        _MEMO = {"core": {}, "views": {}, "tokens": {}, "letter_tokens": {}}
    try:
        yield
    finally:
        _MEMO = outer


def _remembered(kind: str, text: str, compute):  # noqa: ANN001, ANN202
    memo = _MEMO
    if memo is None:
        return compute(text)
    found = memo[kind].get(text)
    if found is None:
        found = memo[kind][text] = compute(text)
    return found


def _folded(text: str) -> tuple[bool, str]:
    """(whether the text without markup is ASCII, steps 1-4 without the symbol-to-letter step)."""
    return _remembered("core", text, _fold_core_of)


def _fold_core_of(text: str) -> tuple[bool, str]:
    stripped = _strip_markup(text)
    if stripped.isascii():  # the common case
        return True, _fold_ascii(stripped)
    return False, _fold_unicode(stripped)


def _fold_core(text: str) -> str:
    """Steps 1-4 without the symbol-to-letter step."""
    return _folded(text)[1]


def _fold_unicode(text: str) -> str:
    text = _INVISIBLE.sub("", text)
    # Marks go BEFORE case folding: a mark that folds to a letter (U+0345 -> Greek iota) must
    # not become one. Case folding can yield decomposable sequences: decompose, drop again.
    # Marks are dropped before NFKD too: NFKD orders a run of combining marks by class with a
    # quadratic sort, so a megabyte of marks after one letter would take minutes.
    text = _MARKS.sub("", unicodedata.normalize("NFKD", _MARKS.sub("", text))).casefold()
    text = unicodedata.normalize("NFKD", text)
    text = _INVISIBLE.sub("", _MARKS.sub("", text))
    text = text.translate(_DELETE_APOSTROPHES).translate(_MD_MARKS)
    return _INTRAWORD_DASH.sub("", text)


def _symbols_to_letters(folded: str) -> str:
    if folded.isascii():
        return folded.replace("|", "l") if "|" in folded else folded
    return folded.translate(_symbol_letters())


def fold(text: str) -> str:
    """The normalised text of the word view (steps 1-4), before splitting into words."""
    return _symbols_to_letters(_fold_core(text))


def fold_general(text: str) -> str:
    """``fold`` without the ASCII fast path (the reference the fast path is tested against)."""
    return _fold_unicode(_strip_markup(text)).translate(_symbol_letters())


def _words(folded: str) -> list[str]:
    return ascii_words(folded) if folded.isascii() else _TOKEN.findall(folded)


def tokens(text: str) -> list[str]:
    """The readable word tokens of ``text`` (what reports show)."""
    if _MEMO is None:
        return _words(fold(text))
    # the word view's tokens (``text_views``: the same as ``_words(fold(text))``)
    return _remembered("tokens", text, lambda t: _view_words(scan_views(t)))


def _view_words(views: tuple[str | list[str], str]) -> list[str]:
    return ascii_words(views[0]) if isinstance(views[0], str) else views[0]


def text_views(text: str) -> tuple[list[str], str]:
    """(word tokens, letter view) of ``text`` from one pass of normalisation.

    The letter view skips the symbol-to-letter step: a ``|`` standing in for ``l`` is folded
    in the word view, a ``|`` standing between words is dropped from the letter view, so
    neither use of a symbol hides a copy from both views.
    """
    words, letter_view = scan_views(text)
    return (ascii_words(words) if isinstance(words, str) else words), letter_view


def scan_views(text: str) -> tuple[str | list[str], str]:
    """``text_views`` for the scan: (words, letter view), where words is the folded ASCII
    word view as one string (its words are the runs of ``[a-z0-9]``; ``hashing.FastHasher``
    tokenises it vectorised) or, for other text, the token list."""
    return _remembered("views", text, _scan_views)


def _scan_views(text: str) -> tuple[str | list[str], str]:
    was_ascii, core = _folded(text)
    if was_ascii:
        return (core.replace("|", "l") if "|" in core else core), _ascii_letter_view(core)
    word_view = _symbols_to_letters(core)
    toks = _words(word_view)
    letter_toks = _remembered("letter_tokens", text, lambda _: toks if word_view == core else _words(core))
    return toks, letters(letter_toks)


# Every byte but ``[a-z0-9]`` to a space: the runs ``_ASCII_TOKEN`` finds are then the
# whitespace-separated parts (one C-level split, several times faster than ``findall``).
_ASCII_NON_WORD_TO_SPACE = bytes(cp if chr(cp) in "abcdefghijklmnopqrstuvwxyz0123456789" else 0x20 for cp in range(256))


def ascii_words(word_view: str) -> list[str]:
    """The tokens of a folded ASCII word view (``scan_views``): ``_ASCII_TOKEN.findall``."""
    if not word_view.isascii():
        return _ASCII_TOKEN.findall(word_view)
    return word_view.encode("ascii").translate(_ASCII_NON_WORD_TO_SPACE).decode("ascii").split()


def text_views_general(text: str) -> tuple[list[str], str]:
    """``text_views`` without the ASCII fast path (the reference the fast path is tested against)."""
    core = _fold_unicode(_strip_markup(text))
    word_view = core.translate(_symbol_letters())
    toks = _TOKEN.findall(word_view)
    return toks, letters(toks if word_view == core else _TOKEN.findall(core))


def letter_tokens(text: str) -> list[str]:
    """The words the letter view is made of (``text_views``), for reporting its passages."""
    return _remembered("letter_tokens", text, lambda t: _words(_fold_core(t)))


def normalise(text: str) -> str:
    """The normalised text: its tokens joined by single spaces."""
    return " ".join(tokens(text))


@lru_cache(maxsize=1 << 20)
def skeleton(token: str) -> str:
    """The UTS #39 skeleton of one word token, case-folded, marks removed (what is hashed)."""
    skel = _icu_skeleton(token)
    if skel.isascii():
        return skel.lower()
    return _MARKS.sub("", unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", skel).casefold()))


@lru_cache(maxsize=1)
def _ascii_letters() -> dict[int, str | None]:
    """str.translate table: the letter view of folded ASCII text in one call.

    The UTS #39 skeleton maps code point by code point (``m`` -> ``rn``, ``0`` -> ``o``), so
    for ASCII the letters of a word's skeleton are the concatenated letters of its
    characters' skeletons; what is not a word character (only lower-case letters and
    digits remain after folding) has no letters. Equal to ``letters(words)`` (tested).
    """
    table: dict[int, str | None] = {cp: None for cp in range(128)}
    for ch in "abcdefghijklmnopqrstuvwxyz0123456789":
        table[ord(ch)] = _letters_of(ch)
    return table


@lru_cache(maxsize=1)
def _ascii_letter_steps() -> tuple[tuple[tuple[str, str], ...], bytes, bytes]:
    """``_ascii_letters`` as C-speed string operations: the few characters whose skeleton has
    several letters are replaced first (``str.replace``), then one ``bytes.translate`` maps
    the one-letter ones and deletes the rest."""
    table = _ascii_letters()
    multi = tuple((chr(cp), v) for cp, v in table.items() if v is not None and len(v) > 1)
    mapping = bytearray(range(256))
    for cp, v in table.items():
        if v is not None and len(v) == 1:
            mapping[cp] = ord(v)
    keep = {cp for cp, v in table.items() if v is not None and len(v) == 1}
    # the letters a replacement writes must pass the translate unchanged (ICU today: m -> rn)
    if not all(ord(c) in keep and mapping[ord(c)] == ord(c) for _, v in multi for c in v):
        raise RuntimeError(f"guard normalisation: ICU's ASCII skeletons {multi} no longer fit the fast path")
    delete = bytes(cp for cp in range(256) if cp not in keep)
    return multi, bytes(mapping), delete


def _ascii_letter_view(core: str) -> str:
    """The letter view of folded ASCII text (``core.translate(_ascii_letters())``, faster)."""
    multi, mapping, delete = _ascii_letter_steps()
    for source, letters_of_source in multi:
        if source in core:
            core = core.replace(source, letters_of_source)
    return core.encode("ascii").translate(mapping, delete).decode("ascii")


_LETTERS: dict[str, str] = {}  # token -> letters of its skeleton (a plain dict: the hot path)


def _letters_of(token: str) -> str:
    skel = skeleton(token)
    # every non-letter deleted: one table of the distinct characters, one C-level translate
    return skel if skel.isalpha() else skel.translate({ord(ch): None for ch in set(skel) if not ch.isalpha()})


def letters(toks: list[str]) -> str:
    """The letter view of a token list: skeletons with every non-letter removed, concatenated."""
    return "".join(word_letters(toks))


def letter_ends(toks: list[str]) -> np.ndarray:
    """The letters of ``letters(toks[: k + 1])`` for every k (where each token's letters end
    in the letter view). For ASCII tokens from the per-character letters (``_ascii_letters``:
    a word's letters are its characters' in a row), vectorised; else one lookup per token."""
    joined = " ".join(toks)
    if not joined.isascii():
        return np.cumsum(np.fromiter(map(len, word_letters(toks)), dtype=np.int64, count=len(toks)))
    per_char = np.cumsum(_ascii_letter_counts()[np.frombuffer(joined.encode("ascii"), dtype=np.uint8)])
    last_char = np.cumsum(np.fromiter(map(len, toks), dtype=np.int64, count=len(toks)) + 1) - 2
    return per_char[last_char] if len(toks) else np.zeros(0, dtype=np.int64)


@lru_cache(maxsize=1)
def _ascii_letter_counts() -> np.ndarray:
    """Per byte, how many letters its character has in the letter view (``_ascii_letters``)."""
    return np.array([len(v or "") if cp < 128 else 0 for cp, v in ((cp, _ascii_letters().get(cp)) for cp in range(256))],
                    dtype=np.int64)


def word_letters(toks: list[str]) -> list[str]:
    """Each token's letters (``letters([tok])``), one cached lookup per token."""
    try:
        return list(map(_LETTERS.__getitem__, toks))
    except KeyError:
        for tok in toks:
            if tok not in _LETTERS:
                _LETTERS[tok] = _letters_of(tok)
        return list(map(_LETTERS.__getitem__, toks))
