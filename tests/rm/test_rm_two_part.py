"""The two-part reward model (reappreg.rm.two_part): the weight's fit, the fixed cross-fitting
folds, fold-only fitting of the prior and the weight (a leak test that catches planted leaks),
the ranking model on the sample data, the self-contained folder and its pyfunc with both parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reappreg.errors import InputError
from reappreg.io import read_json, read_jsonl, write_jsonl
from reappreg.rm import two_part
from reappreg.settings.rm import RmSettings
from rm_fixtures import sample_pool, train_on_pool

SCENARIO = "Your friend did not reply to your long message for three days."
ANSWERS = [
    "It makes sense that you feel hurt; she may have been moved by your long message and wanted time to answer it well.",
    "You need to toughen up.",
    "Honestly, you are overreacting. Life goes on. Nothing to do.",  # three sentences: gated
    "",  # empty: gated, nothing to encode
]


# ----------------------------------------------------------------------------- the weight and the folds


def test_the_weight_is_within_vignette_least_squares_of_what_the_prior_leaves_bounded_at_zero() -> None:
    rng = np.random.default_rng(0)
    vignettes = np.repeat([f"v{i}" for i in range(5)], 40)
    level = np.repeat(rng.normal(0, 3, 5), 40)  # vignette levels the prior does not explain
    prior, residual = rng.normal(4, 1, 200), rng.normal(0, 1, 200)
    target = prior + 2.0 * residual + level + rng.normal(0, 0.1, 200)
    fit = two_part.fit_weight(prior, residual, target, vignettes)
    assert fit.weight == pytest.approx(2.0, abs=0.05) and fit.least_squares == pytest.approx(fit.weight)
    assert (fit.n_texts, fit.n_vignettes) == (200, 5)
    # the offset puts the ranking on the target's scale (a constant: no ordering changes)
    assert np.mean(two_part.ranking(prior, residual, fit)) == pytest.approx(np.mean(target))
    # a residual part that runs against the ratings gets no weight (and says what least squares wanted)
    against = two_part.fit_weight(prior, -residual, target, vignettes)
    assert against.weight == 0.0 and against.least_squares < -1.5
    # shifting whole vignettes up or down changes nothing: only within-vignette variation counts
    shifted = two_part.fit_weight(prior, residual + np.repeat(rng.normal(0, 5, 5), 40), target, vignettes)
    assert shifted.weight == pytest.approx(fit.weight)
    with pytest.raises(InputError, match="aligned, non-empty"):
        two_part.fit_weight(prior[:3], residual, target, vignettes)


def test_the_cross_fitting_folds_are_fixed_disjoint_and_cover_the_training_fold() -> None:
    ratings = pd.DataFrame({"vignette_id": [f"v{i % 7}" for i in range(70)], "reappraisal_id": [f"r{i}" for i in range(70)],
                            "effectiveness": np.arange(70.0)})
    splits = two_part.inner_splits(ratings, 3)
    assert [g for g, _, _ in splits] == ["g0", "g1", "g2"]
    held = [set(h["vignette_id"]) for _, _, h in splits]
    assert held == [{"v0", "v3", "v6"}, {"v1", "v4"}, {"v2", "v5"}]  # sorted ids dealt round robin: no seed
    for _, train, held_back in splits:
        assert set(train["vignette_id"]).isdisjoint(held_back["vignette_id"])
        assert len(train) + len(held_back) == len(ratings)
    assert [h.equals(again) for (_, _, h), (_, _, again) in zip(splits, two_part.inner_splits(ratings, 3))] == [True] * 3
    assert len(two_part.inner_splits(ratings, 50)) == 7  # at most one group per vignette
    with pytest.raises(InputError, match="cannot fit the weight by cross-fitting"):
        two_part.inner_splits(ratings[ratings["vignette_id"] == "v0"], 3)
    assert two_part.outer_of(two_part.inner_fold("lovo:v1", "g2")) == "lovo:v1"


# ----------------------------------------------------------------------------- fold-only fitting: the leak test

LEAK_FOLD, OTHER_FOLD = "lovo:v1", "lovo:v2"


def _leak_settings() -> RmSettings:
    return RmSettings.model_validate({"seeds": [0], "train": {"epochs": 3}, "two_part": {"inner_folds": 3},
                                      "evaluation": {"refit_on_all": False}})


def _with_heldout_ratings_reversed(pool: dict[str, Path], root: Path, vignette: str) -> dict[str, Path]:
    """The same pool with every rating of one vignette's texts turned upside down (1 <-> 7)."""
    rows = read_jsonl(pool["ratings"])
    for row in rows:
        if row["vignette_id"] == vignette:
            for dim in ("effectiveness", "empathy", "novelty", "specificity"):
                row[dim] = 8 - row[dim]
    write_jsonl(root / "ratings.jsonl", rows)
    return {**pool, "ratings": root / "ratings.jsonl"}


