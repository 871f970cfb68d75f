"""The ``edits`` detector: copies with an edit in a third of their words are caught alone, in
filler and in a long document, through the held-out index and through a keyed sketch; the
answer's content words scattered over a long document, and honest human reappraisals of the
same scenarios, are not."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from guard_support.disguise import EDIT_KINDS, FUNCTION_WORDS, edit, word_filler

from reappreg.errors import InputError
from reappreg.guard import AnswerMeta, FastHasher, HeldoutIndex, TextUnit, build_sketch, check_units
from reappreg.guard.normalise import tokens
from reappreg.guard.edits import STOP_WORDS, content_words, lcs_bitparallel
from reappreg.guard.registry import settings_from_record, settings_record
from reappreg.guard.sketch import SKETCH_SCHEMA, index_from_sketch
from reappreg.settings.guard import GuardSettings


def config(**edits) -> GuardSettings:
    """The default ``guard`` settings with ``edits`` settings changed."""
    return GuardSettings.model_validate({"edits": edits})


@pytest.fixture(scope="module")
def sample():
    from reappreg.data.sample import generate_sample

    frame = generate_sample(seed=11).reappraisals
    return frame[frame.source == "human"].to_dict("records"), frame[frame.source != "human"].to_dict("records")


@pytest.fixture(scope="module")
def sample_index(sample):
    _, heldout = sample
    return HeldoutIndex.build([AnswerMeta(a["reappraisal_id"], a["source"], a["vignette_id"]) for a in heldout],
                              [a["text"] for a in heldout], config(), FastHasher())


def long_document(filler, chars: int = 20_000) -> list[str]:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words += filler(200).split()
    return words


def planted(sample, kind: str, seed: int, count: int = 6) -> tuple[list[TextUnit], dict[str, str]]:
    """``count`` answers edited as ``kind`` at 33% of their words, each alone, inside ~60 words
    of filler and inside a ~20,000-character document: (units, record id -> answer id)."""
    human, heldout = sample
    rng = random.Random(seed)
    filler = word_filler([r["text"] for r in human], rng)
    units, answer_of = [], {}
    for j, answer in enumerate(rng.sample(heldout, count)):
        copy = edit(kind, rng, answer["text"], 0.33)
        assert copy != answer["text"]
        document = long_document(filler)
        at = rng.randrange(len(document))
        for placement, text in (("alone", copy), ("filler", f"{filler(30)} {copy} {filler(30)}"),
                                ("document", " ".join(document[:at] + [copy] + document[at:]))):
            rid = f"{kind}-{j}-{placement}"
            units.append(TextUnit("t", rid, "text", text))
            answer_of[rid] = answer["reappraisal_id"]
    return units, answer_of


@pytest.mark.parametrize("kind", EDIT_KINDS)
def test_a_third_of_the_words_edited_is_caught_alone_in_filler_and_in_a_long_document(sample, sample_index, kind):
    units, answer_of = planted(sample, kind, seed=EDIT_KINDS.index(kind))
    hits = check_units(sample_index, units)
    caught = {(h.record_id, h.answer_id) for h in hits if h.detector == "edits"}
    missed = [rid for rid, answer in answer_of.items() if (rid, answer) not in caught]
    assert not missed, missed
    for h in hits:
        if h.detector == "edits":
            assert h.score >= h.threshold == config().edits.threshold and h.reason == "lcs" and h.shared
            assert h.shared_count <= h.answer_grams
    # only the planted answer, or answers to the same scenario (they share its content words)
    vignette = {a["reappraisal_id"]: a["vignette_id"] for a in sample[1]}
    assert all(vignette[h.answer_id] == vignette[answer_of[h.record_id]] for h in hits if h.detector == "edits")


def test_typos_in_a_third_of_the_words_pass_the_other_detectors(sample, sample_index):
    """What the detector is for: with it disabled, most such copies pass the guard."""
    units, answer_of = planted(sample, "typo", seed=0)
    without = config(enabled=False)
    index = HeldoutIndex.build([AnswerMeta(a["reappraisal_id"]) for a in sample[1]], [a["text"] for a in sample[1]],
                               without, FastHasher())
    caught = {(h.record_id, h.answer_id) for h in check_units(index, units)}
    assert sum((rid, a) in caught for rid, a in answer_of.items()) < len(answer_of) / 2


def test_content_words_scattered_over_a_long_document_never_add_up(sample, sample_index):
    """The answer's content words, in its order, one every ~100 words of a long document: no
    stretch holds enough of them. The same words close together are a copy."""
    human, heldout = sample
    rng = random.Random(7)
    filler = word_filler([r["text"] for r in human], rng)
    units, answers = [], []
    for j, answer in enumerate(heldout[:20]):
        words = content_words(tokens(answer["text"]))
        document = long_document(filler, 30_000)
        step = len(document) // (len(words) + 1)
        assert step >= 60
        scattered = []
        for k, word in enumerate(words):
            scattered += document[k * step : (k + 1) * step] + [word]
        scattered += document[len(words) * step :]
        units.append(TextUnit("t", f"scattered-{j}", "text", " ".join(scattered)))
        units.append(TextUnit("t", f"together-{j}", "text", " ".join(document[:500] + words + document[500:])))
        answers.append(answer["reappraisal_id"])
    hits = [h for h in check_units(sample_index, units) if h.detector == "edits"]
    flagged = {(h.record_id, h.answer_id) for h in hits}
    assert not [h for h in hits if h.record_id.startswith("scattered")], [(h.record_id, h.answer_id, h.score) for h in hits]
    assert all((f"together-{j}", a) in flagged for j, a in enumerate(answers))


def test_human_reappraisals_of_the_same_scenarios_are_not_flagged(sample, sample_index):
    """600 human reappraisals of the six vignettes share the answers' content words (many
    pairs are scored), but not in the answers' order: no edits hit. An edited copy among them is."""
    human, heldout = sample
    units = [TextUnit("human", r["reappraisal_id"], "text", r["text"]) for r in human]
    rng = random.Random(3)
    units.append(TextUnit("human", "copy", "text", edit("tense_shift", rng, heldout[9]["text"], 0.33)))
    hits = check_units(sample_index, units)
    assert {(h.record_id, h.detector) for h in hits if h.detector == "edits"} >= {("copy", "edits")}
    assert {h.record_id for h in hits} == {"copy"}
    # the humans do share content words with answers to their scenario: at a low threshold
    # the detector scores (and reports) pairs, all far below the default
    low = HeldoutIndex.build(sample_index.answers, [a["text"] for a in heldout], config(threshold=0.3), FastHasher())
    scores = [h.score for h in check_units(low, units[:-1]) if h.detector == "edits"]
    assert scores and max(scores) < config().edits.threshold - 0.2


