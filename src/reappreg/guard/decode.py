"""Decoding views: a text as an ordinary pipeline, a renderer or a reader would decode it.

Normalisation (``normalise``) folds what has one right reading: compatibility forms, case,
marks, invisible code points, HTML. What follows has more than one reading, so it is never
*replaced* in the text; each is a **view**, checked beside the text as written (like the
tokenizer views, ``views``), and a hit in any view is a hit:

* ``escapes``: transfer encodings, in rounds to a fixpoint (at most four): HTML character
  references, MIME encoded-words (RFC 2047, ``=?utf-8?Q?...?=`` and ``=?utf-8?B?...?=``),
  quoted-printable (``=20``, ``=C3=A9``, soft line breaks ``=\\n``), URL percent-encoding
  (``%20``, ``%2C``, double-encoded ``%2520``), JSON and Python escapes (``\\u0041``,
  ``\\U0001F600``, ``\\x41``, ``\\n``, surrogate pairs). A literal backslash-u or an
  ``x=10`` in honest text stays as written in the text view.
* ``html``: HTML as its source carries it, not as a browser shows it: every attribute value
  (``title``, ``alt``, ``value``, ``data-*``, any other) in place of its tag, and the text of
  comments and CDATA sections kept. The normalisation (every view) removes tags with their
  attributes and comments with their text, as a page shows them; raw HTML in training text
  carries both to the model.
* ``markup``: LaTeX commands (``\\emph``), BBCode tags (``[b]``, ``[/url]``, ``[color=red]``),
  chat-template special tokens (``<|endoftext|>``, ``[PAD]``, ``[MASK]``, ``<s>``) and list
  numbering glued to words (``1.Consider``) removed. As a view: a backslash or a bracket
  before every word of an honest text must not delete the words from every view.
* ``rotated``: upside-down text (``ʎɐʍ sᴉɥʇ``) read the right way up: the order reversed and
  each rotated letter mapped to its letter (``rotated_letters``: derived from Unicode's
  character names and ICU's confusables, with the rotation pairs of the basic Latin letters),
  after the escapes, HTML source and markup are decoded. Only texts holding a rotated letter
  are turned.
* ``translit``: AnyAscii's transliteration of the non-ASCII letters (small capitals ``ᴄ``,
  negative squared ``🅲`` and regional indicator ``🇨`` letters, letters with strokes
  ``ⱥ ʉ ꝁ``, turned letters in place). A view, because transliteration maps a Cyrillic ``с``
  to ``s`` where the confusable skeleton of the text view maps it to ``c``: each catches what
  the other folds.
* ``leet``: digits and symbols that stand for letters (``c0ns1d3r``, ``th@t``), folded only
  where they touch a letter inside a word, so numbers in ordinary text stay numbers.
* ``decoded``: all of them but ``rotated``, in that order (URL-encoded leetspeak), when it
  differs from each.

Order is part of the definition: an escape is decoded before anything reads its characters
as letters. ``=20`` or ``%30`` hold digits that the leetspeak table (``0`` -> ``o``) and the
confusable skeleton (``0`` -> ``o``, ``1`` -> ``l``) would turn into letters, gluing words
together (``It=20may`` -> ``itzomay``); the ``escapes`` view decodes them first, and
``decoded`` applies the leetspeak table and the normalisation's skeleton only after every
decoding step (tests check both).

Every view is one or a few linear passes (regular expressions without nested repeats,
``str.translate``, a bounded number of decoding rounds); ``benchmarks/guard_linear_bench.py``
measures them on adversarial inputs.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache
from dataclasses import dataclass
from importlib.metadata import version
from urllib.parse import unquote

import anyascii
import numpy as np

# The transliteration table is the package's data: its version is part of what the certificate records.
ANYASCII_VERSION = version("anyascii")

# --------------------------------------------------------------------------- escapes

_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_BACKSLASH = re.compile(r"\\(?:u\{([0-9A-Fa-f]{1,6})\}|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|x([0-9A-Fa-f]{2})|([nrtfv]))")
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}
_MAX_ROUNDS = 4  # double (and triple) encoding decodes in one round each
# Quoted-printable (RFC 2045): a run of =XX octets is UTF-8 bytes; '=' at a line end is a soft
# break that joins the lines. Every repeat is of a fixed-length unit: one linear pass.
_QP_RUN = re.compile(r"(?:=[0-9A-Fa-f]{2})+")
_QP_SOFT_BREAK = re.compile(r"=[ \t]*\r?\n")
_QP_ANY = re.compile(r"=(?:[0-9A-Fa-f]{2}|[ \t]*\r?\n)")
# MIME encoded-words (RFC 2047): =?charset?Q|B?text?=, the text bounded (an encoded-word is at
# most 75 characters; a generous bound keeps each match attempt short: linear in the text).
_ENCODED_WORD = re.compile(r"=\?([A-Za-z0-9_.:*-]{1,40})\?([QqBb])\?([^?\s]{0,4000})\?=")
_BETWEEN_WORDS = re.compile(r"(\?=)[ \t\r\n]+(?==\?)")  # whitespace between encoded-words is not text


def _qp_bytes(match: re.Match) -> str:
    return bytes.fromhex(match.group(0).replace("=", "")).decode("utf-8", "replace")


def decode_quoted_printable(text: str) -> str:
    """Quoted-printable decoded: soft line breaks removed, =XX runs read as UTF-8."""
    if "=" not in text or not _QP_ANY.search(text):
        return text
    return _QP_RUN.sub(_qp_bytes, _QP_SOFT_BREAK.sub("", text))


def _encoded_word(match: re.Match) -> str:
    import binascii
    import codecs

    charset, encoding, payload = match.group(1), match.group(2).upper(), match.group(3)
    try:
        if encoding == "B":
            raw = binascii.a2b_base64(payload + "=" * (-len(payload) % 4))
        else:
            raw = _QP_RUN.sub(lambda m: bytes.fromhex(m.group(0).replace("=", "")).decode("latin-1"),
                              payload.replace("_", " ")).encode("latin-1", "replace")
        codec = codecs.lookup(charset.split("*", 1)[0]).name
    except (binascii.Error, LookupError, ValueError):
        return match.group(0)  # not an encoded-word after all: left as written
    return raw.decode(codec, "replace")


def decode_mime_words(text: str) -> str:
    """MIME encoded-words (``=?charset?Q?...?=``, ``=?charset?B?...?=``) decoded in place."""
    if "=?" not in text or not _ENCODED_WORD.search(text):
        return text
    return _ENCODED_WORD.sub(_encoded_word, _BETWEEN_WORDS.sub(r"\1", text))


def _backslash(match: re.Match) -> str:
    hex_digits = match.group(1) or match.group(2) or match.group(3) or match.group(4)
    if hex_digits is None:
        return _SIMPLE[match.group(5)]
    cp = int(hex_digits, 16)
    return chr(cp) if cp <= 0x10FFFF else ""


def decode_escapes(text: str) -> str:
    """Every transfer encoding decoded, to a fixpoint of at most four rounds; one round decodes
    HTML character references, MIME encoded-words, quoted-printable, percent-encoding and
    backslash escapes, in that order (an outer encoding is undone before an inner one)."""
    for _ in range(_MAX_ROUNDS):
        decoded = text
        if "&" in decoded:
            decoded = html.unescape(decoded)
        decoded = decode_quoted_printable(decode_mime_words(decoded))
        if "%" in decoded and _PERCENT.search(decoded):
            decoded = unquote(decoded, errors="replace")
            if not any(ch.isspace() for ch in decoded):
                decoded = decoded.replace("+", " ")  # form encoding: '+' is a space where no space is left
        if "\\" in decoded:
            decoded = _BACKSLASH.sub(_backslash, decoded)
            if any("\ud800" <= ch <= "\udfff" for ch in decoded):
                # JSON writes astral characters as surrogate pairs: join them (a lone one is dropped
                # by normalisation as category Cs).
                decoded = decoded.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "ignore")
        if decoded == text:
            return text
        text = decoded
    return text


# --------------------------------------------------------------------------- html source

# A tag and its attribute text (quoted values may hold '>'); every repeat bounded, as the
# normalisation's own tag pattern: a match attempt costs at most a few thousand steps.
_HTML_TAG = re.compile(r"<\s*/?\s*[A-Za-z][A-Za-z0-9:-]*((?:[^<>\"']|\"[^\"]{0,2000}\"|'[^']{0,2000}'){0,2000})/?\s*>")
_ATTRIBUTE = re.compile(r"""[^\s"'=<>/]+\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""")
_COMMENT_MARKS = re.compile(r"<!--|--!?>|<!\[CDATA\[|\]\]>")


