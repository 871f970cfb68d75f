"""The guard's decoding views (escapes, markup, transliteration, leetspeak), locality of
containment in long documents, and the size limit: each disguise is caught in the view
named, honest text is not, and what is refused says what and why."""

from __future__ import annotations

import json
import quopri
import random
from email.charset import BASE64, QP, Charset
from email.header import Header
from urllib.parse import quote

import pytest

from reappreg.errors import InputError
from reappreg.guard import AnswerMeta, FastHasher, HeldoutIndex, TextUnit, check_units
from reappreg.guard.decode import (DECODE_VIEW_NAMES, DECODE_VIEWS, ROTATION_PAIRS, decode_all, decode_escapes,
                                   decode_views, html_source, read_rotated, rotated_letters, strip_markup,
                                   transliterate, unleet)
from reappreg.guard.text import check_sizes
from reappreg.settings.guard import GuardSettings

ANSWER = ("It may help to recognise that your friend may be saving her thanks for a calmer moment with you, "
          "so a gentle conversation could clear the air between the two of you before long.")
OTHER = "Perhaps the team meeting ran long and nobody noticed how quiet you had become until the very end of it."


@pytest.fixture(scope="module")
def index() -> HeldoutIndex:
    config = GuardSettings()
    return HeldoutIndex.build([AnswerMeta("a1", "gpt-4-0314", "v1"), AnswerMeta("a2", "gpt-4-0314", "v2")],
                              [ANSWER, OTHER], config, FastHasher())


def _words(text: str) -> list[str]:
    return text.split(" ")


SMALL_CAPS = {c: s for c, s in zip("abcdefghijklmnopqrstuvwyz", "ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘǫʀꜱᴛᴜᴠᴡʏᴢ")}


def _squared(text: str) -> str:  # negative squared Latin capitals (U+1F170...)
    return "".join(chr(0x1F170 + ord(c) - 97) if "a" <= c <= "z" else c for c in text.lower())


def _regional(text: str) -> str:  # regional indicator symbols (U+1F1E6...), as in flag emoji
    return "".join(chr(0x1F1E6 + ord(c) - 97) if "a" <= c <= "z" else c for c in text.lower())


def _strokes(text: str) -> str:  # letters with strokes that neither NFKD nor UTS #39 fold
    table = str.maketrans({"a": "ⱥ", "u": "ʉ", "k": "ꝁ", "b": "ƀ", "e": "ɇ", "i": "ɨ", "o": "ø", "l": "ł", "d": "đ", "h": "ħ"})
    return text.lower().translate(table)


def _leet(text: str) -> str:
    return text.translate(str.maketrans({"o": "0", "e": "3", "a": "4", "s": "5", "t": "7"}))


def _qp(text: str, width: int = 0) -> str:
    """Quoted-printable with every space encoded (=20); ``width``: soft line breaks that often."""
    encoded = quopri.encodestring(text.encode("utf-8"), quotetabs=True).decode("ascii").replace("=\n", "")
    if width:
        encoded = "=\n".join(encoded[i : i + width] for i in range(0, len(encoded), width))
    return encoded


def _mime(text: str, encoding) -> str:
    charset = Charset("utf-8")
    charset.header_encoding = encoding
    return Header(text, charset, maxlinelen=60).encode()


def _in_attributes(text: str) -> str:
    """The answer's words spread over attribute values a page does not show as text."""
    words = _words(text)
    k = len(words) // 4
    parts = [" ".join(words[:k]), " ".join(words[k : 2 * k]), " ".join(words[2 * k : 3 * k]), " ".join(words[3 * k :])]
    return (f'<div class="card" title="{parts[0]}"><img src="x.png" alt=\'{parts[1]}\'>'
            f'<span data-note="{parts[2]}">Thanks!</span><input type=text value="{parts[3]}"></div>')


def _noscript_template(text: str) -> str:
    words = _words(text)
    half = len(words) // 2
    return (f"<p>Hi.</p><noscript>{' '.join(words[:half])}</noscript>"
            f"<template><b>{' '.join(words[half:])}</b></template>")


# Upside-down text as generators write it (an independent table: the test does not read the
# guard's): a turned letter or a look-alike per letter, the text reversed.
UPSIDE_DOWN = dict(zip("abcdefghijklmnopqrstuvwxyz", "ɐqɔpǝɟƃɥᴉɾʞlɯuodbɹsʇnʌʍxʎz"))
# ... with Unicode's own TURNED letters where generators use look-alikes (f, g, l, y)
UPSIDE_DOWN_UNICODE = {**UPSIDE_DOWN, "f": "\u214e", "g": "\u1d77", "l": "\ua781", "y": "\u028e"}
# ... and capitals (turned capitals, the for-all sign for A, a turned sans-serif G and Y)
UPSIDE_DOWN_CAPITALS = dict(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "∀qƆpƎℲ⅁HIſꞰ⅂WNOԀΌᴚS⊥∩ΛMX⅄Z"))


