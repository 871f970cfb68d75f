"""The seeded sample generator (reappreg.data.sample) and its phrase banks (reappreg.data.vignettes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reappreg.data.canonical import write_canonical
from reappreg.guard.text import tokens
from reappreg.hashing import dvc_md5
from reappreg.data.sample import generate_sample


def test_sample_is_deterministic_per_seed(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_canonical(generate_sample(seed=3, reappraisals_per_vignette=15), a)
    write_canonical(generate_sample(seed=3, reappraisals_per_vignette=15), b)
    write_canonical(generate_sample(seed=4, reappraisals_per_vignette=15), tmp_path / "c")
    assert dvc_md5(a) == dvc_md5(b)
    assert dvc_md5(a) != dvc_md5(tmp_path / "c")


def test_sample_shape_matches_the_study_design():
    data = generate_sample()
    assert data.vignettes["vignette_id"].nunique() == 6
    assert data.vignettes["emotion"].notna().all()
    human = data.reappraisals[data.reappraisals["source"] == "human"]
    assert (human.groupby("vignette_id").size() == 100).all()
    # distinct authors within a vignette
    assert human.groupby("vignette_id")["author_id"].nunique().eq(100).all()
    raters = data.ratings.groupby("reappraisal_id")["rater_id"].nunique()
    assert raters.min() >= 3 and len(raters) == len(human)
    for dim in ["effectiveness", "empathy", "novelty", "specificity"]:
        assert data.ratings[dim].between(1, 7).all()
    sources = set(data.reappraisals["source"])
    assert {"gpt-4-0314", "claude-3-opus", "gemini-1.5-pro"} <= sources


def _human_with_scores(seed: int, **knobs):
    data = generate_sample(seed=seed, **knobs)
    mean = data.ratings.groupby("reappraisal_id")["effectiveness"].mean()
    human = data.reappraisals[data.reappraisals["source"] == "human"].set_index("reappraisal_id")
    return human.assign(score=mean)


def test_generator_defaults_are_the_params_schema_defaults():
    """ingest passes data.sample to generate_sample; the tests call it bare: both mean the same sample."""
    import inspect

    from reappreg.settings.data import SampleSettings

    defaults = {name: p.default for name, p in inspect.signature(generate_sample).parameters.items()}
    assert {k: (list(v) if isinstance(v, tuple) else v) for k, v in defaults.items()} == SampleSettings().model_dump()


def test_quality_varies_with_content_not_a_marker():
    """Better-rated texts differ in content: dismissive phrasing is rated low,
    texts naming a scenario-specific alternative explanation are rated high."""
    human = _human_with_scores(5)
    dismissive = human["text"].str.contains("overreacting|not a big deal|toughen up")
    assert human.loc[dismissive, "score"].mean() + 1.0 < human.loc[~dismissive, "score"].mean()
    # no hidden marker: identical texts under different vignettes are allowed, ids carry no score
    assert not human.index.str.contains("good|bad").any()


def _length_ranker_accuracy(human, column: str, margin: float) -> float:
    """Pairwise accuracy of "the longer text wins" on within-vignette human preference pairs."""
    correct = []
    for _, group in human.groupby("vignette_id"):
        score = group["score"].to_numpy(float)
        length = group[column].to_numpy(float)
        diff = score[:, None] - score[None, :]
        better, worse = np.nonzero((diff >= margin) & (diff > 0))
        d = length[better] - length[worse]
        correct.append((d > 0) + 0.5 * (d == 0))
    return float(np.concatenate(correct).mean())


@pytest.mark.parametrize("seed", [13, 5, 2])
def test_without_length_tilt_length_alone_does_not_rank_the_sample(seed):
    """length_tilt 0: some long texts are bad and some short ones good; a length-only
    ranker is <= 0.60 on the sample's preference pairs, in characters and in words, at
    every pair margin."""
    human = _human_with_scores(seed, length_tilt=0.0)
    human = human.assign(chars=human["text"].str.len(), words=human["text"].str.split().str.len())
    # the sample has both: long texts rated below the median and short ones above it
    long_text = human["chars"] > human["chars"].quantile(0.75)
    short_text = human["chars"] < human["chars"].quantile(0.25)
    median = human["score"].median()
    assert (human.loc[long_text, "score"] < median).mean() > 0.3
    assert (human.loc[short_text, "score"] > median).mean() > 0.3
    for column in ("chars", "words"):
        for margin in (0.0, 0.5, 1.0):
            assert _length_ranker_accuracy(human, column, margin) <= 0.60


def _length_chars_on_pairs(human, margin: float) -> tuple[float, float]:
    """(accuracy of "the longer text wins", share of pairs where the longer text is the
    worse one) on the preference pairs the reward models are evaluated on."""
    from reappreg.rm.dataset import preference_pairs
    from reappreg.rm.trivial import outcomes

    targets = human.reset_index().rename(columns={"score": "effectiveness"})
    pairs = preference_pairs(targets, margin)
    chars = targets["text"].str.len().to_numpy(float)
    return float(outcomes(chars, pairs).mean()), float((chars[pairs[:, 0]] < chars[pairs[:, 1]]).mean())


@pytest.mark.parametrize("seed", [13, 5, 2])
def test_default_sample_tempts_with_length_but_content_decides(seed):
    """The default length_tilt: the longer text wins on about 0.8 of the preference pairs
    (as on real expert ratings), yet the longer text is the worse one on a tenth of them,
    and the tilt orders the temptation."""
    from reappreg.settings.rm import RmSettings

    margin = RmSettings().evaluation.pair_margin
    accuracy, longer_worse = _length_chars_on_pairs(_human_with_scores(seed), margin)
    assert 0.75 <= accuracy <= 0.85
    assert longer_worse >= 0.10
    weaker, _ = _length_chars_on_pairs(_human_with_scores(seed, length_tilt=3.0), margin)
    untilted, _ = _length_chars_on_pairs(_human_with_scores(seed, length_tilt=0.0), margin)
    assert untilted + 0.1 < weaker < accuracy - 0.03


@pytest.mark.parametrize("seed", [13, 5, 2])
def test_length_tilt_changes_wording_not_ratings_given_content(seed):
    """Ratings depend on content only: among texts of similar length (one length quartile),
    dismissive texts are still rated clearly below the rest."""
    human = _human_with_scores(seed)
    human = human.assign(bin=pd.qcut(human["text"].str.len(), 4, labels=False))
    dismissive = human["text"].str.contains("overreacting|not a big deal|toughen up")
    compared = 0
    for _, group in human.groupby("bin"):
        flagged = dismissive.loc[group.index]
        if flagged.sum() >= 20 and (~flagged).sum() >= 20:
            compared += 1
            assert group.loc[flagged, "score"].mean() + 0.5 < group.loc[~flagged, "score"].mean()
    assert compared >= 2


def test_length_tilt_must_be_finite():
    from reappreg.errors import InputError

    with pytest.raises(InputError, match="length_tilt"):
        generate_sample(seed=1, reappraisals_per_vignette=2, length_tilt=float("nan"))


def test_heldout_wording_is_disjoint_from_the_human_phrase_banks():
    """The guard relies on it: no word 4-gram of any held-out answer occurs in a human text."""
    data = generate_sample(seed=13)
    is_human = data.reappraisals["source"] == "human"

    def grams(text: str) -> set[tuple[str, ...]]:
        words = tokens(text)
        return {tuple(words[i : i + 4]) for i in range(len(words) - 3)}

    human = set().union(*(grams(t) for t in data.reappraisals.loc[is_human, "text"]))
    heldout = set().union(*(grams(t) for t in data.reappraisals.loc[~is_human, "text"]))
    assert heldout and human
    assert not human & heldout


# ---------------------------------------------------------------- sentence counts


def _human(data):
    return data.reappraisals[data.reappraisals["source"] == "human"].reset_index(drop=True)


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"[a-z0-9']+", text.lower())


def test_null_sentence_counts_keep_the_texts_as_composed_byte_for_byte(tmp_path):
    """sentence_counts: null is the generator before the setting existed: every part its own
    sentence. Pinned by the tables' md5 (seed 3, 15 per vignette) as the generator wrote them."""
    write_canonical(generate_sample(seed=3, reappraisals_per_vignette=15, sentence_counts=None), tmp_path / "null")
    assert dvc_md5(tmp_path / "null") == "bdfba42111b28eed719ae9a045d4de6e.dir"