def _attribute_values(match: re.Match) -> str:
    values = [a or b or c for a, b, c in _ATTRIBUTE.findall(match.group(1) or "")]
    return " " + " ".join(html.unescape(v) for v in values if v) + " " if values else " "


def html_source(text: str) -> str:
    """HTML as its source carries it: each tag replaced by its attribute values, the text of
    comments and CDATA sections kept (their delimiters removed)."""
    if "<" not in text or not ("=" in text or "<!" in text):
        return text
    return _HTML_TAG.sub(_attribute_values, _COMMENT_MARKS.sub(" ", text))


# --------------------------------------------------------------------------- markup

_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+\*?|\\[^A-Za-z\s]")
_BBCODE = re.compile(r"\[/?[A-Za-z*][A-Za-z0-9_]{0,15}(?:=[^\[\]\n]{0,200})?\]")
# Special tokens by shape: <|name|> (GPT-2, Qwen, SmolLM, Llama 3), [NAME] upper-case
# (BERT-style: [PAD], [MASK], [CLS], [SEP], [UNK]), <name> short lower-case (<s>, </s>,
# <pad>, <unk>, <eos>); the tokenizer views remove each tokenizer's own.
_SPECIAL = re.compile(r"<\|[^<>|\n]{1,64}\|>|\[[A-Z][A-Z_0-9]{1,15}\]|</?[a-z_]{1,8}>")
_NUMBERING = re.compile(r"(?<![^\W\d_])\d{1,4}[.):](?=[^\W\d_])")
_BRACES = str.maketrans("{}", "  ")


