"""guard.normalise: properties over every code point, not lists of tricks.

Marks go before case folding, folding is idempotent, bidi overrides are read in display
order, quoted attributes stay inside their tag, and comments are removed in one pass.
"""

from __future__ import annotations

import unicodedata

import pytest

from reappreg.guard.normalise import apply_bidi_overrides, fold, normalise

# Every assigned code point of the BMP and the SMP that is not a surrogate.
CODE_POINTS = [cp for cp in range(0x20000)
               if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn"]
MARKS = [cp for cp in CODE_POINTS if unicodedata.category(chr(cp)).startswith("M")]


def test_a_mark_never_becomes_a_letter():
    # U+0345 case-folds to a Greek iota; any mark after a letter must vanish, whatever it folds to.
    survivors = [f"U+{cp:04X}" for cp in MARKS if normalise(f"the a{chr(cp)}nswer") != "the answer"]
    assert survivors == [], survivors[:20]
    assert normalise("t\u0345h\u0345e\u0345 a\u0345n\u0345s\u0345w\u0345e\u0345r\u0345") == "the answer"


def test_folding_is_idempotent_for_every_code_point():
    not_idempotent = []
    for cp in CODE_POINTS:
        once = fold(f"x{chr(cp)}y")
        if fold(once) != once:
            not_idempotent.append(f"U+{cp:04X}")
    assert not_idempotent == [], not_idempotent[:20]


@pytest.mark.parametrize("stored, shown", [
    ("\u202erewsna eht\u202c is here", "the answer"),              # a closed override
    ("prefix \u202erewsna eht", "the answer"),                      # closed by the end of the text
    ("\u202e\u202dthe\u202c rewsna\u202c", "answer the"),           # nested: the inner LTR run stays
])
def test_text_under_a_right_to_left_override_is_read_as_it_displays(stored, shown):
    assert shown in normalise(stored)


def test_a_stray_override_still_leaves_the_stored_order_checked():
    assert "the answer is here" in normalise("the answer is \u202ehere")


def test_override_depth_is_bounded():
    text = "\u202e" * 10_000 + "abc" + "\u202c" * 10_000
    assert apply_bidi_overrides(text).count("c") == 1  # no error, every character kept once


@pytest.mark.parametrize("html, words", [
    ('<a title="x>y">ans</a>wer', "answer"),                        # '>' inside a quoted attribute
    ("<span data-x='a > b' class=c>ans</span>wer", "answer"),
    ("the <!-- hidden --> answer", "the answer"),
    ("the answer <!-- never closed and hidden", "the answer"),
    ("the <!-- <!-- <!-- answer", "the"),                            # an unclosed comment hides the rest
])
def test_markup_is_parsed_not_pattern_matched(html, words):
    assert normalise(html) == words


def test_the_normalisation_version_names_the_order():
    from reappreg.guard.normalise import NORMALISATION

    assert "nfkd-drop-M-casefold" in NORMALISATION and "bidi" in NORMALISATION


def test_bidi_overrides_walked_run_by_run_equal_the_character_by_character_definition():
    """``apply_bidi_overrides`` jumps from one control that matters to the next (linear on
    nested overrides past the depth limit); it gives what UAX #9's rule, applied a character
    at a time, gives on random mixes of text, overrides and pops, nested past the limit too."""
    import random

    from reappreg.guard.normalise import _LRO, _MAX_BIDI_DEPTH, _PDF, _RLO, apply_bidi_overrides

    def by_character(text: str) -> str:
        if _RLO not in text and _LRO not in text:
            return text
        stack: list[tuple[str, list[str]]] = [("", [])]

        def close() -> None:
            kind, items = stack.pop()
            stack[-1][1].append("".join(reversed(items) if kind == _RLO else items))

        for ch in text:
            if ch in (_RLO, _LRO) and len(stack) <= _MAX_BIDI_DEPTH:
                stack.append((ch, []))
            elif ch == _PDF and len(stack) > 1:
                close()
            else:
                stack[-1][1].append(ch)
        while len(stack) > 1:
            close()
        return "".join(stack[0][1])

    rng = random.Random(17)
    texts = ["".join(rng.choice("ab c" + _RLO + _LRO + _PDF) for _ in range(rng.randint(0, 50))) for _ in range(5000)]
    texts += [(_RLO + "ab") * 300 + "xyz" + _PDF * 40, (_RLO + _LRO + "ab") * 400, _PDF * 3 + (_LRO + "q" + _RLO + "zz" + _PDF) * 200]
    for text in texts:
        assert apply_bidi_overrides(text) == by_character(text), repr(text[:60])


def test_word_tokens_and_letter_ends_equal_their_definitions():
    """The C-level ASCII tokeniser equals ``[a-z0-9]+`` runs, and ``letter_ends`` (vectorised
    for ASCII) equals the running length of each word's own letters."""
    import random
    import re

    import numpy as np

    from reappreg.guard.normalise import ascii_words, letter_ends, letters

    rng = random.Random(5)
    texts = ["".join(rng.choice("abcmnrl0123456789 |-.,xyzQ\n") for _ in range(rng.randint(0, 120))) for _ in range(500)]
    for text in texts:
        words = ascii_words(text)
        assert words == re.findall(r"[a-z0-9]+", text)
        expected = np.cumsum([len(letters([w])) for w in words]).tolist() if words else []
        assert letter_ends(words).tolist() == expected
    words = ["héllo", "wörld", "x", "ꜱᴄ"]
    assert letter_ends(words).tolist() == np.cumsum([len(letters([w])) for w in words]).tolist()