@pytest.fixture(scope="module")
def default_and_null():
    return generate_sample(), generate_sample(sentence_counts=None)


def test_default_sentence_counts_are_met_as_the_gate_counts_them(default_and_null):
    """Each share of data.sample.sentence_counts is met on the 600 human texts within a
    binomial tolerance (3.5 standard errors), counted with the format gate's own counter."""
    from reappreg.rm.gate import count_sentences
    from reappreg.settings.data import SampleSettings

    stated = SampleSettings().sentence_counts
    counts = _human(default_and_null[0])["text"].map(count_sentences)
    n = len(counts)
    assert n == 600
    assert set(counts) <= set(stated)
    for k, share in stated.items():
        tolerance = 3.5 * np.sqrt(share * (1 - share) / n)
        assert abs((counts == k).mean() - share) <= tolerance, (k, (counts == k).mean(), share)
    # the reference format (at most rm.ensemble.max_sentences sentences) is part of the default
    from reappreg.settings.rm import RmSettings

    assert (counts <= RmSettings().ensemble.max_sentences).mean() > 0.5


def test_sentence_counts_change_punctuation_only(default_and_null):
    """Same seed: every text's words (ignoring punctuation and case), its length, every rating
    and every held-out answer are those of sentence_counts: null."""
    shaped, null = default_and_null
    pd.testing.assert_frame_equal(shaped.ratings, null.ratings)
    pd.testing.assert_frame_equal(shaped.vignettes, null.vignettes)
    a, b = shaped.reappraisals, null.reappraisals
    pd.testing.assert_frame_equal(a.drop(columns="text"), b.drop(columns="text"))
    assert [_words(t) for t in a["text"]] == [_words(t) for t in b["text"]]
    assert a["text"].str.len().tolist() == b["text"].str.len().tolist()
    assert (a.loc[a["source"] != "human", "text"] == b.loc[b["source"] != "human", "text"]).all()
    changed = a["text"] != b["text"]
    assert changed.any() and not (changed & (a["source"] != "human")).any()
    # the pronoun keeps its capital where a part opening with it is joined on
    assert not a["text"].str.contains(r"; i ").any()