def test_the_sketch_catches_the_same_edited_copies(sample, sample_index):
    human, heldout = sample
    answers = [AnswerMeta(a["reappraisal_id"], a["source"], a["vignette_id"]) for a in heldout]
    texts = [a["text"] for a in heldout]
    key = bytes(range(32))
    sketch = build_sketch(answers, texts, config(), key, "0" * 32)
    assert sketch["schema"] == SKETCH_SCHEMA
    entry = sketch["answers"][0]
    assert entry["content_words"] == len(content_words(tokens(texts[0]))) and entry["edit_keys"] == sorted(entry["edit_keys"])
    assert not set(tokens(texts[0])) & set(tokens(" ".join(entry["edit_keys"])))
    index = index_from_sketch(sketch, key)
    units = []
    for kind in EDIT_KINDS:
        kind_units, _ = planted(sample, kind, seed=10 + EDIT_KINDS.index(kind), count=2)
        units += kind_units
    units += [TextUnit("human", r["reappraisal_id"], "text", r["text"]) for r in human[:100]]
    via_sketch = {(h.record_id, h.answer_id, round(h.score, 9)) for h in check_units(index, units) if h.detector == "edits"}
    via_heldout = {(h.record_id, h.answer_id, round(h.score, 9)) for h in check_units(sample_index, units) if h.detector == "edits"}
    assert via_sketch == via_heldout
    assert {r for r, *_ in via_sketch} == {u.record_id for u in units if not u.source == "human"}
    # a sketch of the previous schema (no edits keys) is refused
    old = {**sketch, "answers": [{k: v for k, v in e.items() if k not in ("edit_keys", "content_words")} for e in sketch["answers"]]}
    with pytest.raises(InputError):
        index_from_sketch(old, key)


