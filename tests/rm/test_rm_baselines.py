"""Trivial rankers, length-controlled accuracy and the ``beats_length_baseline`` gate
(reappreg.rm.trivial), and the format gate's effect kept apart from the RM metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reappreg.rm.ensemble import format_gate_effect
from reappreg.rm.trivial import (
    GATE_RULE,
    LengthRegression,
    beats_length_gate,
    compare_with_rankers,
    figure,
    length_features,
    ranker_scores,
)


def _pool(n_vignettes: int = 6, per_vignette: int = 30, seed: int = 0, length_effect: float = 0.0) -> pd.DataFrame:
    """Texts whose quality is a hidden marker count and whose length is independent noise
    (or, with ``length_effect``, partly quality)."""
    rng = np.random.default_rng(seed)
    rows = []
    for v in range(n_vignettes):
        for i in range(per_vignette):
            quality = rng.normal()
            words = max(1, int(20 + 8 * rng.normal() + length_effect * 8 * quality))
            rows.append({"vignette_id": f"v{v}", "effectiveness": 4 + 1.2 * quality,
                         "text": " ".join(["word"] * words), "quality": quality})
    return pd.DataFrame(rows)


def _rankers(frame: pd.DataFrame, fold: str = "lovo") -> dict[str, np.ndarray]:
    regression = LengthRegression(frame["text"].tolist(), frame["effectiveness"].to_numpy())
    return ranker_scores(frame["text"].tolist(), np.zeros(len(frame)), regression, fold)


def test_length_rankers_and_length_controlled_accuracy_are_counted_on_the_same_pairs() -> None:
    targets = pd.DataFrame({"vignette_id": ["a", "a", "a", "b", "b"], "effectiveness": [1.0, 3.0, 5.0, 5.0, 1.0],
                            "text": ["x" * 50, "x" * 10, "x" * 30, "y" * 5, "y" * 40]})
    # pairs (better, worse): a: (1,0) (2,0) (2,1); b: (3,4)
    rankers = _rankers(targets)
    model = np.array([0.0, 1.0, 2.0, 1.0, 0.0])  # orders every pair right
    out = compare_with_rankers(model, targets, rankers, margin=1.0)
    assert out["model"]["accuracy"] == 1.0 and out["model"]["n_pairs"] == 4 and out["model"]["n_vignettes"] == 2
    # length in chars: (1,0) 10<50 wrong, (2,0) 30<50 wrong, (2,1) 30>10 right, (3,4) 5<40 wrong
    assert out["rankers"]["length_chars"]["accuracy"] == pytest.approx(0.25)
    assert out["model_minus_ranker"]["length_chars"]["difference"] == pytest.approx(0.75)
    # the longer text is the worse one in 3 of 4 pairs; length gets all of those wrong
    assert out["longer_is_worse"]["share_of_pairs"] == pytest.approx(0.75)
    assert out["longer_is_worse"]["model"]["n_pairs"] == 3
    assert out["longer_is_worse"]["length_chars"]["accuracy"] == 0.0
    assert sum(b["model"]["n_pairs"] for b in out["by_length_difference"]) == 4
    assert set(out["per_vignette"]) == {"a", "b"}
    for fig in (out["model"], out["rankers"]["length_chars"]):
        assert fig["wilson_low"] <= fig["accuracy"] <= fig["wilson_high"]


def test_intervals_cover_their_point_and_the_cluster_interval_needs_two_vignettes() -> None:
    rng = np.random.default_rng(1)
    correct = (rng.random(400) < 0.7).astype(float)
    clusters = np.repeat([f"v{i}" for i in range(6)], [100, 80, 60, 60, 50, 50])
    fig = figure(correct, clusters)
    assert fig["cluster_low"] < fig["accuracy"] < fig["cluster_high"]
    assert fig["wilson_low"] < fig["accuracy"] < fig["wilson_high"]
    assert fig["n_pairs"] == 400 and fig["n_vignettes"] == 6
    one = figure(correct, np.array(["v1"] * 400))
    assert one["cluster_low"] is None and one["wilson_low"] is not None


def test_random_ranker_is_seeded_per_fold_and_near_chance() -> None:
    frame = _pool(per_vignette=60)
    a, b = _rankers(frame, "lovo:v1")["random"], _rankers(frame, "lovo:v1")["random"]
    assert np.array_equal(a, b)
    assert not np.array_equal(a, _rankers(frame, "lovo:v2")["random"])
    accuracies = [compare_with_rankers(frame["quality"].to_numpy(), frame, _rankers(frame, f"fold{i}"), margin=1.0)
                  ["rankers"]["random"]["accuracy"] for i in range(20)]
    assert abs(np.mean(accuracies) - 0.5) < 0.03


def test_length_regression_uses_length_features_only() -> None:
    texts = ["a b", "a b c d", "a b c d e f g h"]
    regression = LengthRegression(texts, np.array([1.0, 2.0, 3.0]))
    same_length = ["x y", "x y z w", "x y z w v u t s"]  # other words, same lengths
    assert np.allclose(regression.predict(texts), regression.predict(same_length))
    assert length_features(["ab cd"]).tolist() == [[5.0, 2.0, np.log1p(5.0)]]


def test_gate_passes_a_model_that_reads_quality_and_fails_length_in_disguise() -> None:
    frame = _pool(length_effect=1.0)
    rankers = _rankers(frame)
    good = compare_with_rankers(frame["quality"].to_numpy(), frame, rankers, margin=1.0)
    gate = beats_length_gate(good)
    assert gate["passed"] and gate["cluster_low"] > 0 and gate["n_vignettes"] == 6

    # Attacks: the length ranker itself, length plus noise, a monotone transform of word
    # count, and a tiny "improvement" over length -- none may pass.
    chars = rankers["length_chars"]
    rng = np.random.default_rng(2)
    attacks = {
        "length": chars,
        "length + noise": chars + rng.normal(0, 1, len(chars)),
        "log words": np.log(rankers["length_words"]),
        "length, 2% of pairs fixed": chars + 1e-3 * frame["quality"].to_numpy() * (rng.random(len(chars)) < 0.02),
    }
    for name, scores in attacks.items():
        verdict = beats_length_gate(compare_with_rankers(scores, frame, rankers, margin=1.0))
        assert not verdict["passed"], name
    # The gate names the rival it compared with: the most accurate ranker on these pairs.
    assert gate["rival"] == max(gate["rivals"], key=gate["rivals"].get)
    assert gate["difference"] == pytest.approx(gate["model_accuracy"] - gate["rival_accuracy"])
    assert "not checked" in gate["checked"] and gate["rule"] == GATE_RULE


def _longer_is_worse_pool(seed: int = 3) -> pd.DataFrame:
    """Ratings that fall with length (plus a quality signal): raw length ranks these pairs worse than
    chance, while a regression on length features learns the sign and ranks them well."""
    rng = np.random.default_rng(seed)
    rows = []
    for v in range(6):
        for i in range(30):
            quality, words = rng.normal(), int(rng.integers(5, 60))
            rows.append({"vignette_id": f"v{v}", "text": " ".join(["word"] * words), "quality": quality,
                         "effectiveness": 5.0 - 0.06 * words + 0.6 * quality})
    return pd.DataFrame(rows)


def test_the_gate_compares_with_the_strongest_rival_even_when_it_is_the_length_regression() -> None:
    frame = _longer_is_worse_pool()
    rankers = _rankers(frame)
    quality_only = frame["quality"].to_numpy()
    result = compare_with_rankers(quality_only, frame, rankers, margin=1.0)
    accuracy = {name: fig["accuracy"] for name, fig in result["rankers"].items()}
    # the case the old rule missed: the regression beats both raw lengths by far
    assert accuracy["length_regression"] > max(accuracy["length_chars"], accuracy["length_words"]) + 0.3
    gate = beats_length_gate(result)
    assert gate["rival"] == "length_regression" and gate["rival_accuracy"] == accuracy["length_regression"]
    # A model that reads quality but not length beats raw length by a wide margin ...
    assert result["model"]["accuracy"] > max(accuracy["length_chars"], accuracy["length_words"]) + 0.2
    for name in ("length_chars", "length_words"):
        assert result["model_minus_ranker"][name]["cluster_low"] > 0
    # ... and still fails: against the strongest rival its interval does not clear 0.
    assert gate["cluster_low"] <= 0 and not gate["passed"]
    # The rival's own scores plus a little quality are a model that does beat it.
    both = rankers["length_regression"] + 0.6 * frame["quality"].to_numpy()
    passed = beats_length_gate(compare_with_rankers(both, frame, rankers, margin=1.0))
    assert passed["rival"] == "length_regression" and passed["cluster_low"] > 0 and passed["passed"]


def test_the_reward_part_must_beat_chance_where_the_longer_text_is_worse() -> None:
    """A two-part model may rank well while its reward part (what GRPO reads) is a length ranker in
    disguise: the gate fails it on the pairs where length misleads."""
    frame = _pool(length_effect=1.0)
    rankers = _rankers(frame)
    truth = frame["effectiveness"].to_numpy()
    ranking = compare_with_rankers(truth, frame, rankers, margin=1.0)
    honest = compare_with_rankers(frame["quality"].to_numpy() - 0.01 * rankers["length_chars"], frame, rankers, margin=1.0)
    gamed = compare_with_rankers(rankers["length_chars"], frame, rankers, margin=1.0)
    good, bad = beats_length_gate(ranking, honest), beats_length_gate(ranking, gamed)
    assert good["passed"] and good["reward_longer_is_worse"]["part"] == "residual"
    assert good["reward_longer_is_worse"]["low"] > good["reward_longer_is_worse"]["chance"] == 0.5
    assert good["reward_longer_is_worse"]["low"] == min(good["reward_longer_is_worse"]["wilson_low"],
                                                        good["reward_longer_is_worse"]["cluster_low"])
    assert bad["cluster_low"] == good["cluster_low"] > 0  # the ranking model is the same ...
    assert bad["reward_longer_is_worse"]["accuracy"] == 0.0 and not bad["passed"]  # ... its reward part is length


def test_gate_fails_without_two_vignettes_to_resample() -> None:
    frame = _pool(n_vignettes=1)
    result = compare_with_rankers(frame["quality"].to_numpy(), frame, _rankers(frame), margin=1.0)
    assert result["model"]["accuracy"] > 0.9
    assert not beats_length_gate(result)["passed"]  # no cluster interval: no pass


def test_format_gate_effect_is_reported_apart_per_source() -> None:
    targets = pd.DataFrame({
        "vignette_id": ["a"] * 4, "effectiveness": [5.0, 4.0, 2.0, 1.0],
        "source": ["human", "human", "human", "model-x"], "format_gate_ok": [False, True, True, True],
    })
    reward = np.array([4.0, 3.0, 2.0, 1.0])  # ungated: every pair right
    effect = format_gate_effect(reward, targets, penalty=-1.0, margin=1.0)
    assert effect["ungated"]["accuracy"] == 1.0
    # the best text is gated to -1: it now loses its 3 pairs
    assert effect["gated"]["accuracy"] == pytest.approx(3 / 6)
    assert effect["gated_fraction_by_source"] == {"human": pytest.approx(1 / 3), "model-x": 0.0}
    assert effect["pairs_with_a_gated_text"] == 3


def test_a_perfect_score_gives_bounds_inside_zero_one_and_plots_without_error(tmp_path) -> None:
    # All pairs right: statsmodels' Wilson upper bound is 1 - 2.2e-16 < the accuracy 1.0,
    # which made matplotlib refuse a negative error bar in the ensemble stage.
    from reappreg.rm.compare import plot_comparison
    from reappreg.rm.evaluate import error_bars, write_per_vignette

    frame = _pool(length_effect=1.0)
    perfect = compare_with_rankers(frame["quality"].to_numpy(), frame, _rankers(frame), margin=1.0, min_pairs=20)
    fig = perfect["model"]
    assert fig["accuracy"] == 1.0 and fig["wilson_high"] == 1.0 and fig["cluster_high"] == 1.0
    for figure_ in (fig, *(v["model"] for v in perfect["per_vignette"].values())):
        assert 0.0 <= figure_["wilson_low"] <= figure_["accuracy"] <= figure_["wilson_high"] <= 1.0
    bars = error_bars([1.0, 0.5, 0.7], [0.8, np.nan, 0.75], [1 - 2.2e-16, 0.9, 0.72])
    assert (bars >= 0).all() and bars[:, 1].tolist() == [0.0, 0.4]
    write_per_vignette(perfect, tmp_path, "perfect")
    assert (tmp_path / "per_vignette.png").stat().st_size > 0
    row = {"model": "m", "kind": "reward model", "holdout_pairwise_accuracy": 1.0, "holdout_cluster_low": 0.99,
           "holdout_cluster_high": 1 - 2.2e-16, "holdout_n_pairs": 40, "lovo_pairwise_accuracy": None}
    plot_comparison(pd.DataFrame([row]), tmp_path / "comparison.png")
    assert (tmp_path / "comparison.png").stat().st_size > 0


def test_fewer_pairs_than_the_floor_give_no_interval_and_fail_the_gate() -> None:
    frame = _pool(n_vignettes=3, per_vignette=4, length_effect=1.0)
    result = compare_with_rankers(frame["quality"].to_numpy(), frame, _rankers(frame), margin=1.0, min_pairs=20)
    n = result["model"]["n_pairs"]
    assert 0 < n < 20 and result["model"]["accuracy"] == 1.0
    for fig in (result["model"], result["rankers"]["length_chars"], result["model_minus_ranker"]["length_chars"]):
        assert fig["too_few_pairs"] == f"too few pairs ({n} < rm.evaluation.min_pairs=20): no interval"
        assert fig.get("wilson_low") is None and fig["cluster_low"] is None and fig["cluster_high"] is None
    gate = beats_length_gate(result)
    assert not gate["passed"] and gate["checked"].startswith(f"too few pairs ({n} <")
    # The same pairs with a floor they clear get intervals again.
    enough = compare_with_rankers(frame["quality"].to_numpy(), frame, _rankers(frame), margin=1.0, min_pairs=n)
    assert enough["model"]["too_few_pairs"] is None and enough["model"]["wilson_low"] is not None