def _fold_fits(member: Path) -> dict[str, dict]:
    """What each checked fold of the two-part model was fitted with: its prior (on its held-out texts),
    its cross-fitting rows, and the weight the ensemble stage fits on what it gathers for the fold."""
    from reappreg.rm import ensemble

    rows = read_jsonl(member / "eval_predictions.jsonl")
    weights = two_part.fold_weights(ensemble._inner_frame([member], 0.5))
    return {fold: {
        "prior": sorted((r["reappraisal_id"], r["length_prior"]) for r in rows if r["fold"] == fold),
        "inner": sorted((r["fold"], r["reappraisal_id"], r["score"], r["length_prior"], r["effectiveness"])
                        for r in rows if r["fold"].startswith(f"inner:{fold}:")),
        "weight": weights[fold].to_json(),
        "held_out_labels": sorted((r["reappraisal_id"], r["effectiveness"]) for r in rows if r["fold"] == fold),
    } for fold in (LEAK_FOLD, OTHER_FOLD)}


def _train_pair(pool: dict[str, Path], root: Path) -> dict[str, Path]:
    """The same member trained on the pool and on the pool with the held-out fold's ratings reversed."""
    runs = {}
    for name, data in (("original", pool), ("perturbed", _with_heldout_ratings_reversed(pool, root / "ratings", "v1"))):
        runs[name] = train_on_pool(data, "length_residual", 0, _leak_settings(), name, out=root)[1] / "model"
    return runs


def _fits(runs: dict[str, Path]) -> tuple[dict, dict]:
    """Per run, per fold: what the fold was fitted with."""
    return _fold_fits(runs["original"]), _fold_fits(runs["perturbed"])


def _leaks(original: dict, perturbed: dict) -> list[str]:
    """What of the held-out fold's fit moved when only its held-out ratings changed (must be nothing)."""
    a, b = original[LEAK_FOLD], perturbed[LEAK_FOLD]
    assert a["held_out_labels"] != b["held_out_labels"], "the perturbation must reach the held-out fold's labels"
    return [part for part in ("prior", "inner", "weight") if a[part] != b[part]]


@pytest.fixture(scope="module")
def leak_pool(tmp_path_factory) -> dict[str, Path]:
    return sample_pool(tmp_path_factory.mktemp("leak"), per_vignette=8)


@pytest.fixture(scope="module")
def honest_runs(leak_pool, tmp_path_factory) -> dict[str, Path]:
    return _train_pair(leak_pool, tmp_path_factory.mktemp("honest"))


def test_the_prior_and_the_weight_of_a_fold_never_see_its_held_out_ratings(honest_runs) -> None:
    original, perturbed = _fits(honest_runs)
    assert _leaks(original, perturbed) == []
    # The test can fail: a fold that trains on the perturbed vignette does move, part by part.
    assert all(original[OTHER_FOLD][part] != perturbed[OTHER_FOLD][part] for part in ("prior", "inner", "weight"))


@pytest.mark.parametrize("plant", ["prior fitted on every rating", "cross-fitting over every vignette",
                                   "weight fitted with the held-out texts"])
def test_the_leak_test_catches_a_planted_leak(plant, leak_pool, honest_runs, tmp_path, monkeypatch) -> None:
    from reappreg.rm import ensemble

    runs = honest_runs
    if plant == "prior fitted on every rating":
        fit_prior = two_part.fit_prior
        monkeypatch.setattr(two_part, "fit_prior", lambda pool, ratings: fit_prior(pool, pool.ratings))
        runs = _train_pair(leak_pool, tmp_path / "runs")
    elif plant == "cross-fitting over every vignette":
        cross_fit = two_part.cross_fit
        monkeypatch.setattr(two_part, "cross_fit", lambda pool, outer, ratings, n, fit: cross_fit(pool, outer, pool.ratings, n, fit))
        runs = _train_pair(leak_pool, tmp_path / "runs")
    else:
        inner_frame = ensemble._inner_frame

        def with_held_out(member_dirs, k):  # the fold's own held-out texts join its weight's fit
            inner = inner_frame(member_dirs, k)
            outer, matrix = ensemble._fold_matrix(member_dirs, lambda f: f.startswith("lovo:"))
            outer["residual"] = ensemble.combine(matrix, k)
            outer["fold"] = "inner:" + outer["fold"] + ":held-out"
            return pd.concat([inner, outer[inner.columns]], ignore_index=True)

        monkeypatch.setattr(ensemble, "_inner_frame", with_held_out)
    expected = {"prior fitted on every rating": "prior", "cross-fitting over every vignette": "inner",
                "weight fitted with the held-out texts": "weight"}[plant]
    assert expected in _leaks(*_fits(runs))