def test_disabled_detector_reports_nothing(sample):
    _, heldout = sample
    index = HeldoutIndex.build([AnswerMeta(a["reappraisal_id"]) for a in heldout], [a["text"] for a in heldout],
                               config(enabled=False), FastHasher())
    copy = edit("typo", random.Random(1), heldout[2]["text"], 0.33)
    assert not [h for h in check_units(index, [TextUnit("t", "copy", "text", copy)]) if h.detector == "edits"]


def test_short_answers_are_left_to_the_exact_detectors(sample):
    _, heldout = sample
    index = HeldoutIndex.build([AnswerMeta("short"), AnswerMeta("long")],
                               ["Learning from this mistake will help you grow stronger next time.", heldout[0]["text"]],
                               config(), FastHasher())
    texts = ["Learnin from this mistke will hlep you gorw stronger nxt time.", edit("typo", random.Random(2), heldout[0]["text"], 0.33)]
    hits = check_units(index, [TextUnit("t", f"t{i}", "text", t) for i, t in enumerate(texts)])
    assert {(h.record_id, h.answer_id) for h in hits if h.detector == "edits"} == {("t1", "long")}


def test_generator_function_words_are_detector_function_words():
    assert set(FUNCTION_WORDS) <= STOP_WORDS


def test_a_token_of_a_million_letters_costs_linear_memory():
    """A "word" of a million letters (a base64 blob, a minified file: the leak scan reads model
    folders) would have a million deletions of a million letters each: only words up to
    MAX_TYPO_LETTERS get typo keys, longer ones match exactly or by stem."""
    import tracemalloc

    from reappreg.guard.edits import MAX_TYPO_LETTERS, content_strings

    assert len(content_strings("b" * MAX_TYPO_LETTERS)[1]) > 1
    tracemalloc.start()
    stem, variants = content_strings("ab" * 500_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert variants == ("ab" * 500_000,) and peak < 50 * 2**20


def test_bitparallel_lcs_equals_dynamic_programming():
    rng = random.Random(0)
    for _ in range(500):
        length, n = rng.randint(1, 70), rng.randint(0, 40)
        match = [[rng.random() < 0.2 for _ in range(length)] for _ in range(n)]
        table = [[0] * (length + 1) for _ in range(n + 1)]
        for i in range(1, n + 1):
            for j in range(1, length + 1):
                table[i][j] = max(table[i - 1][j], table[i][j - 1], table[i - 1][j - 1] + match[i - 1][j - 1])
        masks = [sum(1 << j for j in range(length) if row[j]) for row in match]
        assert lcs_bitparallel(masks, length) == table[n][length]


def test_edits_settings_are_validated():
    with pytest.raises(ValidationError, match="edits.span"):
        config(span=1.5)
    with pytest.raises(ValidationError, match="edits.threshold"):
        config(threshold=0)
    detectors = settings_record(config())
    assert settings_from_record(detectors) == config()
    detectors["edits"]["version"] = "reappreg-guard-edits/v0"
    with pytest.raises(InputError, match="edits detector version"):
        settings_from_record(detectors)
    del detectors["edits"]["span"]
    with pytest.raises(InputError, match=r"incomplete: 'detectors.edits' lacks \['span'\]"):
        settings_from_record(detectors)

def test_word_keys_of_a_batch_equal_each_word_keyed_alone():
    """``WordKeys.of_tokens`` hashes a batch's new words in one vectorised pass: the keys must
    be those of ``of_token`` on a fresh cache, word by word (function words stay None)."""
    from reappreg.guard.edits import WordKeys

    rng = random.Random(9)
    words = ["the", "considering", "consider", "teh", "friend", "frend", "x", "ok", "a" * 60, "naïve", "pаypal", ""]
    words += ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(1, 14))) for _ in range(400)]
    batched, alone = WordKeys(FastHasher()), WordKeys(FastHasher())
    got = batched.of_tokens(words + words[:20])
    for word, found in zip(words + words[:20], got):
        want = alone.of_token(word)
        if want is None:
            assert found is None, word
        else:
            assert found[0].tolist() == want[0].tolist() and found[1].tolist() == want[1].tolist(), word
    assert sum(f is None for f in got) >= 2  # function words and the empty token