def _upside_down(text: str, table: dict[str, str]) -> str:
    return "".join(table.get(c, c) for c in reversed(text))


DISGUISES = {
    # name: (disguise, the view that must see through it)
    "url_percent": (lambda t: quote(t), "escapes"),
    "url_percent_twice": (lambda t: quote(quote(t)), "escapes"),
    "json_unicode_escapes": (lambda t: json.dumps(t, ensure_ascii=True).replace('"', "").replace(" ", "\\u0020"), "escapes"),
    "python_hex_escapes": (lambda t: t.replace(" ", "\\x20"), "escapes"),
    "latex_between_words": (lambda t: "\\emph{}".join(_words(t)), "markup"),
    "latex_inside_words": (lambda t: " ".join(w[:2] + "\\relax{}" + w[2:] for w in _words(t)), "markup"),
    "bbcode_between_words": (lambda t: " ".join(f"[b]{w}[/b][color=red]" for w in _words(t)), "markup"),
    "chat_tokens_between_words": (lambda t: "<|endoftext|>".join(_words(t)), "markup"),
    "bert_tokens_between_words": (lambda t: "[PAD]".join(_words(t)), "markup"),
    "small_capitals": (lambda t: "".join(SMALL_CAPS.get(c, c) for c in t.lower()), "translit"),
    "negative_squared": (_squared, "translit"),
    "regional_indicators": (_regional, "translit"),
    "letters_with_strokes": (_strokes, "translit"),
    "leetspeak": (_leet, "leet"),
    "url_encoded_leetspeak": (lambda t: quote(_leet(t)), "decoded"),
    "quoted_printable": (lambda t: _qp(t), "escapes"),
    "quoted_printable_soft_breaks": (lambda t: _qp(t, width=18), "escapes"),
    "quoted_printable_leetspeak": (lambda t: _qp(_leet(t)), "decoded"),
    "mime_words_q": (lambda t: _mime(t, QP), "escapes"),
    "mime_words_b": (lambda t: _mime(t, BASE64), "escapes"),
    "html_attributes": (lambda t: _in_attributes(t), "html"),
    "html_comment": (lambda t: f"<p>Thanks for sharing.</p><!-- {t} --><p>Take care.</p>", "html"),
    "html_unclosed_comment": (lambda t: f"<p>Thanks for sharing.</p><!-- {t}", "html"),
    "html_noscript_template": (lambda t: _noscript_template(t), "text"),
    "upside_down": (lambda t: _upside_down(t, UPSIDE_DOWN), "rotated"),
    "upside_down_unicode_turned": (lambda t: _upside_down(t, UPSIDE_DOWN_UNICODE), "rotated"),
    "upside_down_capitals": (lambda t: _upside_down(t.upper(), UPSIDE_DOWN_CAPITALS), "rotated"),
    "upside_down_url_encoded": (lambda t: quote(_upside_down(t, UPSIDE_DOWN)), "rotated"),
}


@pytest.mark.parametrize("kind", sorted(DISGUISES))
def test_each_decoding_disguise_is_caught_in_its_view(index, kind):
    disguise, view = DISGUISES[kind]
    text = disguise(ANSWER)
    hits = check_units(index, [TextUnit("t.jsonl", "r1", "text", text)])
    found = {(h.answer_id, h.view) for h in hits}
    assert ("a1", view) in found or any(a == "a1" and v in DECODE_VIEW_NAMES for a, v in found), (kind, text[:120], found)
    assert {h.answer_id for h in hits} == {"a1"}


def test_markup_is_a_view_so_a_backslash_before_every_word_cannot_delete_the_copy(index):
    """Stripping LaTeX commands from the text itself would delete every word written as
    `\\word`; as a view it cannot: the text view still sees the words."""
    text = " ".join(f"\\{w}" for w in _words(ANSWER))
    assert not any(c.isalpha() for c in strip_markup(text))  # the markup view alone sees no letters ...
    hits = check_units(index, [TextUnit("t.jsonl", "r1", "text", text)])
    assert "a1" in {h.answer_id for h in hits if h.view == "text"}  # ... the text view does