# ----------------------------------------------------------------------------- the folder and its pyfunc


@pytest.fixture(scope="module")
def two_part_ensemble(honest_runs, tmp_path_factory) -> Path:
    """A one-seed two-part folder from the leak test's member (shipped fold: the holdout split's)."""
    from reappreg.rm.ensemble import build_ensemble

    out = tmp_path_factory.mktemp("ensemble") / "ensemble"
    build_ensemble([honest_runs["original"]], out, k=0.5, max_sentences=2, format_penalty=-1.0)
    return out


def test_the_folder_holds_both_parts_and_the_pyfunc_round_trips_them(honest_runs, two_part_ensemble, tmp_path):
    import shutil

    import mlflow

    from reappreg.rm import ensemble as ensemble_module
    from reappreg.rm.ensemble import load_ensemble
    from reappreg.rm.pyfunc import check_round_trip, save_pyfunc
    from reappreg.rm.trivial import LengthRegression

    manifest = read_json(two_part_ensemble / "ensemble.json")
    fit = two_part.WeightFit.from_json(manifest["two_part"]["weight"])
    # the shipped weight: fitted on the shipped fold's cross-fitting rows, as the metrics' fold weights are
    shipped = manifest["two_part"]["shipped_fold"]
    assert shipped == "holdout"  # refit_on_all off: the shipped heads are the holdout split's
    assert fit == two_part.fold_weights(ensemble_module._inner_frame([honest_runs["original"]], 0.5))[shipped]
    ensemble = load_ensemble(two_part_ensemble)
    scenarios = [SCENARIO] * len(ANSWERS)
    parts = ensemble.parts(scenarios, ANSWERS)
    # reward = what score() gives (the residual part behind the format gate): what GRPO reads
    np.testing.assert_allclose(parts["reward"], ensemble.score(scenarios, ANSWERS), rtol=0, atol=0)
    assert parts["reward"].tolist()[2:] == [-1.0, -1.0]
    np.testing.assert_allclose(parts["residual"][:3], ensemble.score_raw(scenarios[:3], ANSWERS[:3]), atol=1e-9)
    prior = LengthRegression.from_json(manifest["two_part"]["length_prior"]).predict(ANSWERS)
    np.testing.assert_allclose(parts["length_prior"], prior)
    np.testing.assert_allclose(parts["ranking"][:3], prior[:3] + fit.weight * parts["residual"][:3] + fit.offset)
    np.testing.assert_allclose(ensemble.score_ranking(scenarios[:3], ANSWERS[:3]), parts["ranking"][:3], atol=1e-9)
    assert np.isnan(parts["ranking"][3])
    # moved elsewhere, the folder scores the same; a saved MLflow model gives both parts back
    moved = tmp_path / "elsewhere" / "ensemble"
    shutil.copytree(two_part_ensemble, moved)
    pd.testing.assert_frame_equal(load_ensemble(moved).parts(scenarios, ANSWERS), parts)
    saved = save_pyfunc(moved, tmp_path / "saved")
    check_round_trip(moved, str(saved))
    served = mlflow.pyfunc.load_model(str(saved)).predict(pd.DataFrame({"scenario": scenarios, "answer": ANSWERS}),
                                                           params={"output": "parts"})
    pd.testing.assert_frame_equal(served.reset_index(drop=True), parts, check_exact=False, atol=1e-9, rtol=0)


