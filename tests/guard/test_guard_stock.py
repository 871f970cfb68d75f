"""Stock phrasing weighted by measured frequency: honest texts built from common phrasing pass,
copies still fail, the weights follow the counts (held-out scenarios, a reference corpus), and
the certificate and its audit carry the reference corpus."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from guard_support.honest import stock_phrases, stock_texts

from reappreg.guard import AnswerMeta, FastHasher, GuardPaths, HeldoutIndex, SourceSpec, TextUnit, audit, check_units, run_guard
from reappreg.io import write_jsonl
from reappreg.settings.guard import GuardSettings


def config(**stock) -> GuardSettings:
    return GuardSettings.model_validate({"semantic": {"enabled": False}, "stock": stock})


@pytest.fixture(scope="module")
def sample():
    from reappreg.data.sample import generate_sample

    frame = generate_sample(seed=11).reappraisals
    return frame[frame.source == "human"].to_dict("records"), frame[frame.source != "human"].to_dict("records")


def index_of(heldout, settings: GuardSettings) -> HeldoutIndex:
    return HeldoutIndex.build([AnswerMeta(a["reappraisal_id"], a["source"], a["vignette_id"]) for a in heldout],
                              [a["text"] for a in heldout], settings, FastHasher())


def flagged(index: HeldoutIndex, texts: list[str]) -> set[str]:
    return {h.record_id for h in check_units(index, [TextUnit("t", f"r{i}", "text", t) for i, t in enumerate(texts)])}


def test_honest_texts_built_from_the_answers_stock_phrases_pass(sample):
    """Phrases measured as common in the held-out answers (in 3+ answers to 2+ scenarios: the
    openers and closers) strung with the writer's own words: at most 1% flagged, where
    counting every shared gram at full weight flags several times that."""
    human, heldout = sample
    phrases = stock_phrases([a["text"] for a in heldout], min_docs=3, groups=[a["vignette_id"] for a in heldout],
                            min_groups=2)
    assert len(phrases) >= 10
    texts = stock_texts(random.Random(4), phrases, [r["text"] for r in human], 600)
    weighted = flagged(index_of(heldout, config()), texts)
    unweighted = flagged(index_of(heldout, config(enabled=False)), texts)
    assert len(weighted) <= 0.01 * len(texts), sorted(weighted)[:10]
    assert len(unweighted) > 0.02 * len(texts)  # the attack class is real: full weights flag them


def test_honest_texts_built_from_a_reference_corpus_stock_phrases_pass(sample, sharma_csv):
    """Phrases common in Sharma et al.'s reframes (3+ reframes), and the answers' own: at most
    1% flagged with the reframes as the reference corpus, and without it."""
    import pandas as pd

    human, heldout = sample
    reframes = pd.read_csv(sharma_csv).reframe.tolist()
    phrases = stock_phrases(reframes, min_docs=3)
    phrases += stock_phrases([a["text"] for a in heldout], min_docs=3, groups=[a["vignette_id"] for a in heldout],
                             min_groups=2)
    texts = stock_texts(random.Random(6), phrases, [r["text"] for r in human], 600)
    for settings in (config(), config(reference=str(sharma_csv), reference_field="reframe")):
        found = flagged(index_of(heldout, settings), texts)
        assert len(found) <= 0.01 * len(texts), (settings.stock, sorted(found)[:10])


def test_copies_that_carry_stock_phrases_are_still_caught(sample):
    """A verbatim answer (its stock opener and closer included) scores 1.0, and the answer inside
    60 words of filler is still flagged for it."""
    human, heldout = sample
    index = index_of(heldout, config())
    rng = random.Random(2)
    filler = " ".join(r["text"] for r in human[:40]).split()
    chosen = rng.sample(heldout, 40)
    units = []
    for k, a in enumerate(chosen):
        start = rng.randrange(len(filler) - 120)
        units += [TextUnit("t", f"copy{k}", "text", a["text"]),
                  TextUnit("t", f"filler{k}", "text", " ".join(filler[start : start + 60]) + " " + a["text"])]
    hits = check_units(index, units)
    for k, a in enumerate(chosen):
        for record in (f"copy{k}", f"filler{k}"):
            mine = [h for h in hits if h.record_id == record and h.answer_id == a["reappraisal_id"]]
            assert mine, (record, a["text"])
        assert max(h.score for h in hits if h.record_id == f"copy{k}" and h.answer_id == a["reappraisal_id"]) == 1.0


def test_weights_follow_scenario_and_reference_counts(tmp_path):
    """A phrase in answers to one scenario weighs 1 however many answers share it; in answers to
    k > contexts scenarios it weighs contexts / k; common in the reference corpus, it weighs
    less again. Training texts play no part (the index never sees them)."""
    shared = "it makes complete sense to feel this way right now"
    content = ["the dog ate my homework on the bus again", "my manager moved the review to friday without warning",
               "the neighbours painted their fence bright purple overnight", "our flight was cancelled twice in one week",
               "the landlord kept the deposit for a scratch on the door", "my sister borrowed the car and returned it empty"]
    answers = [f"{shared} because {c}" for c in content] + [f"{content[0]} and yet it is fine"]
    metas = [AnswerMeta(f"a{k}", vignette_id=f"v{k}") for k in range(len(content))] + [AnswerMeta("b0", vignette_id="v0")]
    index = HeldoutIndex.build(metas, answers, config(contexts=2), FastHasher())
    from reappreg.guard.hashing import _NGRAM

    def weight_of(words: str) -> float:
        (keys, _), = FastHasher().grams_many([words.split()], [(5, _NGRAM)])
        pos, found = index.ngrams.lookup(keys[:1])
        assert found[0]
        return float(index.ngrams.weights[pos[0]])

    assert weight_of("it makes complete sense to") == pytest.approx(2 / 6)   # 6 scenarios
    assert weight_of("the dog ate my homework") == 1.0                       # 2 answers, one scenario
    reference = tmp_path / "reference.jsonl"
    write_jsonl(reference, [{"text": f"Honestly, it makes complete sense to feel upset {i}"} for i in range(40)]
                + [{"text": f"An unrelated document number {i}"} for i in range(160)])
    with_reference = HeldoutIndex.build(metas, answers, config(contexts=2, reference=str(reference)), FastHasher())
    (keys, _), = FastHasher().grams_many([["it", "makes", "complete", "sense", "to"]], [(5, _NGRAM)])
    pos, _ = with_reference.ngrams.lookup(keys)
    # 40 of 200 reference documents hold it; 0.005 x 200 = 1 may: weight 1/40, below 2/6
    assert with_reference.ngrams.weights[pos[0]] == pytest.approx(1 / 40)
    assert with_reference.reference.docs == 200 and np.all(with_reference.ngrams.weights > 0)


def test_the_certificate_records_the_reference_corpus_and_the_audit_refuses_a_changed_one(split_data, tmp_path):
    train_dir, heldout = split_data
    reference = tmp_path / "reference.jsonl"
    write_jsonl(reference, [{"text": "It may help to recognise that people forget things when they are busy."}] * 5)
    out = tmp_path / "out"
    paths = GuardPaths(guarded_dir=out / "guarded", certificate_path=out / "certificate.json",
                       quarantine_path=out / "quarantine.jsonl", sketch_path=out / "sketch.json",
                       secret_dir=out / "secret", sketch_key_path=out / "sketch.key")
    settings = config(reference=str(reference))
    outcome = run_guard(heldout=SourceSpec(heldout, "answer_id", ("text",)),
                        train=[SourceSpec.parse(f"{train_dir / 'reappraisals.jsonl'}:reappraisal_id:text")],
                        settings=settings, paths=paths)
    cert = outcome.certificate
    assert outcome.passed
    assert cert["detectors"]["stock"]["reference"] == str(reference)
    stock = cert["heldout"]["stock"]
    assert stock["reference"]["documents"] == 5 and stock["reference"]["md5"]
    assert stock["chars"]["weighted_as_stock"] > 0 and stock["ngram"]["grams"] > 0
    sketch = json.loads((out / "sketch.json").read_text())
    assert sketch["reference"]["documents"] == 5 and sketch["reference"]["counts"]
    assert audit(out / "certificate.json", secret_dir=out / "secret").ok
    reference.write_text(reference.read_text() + json.dumps({"text": "one more"}) + "\n")
    report = audit(out / "certificate.json", secret_dir=out / "secret")
    assert any("stock reference corpus" in p and "changed since certified" in p for p in report.problems)
