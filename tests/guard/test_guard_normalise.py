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
