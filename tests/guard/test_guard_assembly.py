"""Assembly across records: an answer cut into pieces over several records (each piece buried in
filler) is caught with its records named, within the stated bounds (``fragments.min_piece``
letters per piece, ``fragments.adjacent`` consecutive records, or a declared grouping), and
honest records that share stock phrases and groups are not."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from guard_support.disguise import word_filler
from guard_support.honest import stock_phrases, stock_texts
from guard_support.splits import PLACEMENTS, piece_content, place, split_answer

from reappreg.guard import (AnswerMeta, FastHasher, GuardPaths, HeldoutIndex, SourceSpec, check_units, fragment_groups,
                            read_source, run_guard)
from reappreg.io import read_jsonl, write_jsonl
from reappreg.settings.guard import GuardSettings


def config(**fragments) -> GuardSettings:
    return GuardSettings.model_validate({"semantic": {"enabled": False}, "fragments": fragments})


@pytest.fixture(scope="module")
def sample():
    from reappreg.data.sample import generate_sample

    frame = generate_sample(seed=23).reappraisals  # a seed no other guard test uses: unseen answers
    human = frame[frame.source == "human"].text.tolist()
    heldout = frame[frame.source != "human"]
    return human, [{"id": r, "vignette": v, "text": t} for r, v, t in zip(heldout.reappraisal_id, heldout.vignette_id, heldout.text)]


def check_file(tmp_path: Path, rows: list[dict], index: HeldoutIndex, settings: GuardSettings):
    path = tmp_path / "train.jsonl"
    write_jsonl(path, rows)
    source = read_source(SourceSpec(path, "id", ("text",)))
    return check_units(index, source.units, groups=fragment_groups([source], settings))


def test_answers_split_over_records_are_caught_with_their_records_named(sample, tmp_path):
    """2 to 6 pieces per answer (by letters and at clauses), 0 to 200 words of filler around
    each, adjacent / shuffled / interleaved within 8 records / anywhere under one author: every
    record holding an in-scope piece is flagged for its answer, and honest records (with stock
    phrasing, several per author, next to the planted ones) are not."""
    human, answers = sample
    settings = config()
    index = HeldoutIndex.build([AnswerMeta(a["id"], None, a["vignette"]) for a in answers], [a["text"] for a in answers],
                               settings, FastHasher())
    rng = random.Random(31)
    filler = word_filler(human, rng)
    splits = [split_answer(rng, a, answers[a]["text"], pieces, rng.choice([0, 15, 40, 120, 200]), placement, filler,
                           by_clause=rng.random() < 0.5)
              for pieces in range(2, 7) for placement in PLACEMENTS for _ in range(4)
              for a in [rng.randrange(len(answers))]]
    phrases = stock_phrases([a["text"] for a in answers], min_docs=3, groups=[a["vignette"] for a in answers], min_groups=2)
    honest = human[:300] + stock_texts(rng, phrases, human, 300)
    texts, authors = place(rng, honest, splits, span=8)
    rows = [{"id": f"r{i}", "text": t, "author_id": a or f"h{rng.randrange(150)}"} for i, (t, a) in enumerate(zip(texts, authors))]
    hits = check_file(tmp_path, rows, index, settings)
    caught: dict[str, set[str]] = defaultdict(set)
    for h in hits:
        caught[h.record_id].update({h.answer_id, *h.closest})
    checked = 0
    for s in splits:
        answer = answers[s.answer]["id"]
        content = [piece_content(index, piece, s.answer) for piece in s.pieces]
        needed = [f"r{row}" for row, c in zip(s.records, content) if c >= settings.fragments.min_piece]
        # within the bounds: in-scope pieces in 2+ records that together cover the answer
        whole = float(index.letters.lengths[s.answer] * index.letters.mean_weight[s.answer])
        if len(needed) >= 2 and sum(c for c in content if c >= settings.fragments.min_piece) >= 1.1 * settings.fragments.coverage * whole:
            checked += 1
            missed = [r for r in needed if answer not in caught.get(r, set())]
            assert not missed, (s.placement, s.pieces, s.filler, missed)
    assert checked >= 30
    planted = {f"r{row}" for s in splits for row in s.records}
    assert {h.record_id for h in hits} - planted == set()
    fragments = [h for h in hits if h.detector == "fragments"]
    assert fragments and all(h.record_id in h.members and h.group for h in fragments)


def test_pieces_further_apart_than_the_bound_are_not_put_together_without_a_declared_group(sample, tmp_path):
    """Thirds of an answer 30 records apart in one file: no adjacency window holds two of them;
    under one author_id (a grouping the input declares) they are caught; with a window of 40
    records they are caught too."""
    human, answers = sample
    long_answers = [k for k, a in enumerate(answers) if len(a["text"]) > 150]
    rng = random.Random(5)
    filler = word_filler(human, rng)
    settings = config()
    index = HeldoutIndex.build([AnswerMeta(a["id"], None, a["vignette"]) for a in answers], [a["text"] for a in answers],
                               settings, FastHasher())
    for k in long_answers:  # an answer whose thirds are all in scope (its own words, 25+ letters each)
        split = split_answer(rng, k, answers[k]["text"], 3, 20, "adjacent", filler)
        if all(piece_content(index, p, k) >= settings.fragments.min_piece for p in split.pieces):
            break
    else:
        pytest.fail("no answer with three in-scope thirds")
    honest = human[:100]
    rows = [{"id": f"h{i}", "text": t, "author_id": f"h{i}"} for i, t in enumerate(honest)]
    for j, text in enumerate(split.texts):
        rows.insert(30 * j + 5, {"id": f"p{j}", "text": text, "author_id": f"x{j}"})
    piece_hits = [h for h in check_file(tmp_path, rows, index, settings) if h.record_id.startswith("p")]
    assert not [h for h in piece_hits if h.detector == "fragments"]
    same_author = [{**r, "author_id": "one"} if r["id"].startswith("p") else r for r in rows]
    found = {h.record_id for h in check_file(tmp_path, same_author, index, settings) if h.detector == "fragments"}
    assert found == {"p0", "p1", "p2"} - {h.record_id for h in piece_hits}
    wide = config(adjacent=80)
    index_wide = HeldoutIndex.build(index.answers, [a["text"] for a in answers], wide, FastHasher())
    assert {h.record_id for h in check_file(tmp_path, rows, index_wide, wide) if h.detector == "fragments"} == found


def test_the_certificate_states_the_bounds(split_data, tmp_path):
    train_dir, heldout = split_data
    out = tmp_path / "out"
    settings = config(min_piece=30, adjacent=6)
    outcome = run_guard(heldout=SourceSpec(heldout, "answer_id", ("text",)),
                        train=[SourceSpec.parse(f"{train_dir / 'reappraisals.jsonl'}:reappraisal_id:text")],
                        settings=settings,
                        paths=GuardPaths(guarded_dir=out / "guarded", certificate_path=out / "certificate.json",
                                         quarantine_path=out / "quarantine.jsonl", sketch_path=out / "sketch.json",
                                         secret_dir=out / "secret", sketch_key_path=out / "sketch.key"))
    fragments = outcome.certificate["detectors"]["fragments"]
    assert (fragments["min_piece"], fragments["adjacent"]) == (30, 6)
    assert outcome.certificate["groups"]["adjacent"] == 1
    assert len(read_jsonl(train_dir / "reappraisals.jsonl")) > 6