def test_the_round_trip_check_fails_on_a_model_that_lost_a_part(two_part_ensemble, tmp_path) -> None:
    import shutil

    from reappreg.errors import ReappregError
    from reappreg.io import write_json
    from reappreg.rm.pyfunc import check_round_trip, save_pyfunc

    other = tmp_path / "other"
    shutil.copytree(two_part_ensemble, other)
    manifest = read_json(other / "ensemble.json")
    manifest["two_part"]["weight"]["weight"] = 2 * manifest["two_part"]["weight"]["weight"] + 1  # same reward, another ranking
    write_json(other / "ensemble.json", manifest)
    saved = save_pyfunc(other, tmp_path / "saved")
    with pytest.raises(ReappregError, match="parts"):
        check_round_trip(two_part_ensemble, str(saved))


def test_members_that_disagree_about_the_recipe_are_refused(honest_runs, tmp_path) -> None:
    import shutil

    from reappreg.io import write_json
    from reappreg.rm.ensemble import build_ensemble

    config = read_json(honest_runs["original"] / "rm_config.json")
    assert config["two_part"]["length_prior"]["features"] == ["characters", "words", "log(1 + characters)"]
    odd = tmp_path / "seed_1"
    shutil.copytree(honest_runs["original"], odd)
    config.update(seed=1, two_part={**config["two_part"], "inner_folds": 5})
    write_json(odd / "rm_config.json", config)
    with pytest.raises(InputError, match="disagree about the two-part recipe"):
        build_ensemble([honest_runs["original"], odd], tmp_path / "e", k=0.5, max_sentences=2, format_penalty=-1.0)


# ----------------------------------------------------------------------------- the default recipe on the sample


@pytest.mark.slow
def test_the_ranking_model_beats_its_strongest_rival_and_its_reward_part_beats_chance_where_length_misleads(
        tmp_path) -> None:
    """The default recipe (three length_residual seeds, 40 epochs, cross-fitted) on the sample data:
    the claims the registry gate reads."""
    from reappreg.rm.ensemble import build_ensemble, evaluate_ensemble

    pool = sample_pool(tmp_path / "pool")
    settings = RmSettings()
    members = [train_on_pool(pool, "length_residual", seed, settings, f"lr_{seed}")[1] / "model" for seed in settings.seeds]
    metrics, table = evaluate_ensemble(members, k=0.5, pair_margin=1.0, bins=4, plots_dir=tmp_path / "plots",
                                       objective="length_residual", format_penalty=-1.0, min_pairs=20)
    lovo = metrics["lovo"]
    ranking, residual = lovo["ranking"]["trivial_baselines"], lovo["residual"]["trivial_baselines"]
    gate = metrics["beats_length_baseline"]
    assert gate["passed"] and gate["cluster_low"] > 0 and gate["n_vignettes"] == 6
    assert gate["rival"] == ranking["vs_rival"]["ranker"] and gate["rival_accuracy"] == max(gate["rivals"].values())
    assert gate["reward_longer_is_worse"]["part"] == "residual"
    assert gate["reward_longer_is_worse"]["accuracy"] == residual["longer_is_worse"]["model"]["accuracy"]
    assert gate["reward_longer_is_worse"]["low"] > 0.5
    # the prior adds what length knows: the two parts rank better than the residual part alone,
    # and the residual part beats the ranking model where the longer text is the worse one
    assert ranking["model"]["accuracy"] > residual["model"]["accuracy"]
    assert residual["longer_is_worse"]["model"]["accuracy"] > ranking["longer_is_worse"]["model"]["accuracy"]
    # every outer fold has its own weight, each from its own cross-fitting rows
    assert set(lovo["weights"]) == {f"lovo:v{i}" for i in range(1, 7)}
    assert all(w["weight"] >= 0 and w["n_vignettes"] == 5 for w in lovo["weights"].values())
    assert metrics["two_part"]["enabled"] and metrics["two_part"]["shipped_fold"] == "final"
    assert metrics["recipe"]["pays_for_length"] is False and "residual part alone" in metrics["recipe"]["reward"]
    assert list(table["model"])[:6] == ["seed_0", "seed_1", "seed_2", "ensemble_mean", "residual_k0.5", "two_part"]
    assert metrics["baselines"]["lovo"]["model"] == lovo["ranking"]["pairwise_accuracy"]
    # the folder ships the weight the metrics report (the whole pool's cross-fitting)
    manifest = build_ensemble(members, tmp_path / "ensemble", k=0.5, max_sentences=2, format_penalty=-1.0)
    assert manifest["two_part"]["weight"]["weight"] == metrics["two_part"]["weight"]