def test_an_escape_is_decoded_before_its_digits_are_read_as_letters():
    """``=20`` and ``%30`` hold digits the leetspeak table and the confusable skeleton read as
    letters (0 -> o): decoding comes first in every view, so the words come back apart."""
    text = "It may help to recognise that 2 of 10 friends forget"
    for encoded in (_qp(text), quote(text), _mime(text, QP), _qp(quote(text))):
        assert decode_escapes(encoded) == text, encoded
        assert decode_all(encoded) == decode_all(text), encoded
    assert unleet("It=20may") == "It=zomay"  # what reading the digits first would give


def test_rotated_letters_come_from_unicode_names_and_cover_the_alphabet():
    """The rotated alphabet is derived: every letter Unicode names TURNED / ROTATED / INVERTED
    (small, capital, small capital, modifier), their confusables; with the rotation pairs of
    the basic letters it reads every basic Latin letter."""
    import unicodedata

    table = rotated_letters()
    named = {ch for ch in table if any(w in unicodedata.name(ch, "") for w in ("TURNED", "ROTATED", "INVERTED"))}
    assert len(named) >= 60 and {"\u0250", "\u01dd", "\u0265", "\u1d09", "\u0287", "\u2c6f", "\ua78d"} <= named
    read = set(table.values()) | set(ROTATION_PAIRS) | set("osxz")
    assert set("abcdefghijklmnopqrstuvwxyz") <= {c for v in read for c in v}
    assert read_rotated(_upside_down("this way", UPSIDE_DOWN)) == "this way"
    assert read_rotated("plain ASCII text") == "plain ASCII text"


def test_decoders_leave_ordinary_text_alone():
    ordinary = "In 2024, 3 of 5 people met at 10 am; the 2nd meeting cost $40 and ran 1.5 hours. Hello!"
    assert decode_escapes(ordinary) == ordinary
    assert transliterate(ordinary) == ordinary
    assert unleet("In 2024, 3.5 people met at 10 am. Hello!") == "In 2024, 3.5 people met at 10 am. Hello!"
    assert unleet("c0ns1d3r th@t") == "consider that"
    assert decode_escapes("50% of us, 100%") == "50% of us, 100%"  # a percent sign is not an escape


def test_escape_decoding_is_bounded_and_joins_surrogate_pairs():
    assert decode_escapes("%252520") == " "  # three rounds
    six_times = " "
    for _ in range(6):
        six_times = quote(six_times)
    assert decode_escapes(six_times) == "%2520"  # at most four rounds, then left as is
    assert decode_escapes("\\ud83d\\ude00") == "\U0001F600"
    assert decode_escapes("\\U0001F600 \\u{1F600}") == "\U0001F600 \U0001F600"


def test_honest_texts_about_the_same_scenario_are_not_flagged_in_any_view(index):
    honest = [
        "Maybe your friend was busy at the party; a calm chat later could help you both.",
        "She may thank you at a calmer moment, when the party is over (2 or 3 days later).",
        "C'est la vie: 100% of friends forget sometimes, and the air clears with time.",
        "ᴍᴀʏʙᴇ she was tired. Consider talking to her about it soon.",
        "Use %20 for a space in a URL and \\n for a newline in JSON.",
        "Set x=10 and y=3D in the spreadsheet; E=mc2 is on the poster <a href=\"https://example.org\">here</a>.",
        "In IPA the vowel of 'the' is ə, and ⊥ means perpendicular; =?utf-8?q?not_a_match?= stays.",
        "<img alt=\"a photo of the party\" title=\"friends at dinner\"><!-- layout: two columns -->",
    ]
    assert check_units(index, [TextUnit("t.jsonl", f"h{i}", "text", t) for i, t in enumerate(honest)]) == []


# ----------------------------------------------------------------------------- locality


def _filler(rng: random.Random, words: int) -> str:
    vocabulary = ("the report on quarterly harvest yields in the northern valleys shows that rainfall and soil "
                  "temperature explain most of the variation between farms over the decade").split()
    return " ".join(rng.choice(vocabulary) for _ in range(words))