# What every ``_NUMBERING`` match starts with: a search for it alone runs in sre's
# charset scan, the lookbehind of ``_NUMBERING`` on every position (2.6x slower on plain text).
_NUMBERING_START = re.compile(r"\d[.):]")


def strip_markup(text: str) -> str:
    """LaTeX commands, BBCode tags, special tokens and glued list numbering removed."""
    if "\\" in text:
        text = _LATEX_COMMAND.sub("", text).translate(_BRACES)
    if "[" in text or "<" in text:
        text = _SPECIAL.sub(" ", text)
        text = _BBCODE.sub("", text)
    return _NUMBERING.sub(" ", text) if _NUMBERING_START.search(text) else text


# --------------------------------------------------------------------------- rotated

# A letter turned 180 degrees in Unicode's own names: "LATIN SMALL LETTER TURNED A",
# "LATIN LETTER SMALL CAPITAL TURNED R", "MODIFIER LETTER SMALL TURNED H", "TURNED CAPITAL F",
# "TURNED SANS-SERIF CAPITAL G", "LATIN SMALL LETTER TURNED M WITH LONG LEG", "... TURNED AE";
# and REVERSED (mirrored left-right) forms of the letters whose top and bottom halves mirror
# each other, for which turning and mirroring draw the same shape ("LATIN CAPITAL LETTER
# REVERSED E", "LATIN SMALL LETTER REVERSED C"). Names of other turned things (a TURNED
# ALPHA, an OPEN E, a COMMA, an INVERTED BREVE diacritic) do not match.
_ROTATED_NAME = re.compile(r"^(?:LATIN |MODIFIER )?(?:(?:SMALL |CAPITAL )?LETTER )?(?:SMALL |CAPITAL )*"
                           r"(TURNED|ROTATED|INVERTED|REVERSED) (?:SANS-SERIF )?(?:SMALL |CAPITAL )?([A-Z]{1,2})"
                           r"(?: WITH [A-Z -]+)?$")
