"""Which scripts each view folds to Latin letters, measured (the certificate's ``views``).

A copy written in look-alike or stand-in letters (Greek, Cyrillic, fullwidth, mathematical
bold, circled, negative squared, regional indicators, small capitals, Cherokee, ...) is only
caught in a view that folds those letters to the Latin letters of the answer. Rather than
state which view does what, ``scripts_folded`` measures it: for every letter code point of a
fixed list of scripts and letter-like blocks (``SCRIPTS``: assigned code points whose general
category is a letter or whose Unicode name says LETTER), each view's output for that
character alone is normalised as the guard normalises every text (``normalise.text_views``),
and the share of code points whose word view is one word of ASCII letters (``words``) and
whose letter view is ASCII letters (``letters``) is recorded per view and script.

Views: ``text`` (the normalisation alone), each decoding view (``decode``) and each tokenizer
view (``views``: ``decode(encode(c))``, then the normalisation). The table depends only on
the normalisation and decoding code, the Unicode data of Python and ICU, AnyAscii, and a
tokenizer's files, so it is cached per view (tokenizer views by their files' sha256).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from typing import Any

from reappreg.guard.decode import DECODE_VIEWS, DECODING
from reappreg.guard.detector import TEXT_VIEW
from reappreg.guard.normalise import NORMALISATION, text_views

SCRIPTS_VERSION = "reappreg-guard-scripts/v1"

# name -> inclusive code point ranges (only letter code points in them are counted)
SCRIPTS: dict[str, tuple[tuple[int, int], ...]] = {
    "latin_ascii": ((0x41, 0x5A), (0x61, 0x7A)),
    "latin_accented": ((0xC0, 0x24F),),                       # Latin-1 Supplement, Extended-A/B
    "latin_extended_additional": ((0x1E00, 0x1EFF),),
    "ipa_extensions": ((0x250, 0x2AF),),
    "small_capitals": ((0x1D00, 0x1D2B),),                    # Phonetic Extensions: small capitals etc.
    "modifier_letters": ((0x1D2C, 0x1D6A), (0x2B0, 0x2FF)),   # superscript letters
    "greek": ((0x370, 0x3FF),),
    "cyrillic": ((0x400, 0x4FF),),
    "armenian": ((0x531, 0x58F),),
    "cherokee": ((0x13A0, 0x13FF), (0xAB70, 0xABBF)),
    "georgian": ((0x10A0, 0x10FF),),
    "hebrew": ((0x5D0, 0x5EA),),
    "arabic": ((0x620, 0x64A),),
    "devanagari": ((0x904, 0x939),),
    "hiragana": ((0x3041, 0x3096),),
    "letterlike_symbols": ((0x2100, 0x214F),),                # ℂ ℍ ℕ ℙ ...
    "enclosed_alphanumerics": ((0x2460, 0x24FF),),            # circled / parenthesized letters
    "fullwidth": ((0xFF21, 0xFF3A), (0xFF41, 0xFF5A)),
    "mathematical_alphanumerics": ((0x1D400, 0x1D7FF),),
    "parenthesized_squared": ((0x1F110, 0x1F149),),           # 🄐 .. 🄩, 🄰 .. 🅉
    "negative_circled": ((0x1F150, 0x1F169),),                # 🅐 .. 🅩
    "negative_squared": ((0x1F170, 0x1F189),),                # 🅰 .. 🆉
    "regional_indicators": ((0x1F1E6, 0x1F1FF),),             # 🇦 .. 🇿
    "tag_letters": ((0xE0041, 0xE005A), (0xE0061, 0xE007A)),  # invisible tag characters
}


def _is_letter(ch: str) -> bool:
    category = unicodedata.category(ch)
    if category == "Cn":
        return False
    return category.startswith("L") or "LETTER" in unicodedata.name(ch, "")


@functools.cache
def script_letters() -> dict[str, tuple[str, ...]]:
    """The letter code points of each script, in code point order."""
    return {name: tuple(chr(cp) for lo, hi in ranges for cp in range(lo, hi + 1) if _is_letter(chr(cp)))
            for name, ranges in SCRIPTS.items()}


def _folded(text: str) -> tuple[bool, bool]:
    words, letter_view = text_views(text)
    in_words = len(words) == 1 and words[0].isascii() and words[0].isalpha()
    in_letters = bool(letter_view) and letter_view.isascii() and letter_view.isalpha()
    return in_words, in_letters


def _table(outputs: Sequence[str]) -> dict[str, dict[str, float]]:
    """Shares per script from one view's outputs for ``script_letters`` (in order)."""
    out: dict[str, dict[str, float]] = {}
    position = 0
    for name, chars in script_letters().items():
        flags = [_folded(t) for t in outputs[position : position + len(chars)]]
        position += len(chars)
        n = max(len(chars), 1)
        out[name] = {"words": round(sum(w for w, _ in flags) / n, 4), "letters": round(sum(l for _, l in flags) / n, 4)}
    return out


def _all_letters() -> list[str]:
    return [ch for chars in script_letters().values() for ch in chars]


@functools.cache
def _builtin_table(view_name: str) -> dict[str, dict[str, float]]:
    chars = _all_letters()
    if view_name == TEXT_VIEW:
        return _table(chars)
    view = next(v for v in DECODE_VIEWS if v.name == view_name)
    return _table(view.roundtrip(chars))


_TOKENIZER_TABLES: dict[str, dict[str, dict[str, float]]] = {}


def view_table(view: Any) -> dict[str, dict[str, float]]:
    """The table of one tokenizer view (``views.TokenizerView``), cached by its files' sha256."""
    key = f"{view.files_sha256}"
    if key not in _TOKENIZER_TABLES:
        _TOKENIZER_TABLES[key] = _table(view.roundtrip(_all_letters()))
    return _TOKENIZER_TABLES[key]


def scripts_folded(tokenizers: Sequence[Any] = ()) -> dict[str, Any]:
    """The certificate's ``views`` section: per view (``text``, the decoding views, each of
    ``tokenizers``) and script, the share of its letters folded to ASCII letters in the word
    view (``words``) and in the letter view (``letters``); with the scripts' letter counts and
    what the table depends on."""
    import icu

    letters_of = script_letters()
    folded = {TEXT_VIEW: _builtin_table(TEXT_VIEW)}
    folded.update({v.name: _builtin_table(v.name) for v in DECODE_VIEWS})
    folded.update({t.name: view_table(t) for t in tokenizers})
    return {
        "version": SCRIPTS_VERSION,
        "normalisation": NORMALISATION,
        "decoding": DECODING,
        "unicode": unicodedata.unidata_version,
        "icu_unicode": icu.UNICODE_VERSION,
        "scripts": {name: {"ranges": [f"U+{lo:04X}..U+{hi:04X}" for lo, hi in SCRIPTS[name]],
                           "letters": len(chars)} for name, chars in letters_of.items()},
        "scripts_folded": folded,
    }