def test_phrases_of_an_answer_scattered_through_a_long_document_do_not_add_up(index):
    """Four quarters of an answer, each 2,000 words apart in a long document, share most of
    its n-grams and letter windows with it, but no stretch of the document holds more than
    one quarter: no containment hit. The same quarters within one paragraph are a copy."""
    rng = random.Random(4)
    words = _words(ANSWER)
    quarters = [" ".join(words[k * len(words) // 4 : (k + 1) * len(words) // 4]) for k in range(4)]
    scattered = " ".join(f"{_filler(rng, 2000)}. {q}." for q in quarters) + " " + _filler(rng, 2000)
    assert len(scattered) > 50_000
    hits = check_units(index, [TextUnit("t.jsonl", "doc", "text", scattered)])
    assert [h for h in hits if h.detector in ("ngram", "chars")] == []
    together = f"{_filler(rng, 2000)}. {'. '.join(quarters)}. {_filler(rng, 2000)}"
    hits = check_units(index, [TextUnit("t.jsonl", "doc", "text", together)])
    assert {"ngram", "chars"} & {h.detector for h in hits if h.answer_id == "a1"}


# ----------------------------------------------------------------------------- size limit


def test_a_text_over_the_size_limit_is_refused_with_its_record_named():
    units = [TextUnit("t.jsonl", "small", "text", "a" * 10), TextUnit("t.jsonl", "huge", "scenario", "a" * 101)]
    check_sizes(units[:1], 100)
    with pytest.raises(InputError, match=r"max_text_chars=100: t\.jsonl record 'huge' field 'scenario' \(101 chars\)"):
        check_sizes(units, 100)


def test_the_scripts_each_view_folds_are_measured_per_view():
    """The certificate's ``views.scripts_folded``: measured per view and script, deterministic."""
    from reappreg.guard.scripts import SCRIPTS, script_letters, scripts_folded

    table = scripts_folded()
    assert table == scripts_folded()
    folded = table["scripts_folded"]
    assert set(folded) == {"text", *DECODE_VIEW_NAMES}
    assert all(set(per_view) == set(SCRIPTS) for per_view in folded.values())
    for view in folded.values():
        assert view["latin_ascii"] == {"words": 1.0, "letters": 1.0}
    # Negative squared letters and regional indicators: the transliteration folds them to
    # Latin letters, the normalisation alone does not (so only the decoding views see such a copy).
    for script in ("negative_squared", "regional_indicators"):
        assert folded["translit"][script]["words"] == folded["decoded"][script]["words"] == 1.0
        assert folded["text"][script]["words"] == folded["text"][script]["letters"] == 0.0
        letter = script_letters()[script][0]
        assert transliterate(letter).isascii() and transliterate(letter).isalpha()
    # Fullwidth letters fold already in the normalisation (NFKC), in every view
    assert all(view["fullwidth"]["words"] == 1.0 for view in folded.values())
    # Greek and Cyrillic: the word view keeps them (they are words of their own script), the
    # letter view's confusable skeleton folds the look-alikes only, the transliteration all but a few
    for script in ("greek", "cyrillic"):
        assert folded["text"][script]["words"] == 0.0 < folded["text"][script]["letters"] < folded["translit"][script]["letters"]
    assert table["scripts"]["regional_indicators"]["letters"] == 26


def test_the_batched_decoding_views_equal_each_view_alone():
    """``decode_views`` (prefilters, ``decoded`` composed from the other views) gives each
    view's own ``decode`` of every text, on every kind of input the views undo and on noise."""
    rng = random.Random(12)
    texts = ["plain words only", "c0ns1d3r th@t", "hello! 2024 3.5 10 am", "%63%6f%6e sider", "\\u0063onsider",
             "\\emph{x} [b]y[/b] <|endoftext|> [PAD]", "1.Consider 2.that", "١.Consider", "ᴄᴏɴsɪᴅᴇʀ 🅲🅾🅽",
             "%5Cu0063%30nsider", "\\x41\\x42", "", "!", "a+b", "€5 £3 ¡hola"]
    alphabet = "ab cd019@$!+€£¡%\\u{}[]<>|/.):ᴄ🅲"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30))) for _ in range(3000)]
    batched = dict(decode_views(texts))
    assert list(batched) == list(DECODE_VIEW_NAMES)
    for view in DECODE_VIEWS:
        assert batched[view.name] == [view.decode(t) for t in texts], view.name


def test_vectorised_unleet_equals_the_run_by_run_reference():
    """``unleet`` over the code points at once gives what its definition does: each ``_RUN``
    with a ``_MIXED`` pair translated (digits, symbols of every kind, lone surrogates, NUL)."""
    from reappreg.guard.decode import _ANY_LEET, _MIXED, _RUN, _unleet_run

    def reference(text: str) -> str:
        return _RUN.sub(_unleet_run, text) if _ANY_LEET.search(text) and _MIXED.search(text) else text

    rng = random.Random(7)
    alphabet = "ab3c0@$€£!+¡ _-x1é²½٣Ⅻ\ud800\U0001F172ᴄ\x00=%\\"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(5000)]
    texts += ["c0ns1d3r th@t", "=3D=3" * 200, "c0n5" * 300, "In 2024, 3.5 people met at 10 am. Hello!"]
    for text in texts:
        assert unleet(text) == reference(text), repr(text)