def test_a_count_above_a_texts_parts_keeps_its_natural_count():
    """Every sample text has 3-4 parts: asking for 4 sentences of each leaves the 3-part texts
    as composed (3 sentences) and the 4-part ones as composed too."""
    from reappreg.rm.gate import count_sentences

    shaped = _human(generate_sample(seed=2, reappraisals_per_vignette=20, sentence_counts={4: 1.0}))
    null = _human(generate_sample(seed=2, reappraisals_per_vignette=20, sentence_counts=None))
    assert shaped["text"].tolist() == null["text"].tolist()
    assert set(shaped["text"].map(count_sentences)) == {3, 4}
    one = _human(generate_sample(seed=2, reappraisals_per_vignette=20, sentence_counts={1: 1.0}))
    assert set(one["text"].map(count_sentences)) == {1}


@pytest.mark.parametrize("counts, message", [
    ({}, "sentence_counts is empty"),
    ({0: 1.0}, r"a count must be a whole number of sentences >= 1 \(got 0\)"),
    ({2: 0.5, 3: 0.6}, r"the shares must sum to 1 \(they sum to 1.1\)"),
    ({2: 1.2, 3: -0.2}, r"the share of 3 sentence\(s\) must be a positive number \(got -0.2\)"),
    ({2: float("nan")}, r"the share of 2 sentence\(s\) must be a positive number"),
])
def test_bad_sentence_counts_are_refused_by_the_generator(counts, message):
    from reappreg.errors import InputError

    with pytest.raises(InputError, match=message):
        generate_sample(seed=1, reappraisals_per_vignette=2, sentence_counts=counts)
