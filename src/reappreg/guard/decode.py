"""Decoding views: a text as an ordinary pipeline, a renderer or a reader would decode it.

Normalisation (``normalise``) folds what has one right reading: compatibility forms, case,
marks, invisible code points, HTML. What follows has more than one reading, so it is never
*replaced* in the text; each is a **view**, checked beside the text as written (like the
tokenizer views, ``views``), and a hit in any view is a hit:

* ``escapes``: URL percent-encoding (``%20``, ``%2C``, double-encoded ``%2520``), JSON and
  Python escapes (``\\u0041``, ``\\U0001F600``, ``\\x41``, ``\\n``, surrogate pairs). A
  literal backslash-u in honest text stays as written in the text view.
* ``markup``: LaTeX commands (``\\emph``), BBCode tags (``[b]``, ``[/url]``, ``[color=red]``),
  chat-template special tokens (``<|endoftext|>``, ``[PAD]``, ``[MASK]``, ``<s>``) and list
  numbering glued to words (``1.Consider``) removed. As a view: a backslash or a bracket
  before every word of an honest text must not delete the words from every view.
* ``translit``: AnyAscii's transliteration of the non-ASCII letters (small capitals ``ᴄ``,
  negative squared ``🅲`` and regional indicator ``🇨`` letters, letters with strokes
  ``ⱥ ʉ ꝁ``). A view, because transliteration maps a Cyrillic ``с`` to ``s`` where the
  confusable skeleton of the text view maps it to ``c``: each catches what the other folds.
* ``leet``: digits and symbols that stand for letters (``c0ns1d3r``, ``th@t``), folded only
  where they touch a letter inside a word, so numbers in ordinary text stay numbers.
* ``decoded``: all four in that order (URL-encoded leetspeak), when it differs from each.

Every view is one or a few linear passes (regular expressions without nested repeats,
``str.translate``, a bounded number of decoding rounds); ``benchmarks/guard_linear_bench.py``
measures them on adversarial inputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from urllib.parse import unquote

import anyascii

# The transliteration table is the package's data: its version is part of what the certificate records.
ANYASCII_VERSION = version("anyascii")

# --------------------------------------------------------------------------- escapes

_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_BACKSLASH = re.compile(r"\\(?:u\{([0-9A-Fa-f]{1,6})\}|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|x([0-9A-Fa-f]{2})|([nrtfv]))")
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}
_MAX_ROUNDS = 4  # double (and triple) encoding decodes in one round each


def _backslash(match: re.Match) -> str:
    hex_digits = match.group(1) or match.group(2) or match.group(3) or match.group(4)
    if hex_digits is None:
        return _SIMPLE[match.group(5)]
    cp = int(hex_digits, 16)
    return chr(cp) if cp <= 0x10FFFF else ""


def decode_escapes(text: str) -> str:
    """Percent-encoding and backslash escapes decoded, to a fixpoint of at most four rounds."""
    for _ in range(_MAX_ROUNDS):
        decoded = text
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


def unleet(text: str) -> str:
    """Leet symbols read as letters inside words that mix them with letters."""
    return _RUN.sub(_unleet_run, text) if _ANY_LEET.search(text) and _MIXED.search(text) else text


# --------------------------------------------------------------------------- views


def decode_all(text: str) -> str:
    return unleet(transliterate(strip_markup(decode_escapes(text))))


@dataclass(frozen=True)
class DecodeView:
    """One decoding, as a view (``index.TextView``): ``roundtrip`` returns each text decoded."""

    name: str
    decode: Callable[[str], str]

    def roundtrip(self, texts: Sequence[str]) -> list[str]:
        return [self.decode(t) for t in texts]


DECODE_VIEWS: tuple[DecodeView, ...] = (
    DecodeView("escapes", decode_escapes),
    DecodeView("markup", strip_markup),
    DecodeView("translit", transliterate),
    DecodeView("leet", unleet),
    DecodeView("decoded", decode_all),
)
DECODE_VIEW_NAMES = tuple(v.name for v in DECODE_VIEWS)


def decode_views(texts: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Every ``DECODE_VIEWS`` round trip of ``texts``, (view name, decoded texts) in that order.

    The same strings as each view's ``roundtrip``; ``decoded`` is composed from the others'
    results where a step left its input unchanged, so a plain text is decoded once per view.
    """
    steps = {"escapes": [decode_escapes(t) for t in texts], "markup": [strip_markup(t) for t in texts],
             "translit": [transliterate(t) for t in texts], "leet": [unleet(t) for t in texts]}
    decoded = []
    for i, text in enumerate(texts):
        step = steps["escapes"][i]
        step = steps["markup"][i] if step is text else strip_markup(step)
        step = steps["translit"][i] if step is text else transliterate(step)
        decoded.append(steps["leet"][i] if step is text else unleet(step))
    steps["decoded"] = decoded
    return [(name, steps[name]) for name in DECODE_VIEW_NAMES]
DECODING = f"decode-views/v1:{','.join(DECODE_VIEW_NAMES)};anyascii{ANYASCII_VERSION}"
