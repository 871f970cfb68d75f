"""Attribution: a hit names every held-out answer its matched text is closest to, with the
share of the matched text that separates them, and never one answer where two match equally."""

from __future__ import annotations

import random
import re

import pytest

from reappreg.guard import AnswerMeta, FastHasher, Group, HeldoutIndex, TextUnit, check_units
from reappreg.settings.guard import GuardSettings


def config() -> GuardSettings:
    return GuardSettings(semantic={"enabled": False})


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    """Seeded sentences of 10 to 16 words drawn from the vocabulary of the sample's human
    reappraisals: the words of real texts, in orders no two sentences share (the sample's own
    sentences come from phrase banks and share phrasing, which would blur what is tested)."""
    from reappreg.data.sample import generate_sample

    frame = generate_sample(seed=5).reappraisals
    vocabulary = sorted({w for text in frame[frame.source == "human"].text for w in re.findall(r"[a-z]{3,}", text.lower())})
    rng = random.Random(3)
    return [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(10, 16))).capitalize() + "." for _ in range(400)]


def siblings(sentences: list[str], count: int):
    """``count`` pairs of sibling answers sharing a core sentence: A (core in a long frame) and
    B (core with a short closer), each pair for its own scenario; and the unused sentences."""
    pool = iter(sentences)
    answers, metas, cores = [], [], []
    for k in range(count):
        core, before, after, closer = next(pool), next(pool), next(pool), next(pool)
        closer = " ".join(closer.split()[:4])  # B is mostly the core: a copy of the core is over B's threshold
        answers += [f"{before} {core} {after}", f"{core} {closer}"]
        metas += [AnswerMeta(f"A{k}", "gpt-4-0314", f"v{k}"), AnswerMeta(f"B{k}", "claude-3-opus", f"v{k}")]
        cores.append(core)
    return answers, metas, cores, list(pool)


def test_a_core_shared_by_two_answers_names_both_whichever_is_over_the_threshold(sentences):
    """The core of two sibling answers in a frame of new words: whichever answer a detector is
    over its threshold for (the short one, by containment), the hit names both as closest, with
    no share of the matched text separating them; unseen cores and frames, 12 pairs."""
    answers, metas, cores, rest = siblings(sentences, 12)
    index = HeldoutIndex.build(metas, answers, config(), FastHasher())
    units = [TextUnit("t", f"core{k}", "text", f"{rest[2 * k]} {core} {rest[2 * k + 1]}") for k, core in enumerate(cores)]
    hits = check_units(index, units)
    for k in range(len(cores)):
        found = [h for h in hits if h.record_id == f"core{k}"]
        assert found, k  # the core is copied: some detector flags it
        for h in found:
            assert {f"A{k}", f"B{k}"} <= set(h.closest), (k, h.answer_id, h.detector, h.closest)


def test_a_whole_answer_names_it_alone_and_says_by_how_much(sentences):
    """A verbatim answer: its hit names that answer alone as closest, separated from its sibling
    by the share of the text only it holds; the sibling's own hit (its core is in the text)
    names the copied answer beside it."""
    answers, metas, cores, _ = siblings(sentences, 10)
    index = HeldoutIndex.build(metas, answers, config(), FastHasher())
    units = [TextUnit("t", f"copy{k}", "text", answers[2 * k]) for k in range(len(cores))]
    hits = check_units(index, units)
    for k in range(len(cores)):
        own = [h for h in hits if h.record_id == f"copy{k}" and h.answer_id == f"A{k}"]
        assert own and all(h.closest == [f"A{k}"] and 0 < h.separation <= 1 for h in own), k
        for h in (h for h in hits if h.record_id == f"copy{k}" and h.answer_id == f"B{k}"):
            assert f"A{k}" in h.closest
    record = hits[0].to_record(with_shared=False)  # what the certificate and the quarantine file carry
    assert {"closest", "separation"} <= set(record)


def test_pieces_over_records_name_every_sibling_they_fit(sentences):
    """A fragments hit (the pieces of an answer in several records of one author) attributes
    over every contributing record."""
    answers, metas, _, rest = siblings(sentences, 6)
    index = HeldoutIndex.build(metas, answers, config(), FastHasher())
    words = answers[0].split()
    thirds = [" ".join(words[i * len(words) // 3 : (i + 1) * len(words) // 3]) for i in range(3)]
    units = [TextUnit("t", f"p{i}", "text", f"{rest[i]} {piece} {rest[i + 3]}") for i, piece in enumerate(thirds)]
    hits = check_units(index, units, groups=[Group("t", "author_id=x", (0, 1, 2))])
    fragments = [h for h in hits if h.detector == "fragments" and h.answer_id == "A0"]
    for h in fragments:
        assert "A0" in h.closest and h.separation is not None
    assert hits and all("A0" in h.closest or "B0" in h.closest for h in hits)


def test_honest_texts_have_no_hit_to_attribute(sentences):
    answers, metas, _, rest = siblings(sentences, 12)
    index = HeldoutIndex.build(metas, answers, config(), FastHasher())
    honest = [TextUnit("t", f"h{i}", "text", " ".join(rest[i : i + 3])) for i in range(0, len(rest) - 3, 3)]
    assert len(honest) >= 20 and check_units(index, honest) == []
