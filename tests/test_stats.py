"""Statistics that cannot overclaim: intervals vs independent computations, claim rules, outputs."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from reappreg.errors import InputError
from reappreg.stats import (
    analyze,
    cluster_bootstrap,
    cluster_robust,
    expected_policy_score,
    load_calibration,
    load_judgments,
    summarize_scores,
    validate_judgments,
    wilson_interval,
    write_outputs,
)

TRUSTED = {"n_pairs": 200, "agreement": 0.81, "position_bias_rate_A": 0.52, "order_consistency": 0.9,
           "unparseable_rate": 0.01, "min_agreement": 0.7, "trusted": True}
UNTRUSTED = {**TRUSTED, "agreement": 0.55, "trusted": False}
FAST = {"bootstrap_iterations": 1000, "seed": 3}


# --------------------------------------------------------------------------- simulated judgments


def _row(i: int, *, vignette: str, generation: str, score: float | None, order: str = "policy_first",
         opponent: str = "gpt-4-0314", eval_k: int = 0, selection: str = "none", contest: str | None = None) -> dict:
    if score is None:
        verdict = "unparseable"
    elif score == 0.5:
        verdict = "tie"
    else:
        policy_pos = "A" if order == "policy_first" else "B"
        verdict = policy_pos if score == 1.0 else ("B" if policy_pos == "A" else "A")
    return {
        "contest_id": contest or f"c{i}", "generation_id": generation, "vignette_id": vignette, "eval_k": eval_k,
        "opponent_source": opponent, "opponent_answer_id": f"{opponent}-{vignette}-{i % 10}", "order": order,
        "raw_output": f"verdict: {verdict}", "verdict": verdict, "policy_score": score, "judge_model": "fake-judge",
        "selection": selection,
    }


def judgments_from_scores(per_vignette: dict[str, list[float | None]], *, opponent: str = "gpt-4-0314",
                          selection: str = "none", generations_per_vignette: int = 3, start: int = 0) -> list[dict]:
    """Rows for given per-vignette score lists; consecutive pairs are the two orders of one contest."""
    rows, i = [], start
    for vignette, scores in per_vignette.items():
        for j, score in enumerate(scores):
            order = ORDERS_CYCLE[j % 2]
            contest = f"{selection}-{opponent}-{vignette}-{j // 2}"
            gen = f"{vignette}-g{(j // 2) % generations_per_vignette}"
            rows.append(_row(i, vignette=vignette, generation=gen, score=score, order=order, opponent=opponent,
                             eval_k=(j // 2) % 3, selection=selection, contest=contest))
            i += 1
    return rows


ORDERS_CYCLE = ("policy_first", "policy_second")


def exact_scores(n: int, rate: float) -> list[float]:
    """n scores with exactly round(rate*n) wins and the rest losses, interleaved deterministically."""
    wins = round(rate * n)
    return [1.0 if (k * wins) % n < wins else 0.0 for k in range(n)]


def claim(report: dict, claim_id: str) -> dict:
    return next(c for c in report["claims"] if c["claim_id"] == claim_id)


# --------------------------------------------------------------------------- Wilson


def _wilson_by_hand(successes: float, n: int, z: float) -> tuple[float, float]:
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("successes,n", [(7, 10), (0, 12), (30, 30), (437, 720), (10.5, 25)])
def test_wilson_matches_hand_formula(successes, n):
    z = sps.norm.ppf(0.975)
    low, high = wilson_interval(successes, n, 0.95)
    hand_low, hand_high = _wilson_by_hand(successes, n, z)
    assert low == pytest.approx(hand_low, abs=1e-12)
    assert high == pytest.approx(hand_high, abs=1e-12)
    if float(successes).is_integer():  # scipy's binomtest is a second, independent implementation
        ci = sps.binomtest(int(successes), n).proportion_ci(0.95, method="wilson")
        assert (low, high) == pytest.approx((ci.low, ci.high), abs=1e-12)


# --------------------------------------------------------------------------- cluster intervals


def test_cluster_se_matches_sandwich_by_hand():
    rng = np.random.default_rng(11)
    sizes = rng.integers(5, 40, size=9)
    clusters = np.repeat([f"v{g}" for g in range(9)], sizes)
    rates = rng.uniform(0.2, 0.9, size=9)
    scores = np.concatenate([rng.binomial(1, r, s) for r, s in zip(rates, sizes)]).astype(float)
    out = cluster_robust(scores, clusters, 0.95)

    n, n_groups = len(scores), 9
    resid = scores - scores.mean()
    per_cluster = np.array([resid[clusters == f"v{g}"].sum() for g in range(9)])
    var_raw = (per_cluster ** 2).sum() / n ** 2
    se_corrected = math.sqrt(n_groups / (n_groups - 1) * var_raw)
    assert out["cluster_se"] == pytest.approx(se_corrected, rel=1e-10)
    t = sps.t.ppf(0.975, n_groups - 1)
    assert out["cluster_se_low"] == pytest.approx(scores.mean() - t * se_corrected, rel=1e-10)
    assert out["cluster_df"] == n_groups - 1
    var_iid = (resid ** 2).sum() / n ** 2
    assert var_raw > var_iid  # clustered data: the floor below is not what is being tested here
    assert out["deff"] == pytest.approx(var_raw / var_iid, rel=1e-10)
    assert out["n_eff"] == pytest.approx(n * var_iid / var_raw, rel=1e-10)


def test_clusters_that_agree_too_well_never_claim_more_than_iid_data():
    # Every vignette exactly 50/50: between-vignette variance is 0, so the raw cluster SE is 0
    # and deff = 0. That is noise, not information: n_eff is capped at n, the SE floored at iid.
    per, n_groups = 120, 6
    scores = np.concatenate([exact_scores(per, 0.5) for _ in range(n_groups)])
    clusters = np.repeat(np.arange(n_groups), per)
    out = cluster_robust(scores, clusters)
    n = per * n_groups
    assert out["deff"] == pytest.approx(0.0, abs=1e-12)
    assert out["n_eff"] == n
    floor_se = math.sqrt(n_groups / (n_groups - 1) * 0.25 / n)
    assert out["cluster_se"] == pytest.approx(floor_se, rel=1e-10)
    assert out["cluster_se_low"] == pytest.approx(0.5 - sps.t.ppf(0.975, n_groups - 1) * floor_se, rel=1e-10)


def test_all_contests_from_one_vignette_give_n_eff_one_and_no_cluster_interval():
    rng = np.random.default_rng(0)
    scores = rng.binomial(1, 0.7, 400).astype(float)
    summary = summarize_scores(scores, ["only"] * 400, **FAST)
    assert summary["n_eff"] == 1.0
    assert summary["n_clusters"] == 1
    assert summary["cluster_low"] is None and summary["bootstrap_low"] is None
    assert summary["iid_low"] is not None  # the iid interval exists, and it is narrow: misleading


@pytest.mark.parametrize("n_clusters", [2, 6])
def test_perfectly_correlated_clusters_give_n_eff_equal_to_cluster_count(n_clusters):
    # Every judgment within a vignette agrees: the data carry one observation per vignette.
    per = 120
    scores = np.concatenate([np.full(per, float(g % 2)) for g in range(n_clusters)])
    clusters = np.repeat(np.arange(n_clusters), per)
    out = cluster_robust(scores, clusters)
    assert out["n_eff"] == pytest.approx(n_clusters, rel=1e-9)
    assert out["deff"] == pytest.approx(per, rel=1e-9)


def test_independent_clusters_give_n_eff_close_to_n():
    rng = np.random.default_rng(5)
    n = 600
    scores = rng.binomial(1, 0.6, n).astype(float)
    singletons = cluster_robust(scores, np.arange(n))
    assert singletons["n_eff"] == pytest.approx(n, rel=1e-9)  # exact: a cluster of one is an iid draw
    many = cluster_robust(scores, np.repeat(np.arange(100), 6))  # 100 vignettes, no shared effect
    assert 0.75 * n < many["n_eff"] < 1.3 * n


def test_cluster_bootstrap_agrees_with_linearised_variance_and_is_seeded():
    rng = np.random.default_rng(2)
    n_groups = 40
    sizes = rng.integers(10, 30, size=n_groups)
    rates = rng.uniform(0.2, 0.9, size=n_groups)
    clusters = np.repeat(np.arange(n_groups), sizes)
    scores = np.concatenate([rng.binomial(1, r, s) for r, s in zip(rates, sizes)]).astype(float)
    resid = scores - scores.mean()
    per_cluster = np.array([resid[clusters == g].sum() for g in range(n_groups)])
    analytic_se = math.sqrt((per_cluster ** 2).sum()) / len(scores)  # resampling G clusters from G

    boot = cluster_bootstrap(scores, clusters, iterations=4000, seed=7)
    assert boot["bootstrap_se"] == pytest.approx(analytic_se, rel=0.1)
    assert boot["bootstrap_low"] < scores.mean() < boot["bootstrap_high"]
    assert cluster_bootstrap(scores, clusters, iterations=4000, seed=7) == boot
    assert cluster_bootstrap(scores, clusters, iterations=4000, seed=8) != boot


def test_ties_count_half_and_unparseable_are_excluded_but_counted():
    scores = [1.0, 0.5, 0.5, 0.0, None, None, 1.0, 1.0]
    summary = summarize_scores([np.nan if s is None else s for s in scores], list("aabbccdd"), **FAST)
    assert summary["n"] == 6 and summary["n_unparseable"] == 2
    assert summary["unparseable_rate"] == pytest.approx(2 / 8)
    assert summary["win_rate"] == pytest.approx(4.0 / 6)
    assert (summary["wins"], summary["ties"], summary["losses"]) == (3, 2, 1)


# --------------------------------------------------------------------------- the bar test


def test_bar_test_refuses_below_min_n_even_when_every_judgment_is_a_win():
    rows = judgments_from_scores({f"v{g}": [1.0] * 33 for g in range(6)})  # n = 198 < 240
    report = analyze(validate_judgments(rows), TRUSTED, **FAST)
    bar = claim(report, "bar/policy/gpt-4-0314")
    assert bar["status"] == "not_tested" and bar["supported"] is False
    assert "198" in bar["reason"] and "240" in bar["reason"]
    assert "below_min_n" in bar["flags"]
    assert report["metrics"]["policy/gpt-4-0314/cluster_low"] == pytest.approx(1.0)  # computed, just not claimed


def test_bar_confirmed_at_min_n_with_consistent_vignettes():
    rows = judgments_from_scores({f"v{g}": exact_scores(40, 0.85 + 0.02 * g) for g in range(6)})  # n = 240
    report = analyze(validate_judgments(rows), TRUSTED, **FAST)
    bar = claim(report, "bar/policy/gpt-4-0314")
    assert report["metrics"]["policy/gpt-4-0314/n"] == 240
    assert bar["status"] == "confirmed" and bar["supported"] is True
    assert bar["evidence"]["cluster_low"] > 0.608
    # with min_n_confirm raised, the same data are no longer tested
    stricter = analyze(validate_judgments(rows), TRUSTED, min_n_confirm=241, **FAST)
    assert claim(stricter, "bar/policy/gpt-4-0314")["status"] == "not_tested"


def test_iid_bound_above_bar_but_cluster_bound_below_is_not_claimed():
    # The seeds' mistake: 720 judged orders over only 6 vignettes, three strong and three weak.
    rates = [0.95, 0.9, 0.85, 0.5, 0.45, 0.4]
    rows = judgments_from_scores({f"v{g}": exact_scores(120, r) for g, r in enumerate(rates)})
    report = analyze(validate_judgments(rows), TRUSTED, **FAST)
    m = report["metrics"]
    assert m["policy/gpt-4-0314/n"] == 720
    assert m["policy/gpt-4-0314/iid_low"] > 0.608  # an iid comparison would have "confirmed" it
    assert m["policy/gpt-4-0314/cluster_low"] < 0.608
    assert m["policy/gpt-4-0314/n_eff"] < 0.05 * 720  # ~25 effective judgments, not 720
    bar = claim(report, "bar/policy/gpt-4-0314")
    assert bar["status"] == "inconclusive" and bar["supported"] is False
    # claims are judged only on cluster bounds: the iid bound is never cited as evidence
    assert not any("iid" in ref for c in report["claims"] for ref in c["metric_refs"])
    assert bar["evidence"]["cluster_low"] == m["policy/gpt-4-0314/cluster_low"]
    # each claim interval choice is a cluster interval, and each also refuses here
    for choice in ("bootstrap", "cluster_se"):
        alt = analyze(validate_judgments(rows), TRUSTED, claim_interval=choice, **FAST)
        assert claim(alt, "bar/policy/gpt-4-0314")["supported"] is False


def test_refuted_when_cluster_upper_bound_is_below_threshold():
    rows = judgments_from_scores({f"v{g}": exact_scores(50, 0.2 + 0.02 * g) for g in range(8)})
    report = analyze(validate_judgments(rows), TRUSTED, **FAST)
    assert claim(report, "beats_opponent/policy/gpt-4-0314")["status"] == "refuted"


def test_untrusted_judge_results_computed_but_flagged_and_never_supported(tmp_path):
    rows = judgments_from_scores({f"v{g}": exact_scores(40, 0.9) for g in range(8)})
    trusted = analyze(validate_judgments(rows), TRUSTED, **FAST)
    untrusted = analyze(validate_judgments(rows), UNTRUSTED, **FAST)
    assert untrusted["metrics"]["policy/gpt-4-0314/win_rate"] == trusted["metrics"]["policy/gpt-4-0314/win_rate"]
    assert untrusted["metrics"]["judge/trusted"] == 0
    assert claim(trusted, "bar/policy/gpt-4-0314")["supported"] is True
    for c in untrusted["claims"]:
        assert c["supported"] is False and "untrusted_judge" in c["flags"] and c["judge_trusted"] is False
    assert claim(untrusted, "bar/policy/gpt-4-0314")["status"] == "confirmed"  # statistics unchanged
    write_outputs(untrusted, metrics_path=tmp_path / "m.json", plot_path=tmp_path / "f.png",
                  plot_data_path=tmp_path / "f.csv", claims_path=tmp_path / "c.json")
    with open(tmp_path / "f.csv", newline="") as fh:
        assert {r["judge_trusted"] for r in csv.DictReader(fh)} == {"False"}


def test_unparseable_rows_reported_and_flagged():
    scores = {f"v{g}": exact_scores(40, 0.8) for g in range(6)}
    scores["v0"][:5] = [None] * 5
    report = analyze(validate_judgments(judgments_from_scores(scores)), TRUSTED, **FAST)
    m = report["metrics"]
    assert m["judgments/n_unparseable"] == 5 and m["policy/gpt-4-0314/n"] == 235
    assert m["policy/gpt-4-0314/n_unparseable"] == 5
    bar = claim(report, "bar/policy/gpt-4-0314")
    assert "unparseable_excluded" in bar["flags"] and bar["status"] == "not_tested"  # 235 < 240


# --------------------------------------------------------------------------- winner's curse


def test_best_of_n_on_pure_noise_shows_the_fresh_pool_drop():
    """Pick the best of N candidates by their win-rate against a selection pool; every candidate
    is a coin flip. The selection pool looks strong, the fresh pool falls back to ~0.5."""
    rng = np.random.default_rng(2024)
    n_vignettes, n_candidates, contests = 24, 16, 10  # both orders -> 20 judged orders per pool
    selected, fresh = {}, {}
    for g in range(n_vignettes):
        pool = rng.binomial(1, 0.5, size=(n_candidates, 2 * contests)).astype(float)
        best = int(np.argmax(pool.mean(axis=1)))
        selected[f"v{g}"] = list(pool[best])
        fresh[f"v{g}"] = list(rng.binomial(1, 0.5, size=2 * contests).astype(float))
    rows = judgments_from_scores(selected, selection="best_of_n_selection_pool") + \
        judgments_from_scores(fresh, selection="best_of_n_fresh", start=10_000)
    report = analyze(validate_judgments(rows), TRUSTED, **FAST)
    m = report["metrics"]
    sel = m["best_of_n/gpt-4-0314/selection_pool_win_rate"]
    fre = m["best_of_n/gpt-4-0314/fresh_pool_win_rate"]
    assert sel > 0.65 and abs(fre - 0.5) < 0.08
    assert m["best_of_n/gpt-4-0314/selection_minus_fresh"] == pytest.approx(sel - fre)
    assert m["best_of_n_selection_pool/gpt-4-0314/cluster_low"] > 0.608  # the trap: in-sample looks confirmed
    for c in report["claims"]:
        if c["condition"] == "best_of_n_selection_pool":
            assert c["status"] == "not_tested" and not c["supported"] and "selection_pool" in c["flags"]
            assert "winner's curse" in c["reason"]
    fresh_bar = claim(report, "bar/best_of_n_fresh_pool/gpt-4-0314")
    assert fresh_bar["supported"] is False
    assert fresh_bar["evidence"]["selection_pool_win_rate"] == pytest.approx(sel)
    assert "best_of_n" in fresh_bar["flags"]


# --------------------------------------------------------------------------- tables and outputs


def test_opponent_vignette_and_eval_tables_and_missing_bar_opponent():
    rows = judgments_from_scores({"v0": exact_scores(12, 0.75), "v1": exact_scores(12, 0.25)}, opponent="claude-3-opus")
    report = analyze(validate_judgments(rows), TRUSTED, **FAST)
    m = report["metrics"]
    assert m["policy/claude-3-opus/vignette/v0/win_rate"] == pytest.approx(0.75)
    assert m["policy/claude-3-opus/vignette/v1/win_rate"] == pytest.approx(0.25)
    assert m["policy/claude-3-opus/win_rate"] == pytest.approx(0.5)
    per_k = [m[f"policy/claude-3-opus/eval_k/{k}/n"] for k in range(3)]
    assert sum(per_k) == 24 and m["policy/claude-3-opus/n_eval_k"] == 3
    bar = claim(report, "bar/policy/gpt-4-0314")  # the bar opponent was never judged
    assert bar["status"] == "not_tested" and "missing_opponent" in bar["flags"]
    assert all(ref in m for c in report["claims"] for ref in c["metric_refs"])
    assert {(r["opponent"], r["row"]) for r in report["forest_rows"]} == {
        ("claude-3-opus", "v0"), ("claude-3-opus", "v1"), ("claude-3-opus", "pooled")}


def test_outputs_written_and_claims_refer_to_real_metric_keys(tmp_path):
    rows = judgments_from_scores({f"v{g}": exact_scores(40, 0.7) for g in range(6)})
    rows += judgments_from_scores({f"v{g}": exact_scores(40, 0.55) for g in range(6)}, opponent="gemini-1.5-pro",
                                  start=5000)
    path = tmp_path / "judgments.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "calib.json").write_text(json.dumps(TRUSTED))
    report = analyze(load_judgments(path), load_calibration(tmp_path / "calib.json"), **FAST)
    out = {k: tmp_path / v for k, v in dict(metrics_path="eval.json", plot_path="forest.png",
                                            plot_data_path="forest.csv", claims_path="claims.json").items()}
    write_outputs(report, **out)
    metrics = json.loads(out["metrics_path"].read_text())
    assert all(not isinstance(v, (dict, list)) for v in metrics.values())  # flat for dvc metrics
    claims = json.loads(out["claims_path"].read_text())
    assert isinstance(claims, list) and claims
    for c in claims:
        assert set(c) >= {"claim_id", "statement", "metric_refs", "supported", "status", "reason", "flags"}
        assert all(ref in metrics for ref in c["metric_refs"])
    assert out["plot_path"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(out["plot_data_path"])
    assert len(table) == 2 * (6 + 1)
    pooled = table[(table.row == "pooled") & (table.opponent == "gemini-1.5-pro")].iloc[0]
    assert pooled.cluster_unit == "vignette" and pooled.win_rate == pytest.approx(0.55)


# --------------------------------------------------------------------------- input validation


def test_expected_policy_score_follows_position():
    assert expected_policy_score("policy_first", "A") == 1.0
    assert expected_policy_score("policy_second", "A") == 0.0
    assert expected_policy_score("policy_second", "B") == 1.0
    assert expected_policy_score("policy_first", "tie") == 0.5
    assert expected_policy_score("policy_first", "unparseable") is None


@pytest.mark.parametrize("mutate,message", [
    (lambda r: r.pop("vignette_id"), "missing key(s) vignette_id"),
    (lambda r: r.update(verdict="maybe"), "'verdict' must be one of"),
    (lambda r: r.update(policy_score=0.5), "does not match verdict"),
    (lambda r: r.update(verdict="unparseable"), "must have policy_score null"),
    (lambda r: r.update(selection="cherry_picked"), "'selection' must be one of"),
])
def test_bad_judgment_rows_are_named(mutate, message):
    rows = judgments_from_scores({"v0": [1.0, 0.0, 1.0]})
    mutate(rows[1])
    with pytest.raises(InputError, match="row 2") as exc:
        validate_judgments(rows, "judgments.jsonl")
    assert message in str(exc.value)


def test_duplicate_order_and_mixed_judges_rejected():
    rows = judgments_from_scores({"v0": [1.0, 0.0]})
    with pytest.raises(InputError, match="already judged at row 1"):
        validate_judgments([rows[0], dict(rows[0])])
    rows[1]["judge_model"] = "other-judge"
    with pytest.raises(InputError, match="more than one judge_model"):
        validate_judgments(rows)


def test_calibration_must_say_whether_the_judge_is_trusted(tmp_path):
    path = tmp_path / "calib.json"
    path.write_text(json.dumps({k: v for k, v in TRUSTED.items() if k != "trusted"}))
    with pytest.raises(InputError, match="missing key\\(s\\) trusted"):
        load_calibration(path)
    path.write_text(json.dumps({**TRUSTED, "trusted": "yes"}))
    with pytest.raises(InputError, match="'trusted' must be true or false"):
        load_calibration(path)


# --------------------------------------------------------------------------- the stage command


@pytest.mark.slow
def test_stats_command_writes_outputs_and_logs_one_mlflow_run(tmp_path, monkeypatch):
    import mlflow
    import yaml
    from typer.testing import CliRunner

    from reappreg.cli import app

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    rows = judgments_from_scores({f"v{g}": exact_scores(40, 0.9) for g in range(6)})
    (tmp_path / "judgments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "calib.json").write_text(json.dumps(UNTRUSTED))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "tracking": {"uri": uri, "artifact_root": str(tmp_path / "mlart"), "experiment": "stats-test"},
        "stats": {"bootstrap_iterations": 500},
    }))
    args = ["stats", "run", "--params", "params.yaml", "--judgments", "judgments.jsonl", "--calibration",
            "calib.json", "--metrics", "out/eval.json", "--plot", "out/forest.png", "--plot-data",
            "out/forest.csv", "--claims", "out/claims.json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "UNTRUSTED JUDGE" in result.output
    claims = json.loads((tmp_path / "out/claims.json").read_text())
    bar = next(c for c in claims if c["claim_id"] == "bar/policy/gpt-4-0314")
    assert bar["status"] == "confirmed" and bar["supported"] is False and "untrusted_judge" in bar["flags"]

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["stats-test"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.data.tags["stage"] == "stats" and run.data.tags["judge_trusted"] == "false"
    assert "input.judgments.md5" in run.data.tags
    assert run.data.metrics["policy/gpt-4-0314/win_rate"] == pytest.approx(0.9)
    assert run.data.params["bar"] == "0.608"
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "eval")}
    assert artifacts == {"eval/eval.json", "eval/forest.png", "eval/forest.csv", "eval/claims.json"}

    (tmp_path / "calib.json").write_text(json.dumps({"trusted": True}))
    failed = CliRunner().invoke(app, args)
    assert isinstance(failed.exception, InputError) and "missing key(s)" in str(failed.exception)