MIRROR_SYMMETRIC = frozenset("bcdehikox")  # letters (either case) whose REVERSED form is their rotation
# Rotating a basic Latin letter 180 degrees gives another basic letter for these (which is why
# Unicode encodes no TURNED form of them): b/q, d/p, n/u, and the capitals M/W; o, s, x, z
# (and the capitals H, I, N, O, S, X, Z) are their own rotation. Geometry, not data: the only
# part of the table that is stated (tests check that names and these pairs cover the alphabet).
ROTATION_PAIRS = {"b": "q", "q": "b", "d": "p", "p": "d", "n": "u", "u": "n", "M": "W", "W": "M"}
# Substitutes upside-down generators use where fonts lack Unicode's TURNED letter (a
# convention, like ``LEET``: no standard defines it): a dotless j with stroke for f, b with
# topbar for g, r with fishhook for j, open o for c, Hebrew final nun for l, intersection for U,
# Komi de for P, Carrier tha for D, a box-drawing up-and-horizontal for T.
ROTATION_SUBSTITUTES = {"\u025f": "f", "\u0183": "g", "\u027e": "j", "\u0254": "c", "\u05df": "l", "\u2229": "u",
                        "\u0500": "p", "\u15e1": "d", "\u2534": "t", "\u0186": "c"}


_TURN_WORDS = re.compile(r"\b(?:TURNED|ROTATED|INVERTED|REVERSED)\b")
# Where no letter or symbol has such a name: the CJK ideographs, Hangul syllables, Yi, the
# surrogates and private use, and the planes above the second (skipped: a third of the scan).
_NO_TURNED = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA000, 0xA48F), (0xAC00, 0xD7AF), (0xD800, 0xF8FF),
              (0x20000, 0x10FFFF))


def _candidates(first: int = 0x80):
    start = first
    for lo, hi in _NO_TURNED:
        yield from range(start, lo)
        start = hi + 1


@lru_cache(maxsize=1)
def _named_rotations() -> dict[str, str]:
    """{character: basic Latin letter(s)} of every character Unicode's names make a rotated letter."""
    table: dict[str, str] = {}
    for cp in _candidates():
        name = unicodedata.name(chr(cp), "")
        if name and _TURN_WORDS.search(name):
            match = _ROTATED_NAME.match(name)
            if match and (match.group(1) != "REVERSED" or match.group(2).lower() in MIRROR_SYMMETRIC):
                table[chr(cp)] = match.group(2).lower()
    return table


@lru_cache(maxsize=1)
def rotated_letters() -> dict[str, str]:
    """{code point: the basic Latin letter(s) it is, turned 180 degrees}: every character whose
    Unicode name says it is a rotated basic Latin letter (``_ROTATED_NAME``), every letter or
    symbol to which ICU's confusables give the same non-ASCII skeleton as one of those (an up
    tack for a turned T, a Greek capital lambda for a turned V, a for-all sign for a turned A),
    and ``ROTATION_SUBSTITUTES``."""
    import icu

    named = _named_rotations()
    checker = icu.SpoofChecker()
    skeletons = {checker.getSkeleton(0, ch): base for ch, base in named.items()}
    skeletons = {k: v for k, v in skeletons.items() if not k.isascii()}  # an ASCII skeleton is a plain look-alike
    table = dict(named)
    for cp in _candidates():
        ch = chr(cp)
        if ch not in table and unicodedata.category(ch)[0] in "LS":
            base = skeletons.get(checker.getSkeleton(0, ch))
            if base is not None:
                table[ch] = base
    return {**table, **ROTATION_SUBSTITUTES}


def warm() -> None:
    """Build the tables the views compute once per process (the rotated alphabet: a scan of
    Unicode's names and ICU's skeletons, about a second), so that worker processes forked after
    this share them instead of each building its own."""
    _rotation()
    _leet_tables()


@lru_cache(maxsize=1)
def _rotation() -> tuple[dict[int, str], re.Pattern]:
    """(the translation table, the prefilter). A text is turned only when it holds a letter
    Unicode names as rotated (or a generator's substitute): the confusables alone (a Greek
    lambda, an up tack) occur in ordinary text and do not make it upside-down."""
    translate = {ord(ch): base for ch, base in rotated_letters().items()}
    translate.update({ord(a): b for a, b in ROTATION_PAIRS.items()})
    marks = sorted({*_named_rotations(), *ROTATION_SUBSTITUTES})
    return translate, re.compile("[" + "".join(re.escape(ch) for ch in marks) + "]")


def unrotate(text: str) -> str:
    """Upside-down text read the right way up (reversed, rotated letters mapped to theirs);
    a text without a rotated letter is returned as it is."""
    translate, any_rotated = _rotation()
    if text.isascii() or not any_rotated.search(text):
        return text
    return text[::-1].translate(translate)


# --------------------------------------------------------------------------- translit


def transliterate(text: str) -> str:
    """AnyAscii's ASCII transliteration of every non-ASCII character (ASCII text unchanged)."""
    return text if text.isascii() else anyascii.anyascii(text)


# --------------------------------------------------------------------------- leet

# The common leetspeak substitutions (a convention, not a Unicode property: no library or
# standard defines it). Where one symbol reads as two letters (1: i or l), the letter view's
# confusable skeleton already folds the other reading (1 -> l).
LEET = {"0": "o", "1": "i", "2": "z", "3": "e", "4": "a", "5": "s", "6": "g", "7": "t", "8": "b", "9": "g",
        "@": "a", "$": "s", "!": "i", "+": "t", "€": "e", "£": "l", "¡": "i"}
_LEET_CLASS = re.escape("".join(LEET))
# Runs of letters, digits and leet symbols; one is read as leetspeak only where a symbol
# stands before a letter (c0nsider, th4t, @ll) or a digit/@/$ right after one (wh@, b3):
# numbers (2024, 3.5, "10 am") and ordinary punctuation ("hello!") stay as they are.
_RUN = re.compile(rf"(?:[^\W_]|[{_LEET_CLASS}])+")
_MIXED = re.compile(rf"[{_LEET_CLASS}][^\W\d_]|[^\W\d_][0-9@$€£]")
_LEET_TABLE = str.maketrans(LEET)
# Every ``_MIXED`` match holds a leet symbol: a charset search for one is the cheap first test.
_ANY_LEET = re.compile(f"[{_LEET_CLASS}]")


def _unleet_run(match: re.Match) -> str:
    run = match.group(0)
    return run.translate(_LEET_TABLE) if _MIXED.search(run) else run


_RUN_CHAR, _LETTER, _LEET_CHAR, _AFTER_LETTER = 1, 2, 4, 8


@lru_cache(maxsize=1)
def _leet_tables() -> tuple[np.ndarray, np.ndarray]:
    """(per code point, which of ``_RUN``'s, ``_MIXED``'s classes it is in (bit flags); per code
    point, its code point after ``_LEET_TABLE``). The classes are read off the patterns' own
    character sets, run over every code point once."""
    every = "".join(map(chr, range(_CODE_POINTS)))
    flags = np.zeros(_CODE_POINTS, dtype=np.uint8)
    for bit, char_set in ((_RUN_CHAR, rf"(?:[^\W_]|[{_LEET_CLASS}])"), (_LETTER, r"[^\W\d_]"),
                          (_LEET_CHAR, f"[{_LEET_CLASS}]"), (_AFTER_LETTER, "[0-9@$€£]")):
        marked = _code_points(re.sub(char_set, "\x00", every)) == 0
        marked[0] = False  # U+0000 itself is in none of them
        flags[marked] |= bit
    mapped = np.arange(_CODE_POINTS, dtype=np.uint32)
    for symbol, letter in LEET.items():
        mapped[ord(symbol)] = ord(letter)
    return flags, mapped


_CODE_POINTS = 0x110000


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def unleet(text: str) -> str:
    """Leet symbols read as letters inside words that mix them with letters.

    Equal to ``_RUN.sub(_unleet_run, text)`` (tested), computed over the code points at once:
    a run (``_RUN``) is translated when a ``_MIXED`` pair (two adjacent characters, both of
    the run) lies inside it."""
    if not (_ANY_LEET.search(text) and _MIXED.search(text)):
        return text
    flags_of, mapped = _leet_tables()
    codes = _code_points(text)
    flags = flags_of[codes]
    run = (flags & _RUN_CHAR) != 0
    letter = (flags & _LETTER) != 0
    mixed = (((flags[:-1] & _LEET_CHAR) != 0) & letter[1:]) | (letter[:-1] & ((flags[1:] & _AFTER_LETTER) != 0))
    starts = run.copy()
    starts[1:] &= ~run[:-1]
    run_id = np.cumsum(starts)
    translated = np.zeros(int(run_id[-1]) + 1, dtype=bool)
    translated[run_id[:-1][mixed]] = True
    return np.where(run & translated[run_id], mapped[codes], codes).tobytes().decode("utf-32-le", "surrogatepass")


# --------------------------------------------------------------------------- views


def decode_all(text: str) -> str:
    """Every decoding in a row (the ``decoded`` view): escapes, HTML source, markup,
    transliteration, leetspeak."""
    return unleet(transliterate(strip_markup(html_source(decode_escapes(text)))))


def read_rotated(text: str, escapes_decoded: str | None = None) -> str:
    """The ``rotated`` view: upside-down text read the right way up, after the escapes, the HTML
    source and the markup are decoded (so an encoding cannot hide the rotated letters). Not part
    of ``decoded``: reversing a text that only borrows one rotated-looking letter would undo
    every later step for it."""
    decoded = decode_escapes(text) if escapes_decoded is None else escapes_decoded  # ``escapes`` of it, if known
    if decoded.isascii():
        return text
    _, any_rotated = _rotation()
    if not any_rotated.search(decoded):
        return text
    return unrotate(strip_markup(html_source(decoded)))


@dataclass(frozen=True)
class DecodeView:
    """One decoding, as a view (``index.TextView``): ``roundtrip`` returns each text decoded."""

    name: str
    decode: Callable[[str], str]

    def roundtrip(self, texts: Sequence[str]) -> list[str]:
        return [self.decode(t) for t in texts]


# The steps of ``decoded``, in its order (the module docstring: escapes first).
_STEPS: tuple[DecodeView, ...] = (
    DecodeView("escapes", decode_escapes),
    DecodeView("html", html_source),
    DecodeView("markup", strip_markup),
    DecodeView("translit", transliterate),
    DecodeView("leet", unleet),
)
DECODE_VIEWS: tuple[DecodeView, ...] = (*_STEPS, DecodeView("rotated", read_rotated), DecodeView("decoded", decode_all))
DECODE_VIEW_NAMES = tuple(v.name for v in DECODE_VIEWS)


def decode_views(texts: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Every ``DECODE_VIEWS`` round trip of ``texts``, (view name, decoded texts) in that order.

    The same strings as each view's ``roundtrip``; ``decoded`` is composed from the steps'
    results where a step left its input unchanged, so a plain text is decoded once per view.
    """
    steps = {view.name: [view.decode(t) for t in texts] for view in _STEPS}
    steps["rotated"] = [read_rotated(t, e) for t, e in zip(texts, steps["escapes"])]
    decoded = []
    for i, text in enumerate(texts):
        step = text
        for view in _STEPS:
            # while every earlier step left the text as it was, this step's result is known
            step = steps[view.name][i] if step is text else view.decode(step)
        decoded.append(step)
    steps["decoded"] = decoded
    return [(name, steps[name]) for name in DECODE_VIEW_NAMES]


DECODING = f"decode-views/v2:{','.join(DECODE_VIEW_NAMES)};anyascii{ANYASCII_VERSION}"
