"""The results table (reappreg.stats.results): rows, both interval kinds, winner's curse, opponent strength."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reappreg.errors import InputError
from reappreg.settings.judge import JudgeSettings
from reappreg.io import write_json, write_jsonl
from reappreg.stats.results import (
    ConditionInput,
    DeclaredStrength,
    FreshPool,
    ResultsInputs,
    best_of_k_optimism,
    build_results,
    missing_rows,
)
from reappreg.stats.results_outputs import render_markdown, write_results
from reappreg.stats import contest_table, validate_judgments
from stats_fixtures import (
    FAST,
    JUDGE,
    POLICY,
    REFERENCE,
    TRUSTED,
    bind_to_upstream,
    order_row,
    planted,
    sampled_upstream,
)

VIGNETTES = [f"v{i}" for i in range(6)]


def random_judgments(p_win: float | list[float], *, rng: np.random.Generator, generations: int = 20,
                     answers: int = 2, prefix: str = "", seed_offset: int = 0, opponent: str = "gpt-4-0314",
                     vignettes: list[str] = VIGNETTES) -> list[dict]:
    """Contests won in both orders with probability p_win (per vignette), otherwise lost in both."""
    rates = p_win if isinstance(p_win, list) else [p_win] * len(vignettes)
    rows = []
    for vi, (vignette, rate) in enumerate(zip(vignettes, rates)):
        for g in range(generations):
            for a in range(answers):
                score = float(rng.random() < rate)
                for order in ("policy_first", "policy_second"):
                    rows.append(order_row(contest=f"{prefix}{vignette}-g{g}-a{a}-{opponent}",
                                          generation=f"{prefix}{vignette}-g{g}", vignette=vignette,
                                          answer=f"{opponent}-{vignette}-a{(g + a) % 10}", order=order, score=score,
                                          opponent=opponent, eval_k=g % 3, seed=seed_offset + 1000 * vi + g))
    return rows


def inputs_for(tmp_path: Path, judged: dict[str, list[dict] | None], *, kinds: dict[str, str] | None = None,
               sources: dict[str, str] | None = None, ood: set[str] = frozenset(), candidates=("policy",),
               fresh: tuple[str, list[dict]] | None = None, declared=None, calibration=TRUSTED,
               fresh_texts: dict[str, str] | None = None, steps: dict[str, int] | None = None) -> ResultsInputs:
    """Each condition's planted rows bound to an upstream (generations, answers, vignettes) that
    plans exactly their contests, written beside its judgments as the pipeline lays them out."""
    conditions, per_generation = [], {1}
    for name, rows in judged.items():
        path = tmp_path / name / "judgments.jsonl"
        design = None
        if rows is not None:
            rows, design, n = bind_to_upstream(rows, path.parent)
            per_generation.add(n)
            write_jsonl(path, rows)
        kind = (kinds or {}).get(name, "policy" if name == "policy" else "model")
        conditions.append(ConditionInput(name, kind, path, answer_source=(sources or {}).get(name), ood=name in ood,
                                         step=(steps or {}).get(name), design=design))
    fresh_pools = {}
    if fresh is not None:
        path = tmp_path / f"fresh-{fresh[0]}" / "judgments.jsonl"
        rows, design, n = bind_to_upstream(fresh[1], path.parent, texts=fresh_texts)
        per_generation.add(n)
        write_jsonl(path, rows)
        fresh_pools[fresh[0]] = FreshPool(path, design)
    return ResultsInputs(conditions=conditions, calibration=calibration, reference=REFERENCE, settings=FAST,
                         trust_policy=POLICY, judge=JudgeSettings(answers_per_generation=max(per_generation)),
                         selection_candidates=candidates,
                         fresh_pools=fresh_pools, declared_strengths=declared or {}, optimism_iterations=500)


def row(results: dict, row_id: str) -> dict:
    return next(r for r in results["rows"] if r["row_id"] == row_id)


# ----------------------------------------------------------------------------- matrix completeness


def test_every_condition_has_a_row_with_both_interval_kinds(tmp_path):
    rng = np.random.default_rng(0)
    judged = {"policy": random_judgments(0.7, rng=rng, prefix="p-"),
              "base": random_judgments(0.4, rng=rng, prefix="b-", seed_offset=50_000),
              "deepseek-r1": random_judgments(0.55, rng=rng, prefix="r-", seed_offset=90_000)}
    results = build_results(inputs_for(tmp_path, judged, kinds={"deepseek-r1": "reference"},
                                       sources={"deepseek-r1": "deepseek-r1"}))
    assert [r["condition"] for r in results["rows"]] == ["policy", "base", "deepseek-r1"]
    for r in results["rows"]:
        assert r["status"] == "evaluated" and r["n"] == 240 and r["n_vignettes"] == 6
        assert r["iid_screening_low"] < r["win_rate"] < r["iid_screening_high"]
        assert r["cluster_low"] <= r["win_rate"] <= r["cluster_high"]
        assert r["n_eff"] is not None and r["n_eff"] <= r["n"]
        assert r["lc_win_rate"] is not None
        assert r["bar"] == REFERENCE.bar and r["bar_cleared"] == (r["cluster_low"] > REFERENCE.bar)
        # the condition's answers' mean length: one per generation, however many opponents each met
        generations = [json.loads(x) for x in (tmp_path / r["condition"] / "generations.jsonl").read_text().splitlines()]
        assert r["mean_length"] == pytest.approx(np.mean([len(g["answer"]) for g in generations]))
    assert results["complete"] and not results["not_run"]
    # the policy row clears the bar only if its CLUSTER bound does, whatever the iid bound says
    policy = row(results, "policy/gpt-4-0314")
    assert policy["iid_screening_low"] > policy["cluster_low"]


def test_every_condition_and_checkpoint_has_a_row_with_both_interval_kinds(tmp_path):
    """Matrix completeness: the final policy, each kept checkpoint (policy-step-<n>) and every other
    condition get an evaluated row with the iid screening AND the worst-case cluster interval."""
    rng = np.random.default_rng(3)
    judged = {"policy": random_judgments(0.7, rng=rng, prefix="p-")}
    for i, step in enumerate((3, 6)):
        judged[f"policy-step-{step}"] = random_judgments(0.5 + 0.05 * i, rng=rng, prefix=f"c{i}-",
                                                         seed_offset=20_000 * (i + 1))
    judged["base"] = random_judgments(0.4, rng=rng, prefix="b-", seed_offset=90_000)
    base = inputs_for(tmp_path, judged, kinds={"policy-step-3": "checkpoint", "policy-step-6": "checkpoint"},
                      steps={"policy-step-3": 3, "policy-step-6": 6})
    checkpoints = base.conditions[1:3]
    conditions = base.conditions
    results = build_results(base)
    names = [c.name for c in conditions]
    assert [r["condition"] for r in results["rows"]] == names == ["policy", "policy-step-3", "policy-step-6", "base"]
    assert missing_rows(results, names, REFERENCE.opponent) == []
    for r in results["rows"]:
        assert r["iid_screening_low"] < r["win_rate"] < r["iid_screening_high"]
        assert r["cluster_low"] <= r["win_rate"] <= r["cluster_high"]
        assert r["binding_interval"] is not None
    assert [r["checkpoint_step"] for r in results["rows"]] == [None, 3, 6, None]
    assert row(results, "policy-step-3/gpt-4-0314")["kind"] == "checkpoint"
    assert "| `policy-step-6/gpt-4-0314` | checkpoint |" in render_markdown(results)

    # A checkpoint that was never judged is a not-run row and breaks completeness: never dropped.
    checkpoints[1].judgments.unlink()
    results = build_results(base)
    assert row(results, "policy-step-6/gpt-4-0314")["status"] == "not_run"
    assert results["not_run"] == ["policy-step-6"] and results["complete"] is False
    assert missing_rows(results, names, REFERENCE.opponent) == ["policy-step-6"]


def test_a_kept_checkpoint_may_be_a_selection_candidate(tmp_path):
    rng = np.random.default_rng(5)
    inputs = inputs_for(tmp_path, {"policy": random_judgments(0.5, rng=rng, prefix="p-"),
                                   "policy-step-3": random_judgments(0.8, rng=rng, prefix="c-", seed_offset=40_000)},
                        candidates=("policy", "policy-step-3"), kinds={"policy-step-3": "checkpoint"},
                        steps={"policy-step-3": 3})
    selection = build_results(inputs)["selection"]
    assert selection["k"] == 2 and selection["selected"] == "policy-step-3"
    assert selection["candidate_win_rates"]["policy-step-3"] > selection["candidate_win_rates"]["policy"]
    assert selection["promotable"] is False and "fresh" in selection["reason"]   # no fresh pool of its own


def test_bar_column_reads_only_the_cluster_bound(tmp_path):
    """A row whose iid bound clears the bar but whose cluster bound does not: not cleared."""
    # two easy vignettes, four at the bar: a high pooled rate with strong vignette clustering
    rows = planted({"v0": 1.0, "v1": 1.0, "v2": 0.55, "v3": 0.55, "v4": 0.5, "v5": 0.5}, generations=20, answers=2)
    results = build_results(inputs_for(tmp_path, {"policy": rows}))
    r = row(results, "policy/gpt-4-0314")
    assert r["iid_screening_low"] > REFERENCE.bar > r["cluster_low"]
    assert r["bar_cleared"] is False and r["bar_supported"] is False
    md = render_markdown(results)
    line = next(line for line in md.splitlines() if line.startswith("| `policy/gpt-4-0314`"))
    assert "| no (claim " in line
    assert "screening only" in md


def test_declared_condition_without_judgments_is_listed_not_run(tmp_path):
    rng = np.random.default_rng(1)
    results = build_results(inputs_for(tmp_path, {"policy": random_judgments(0.6, rng=rng), "grpo-bt": None}))
    r = row(results, "grpo-bt/gpt-4-0314")
    assert r["status"] == "not_run" and r["win_rate"] is None and r["cluster_low"] is None
    assert results["complete"] is False and results["not_run"] == ["grpo-bt"]
    assert "not run" in render_markdown(results)


def test_conditions_judged_by_different_judges_are_refused(tmp_path):
    rng = np.random.default_rng(2)
    other = random_judgments(0.5, rng=rng, prefix="b-", seed_offset=50_000)
    for r in other:
        r["judge_model"] = "another-judge"
    with pytest.raises(InputError, match="same judge"):
        build_results(inputs_for(tmp_path, {"policy": random_judgments(0.6, rng=rng), "base": other}))


def test_untrusted_judge_blocks_every_bar_claim(tmp_path):
    rows = planted([0.95] * 6, generations=20, answers=2)
    untrusted = {**TRUSTED, "agreement": 0.5, "agreement_low": 0.45, "agreement_high": 0.55}
    results = build_results(inputs_for(tmp_path, {"policy": rows}, calibration=untrusted))
    r = row(results, "policy/gpt-4-0314")
    assert r["bar_cleared"] is True and r["bar_status"] == "confirmed"
    assert r["bar_supported"] is False and "untrusted_judge" in r["flags"]


def test_outputs_written(tmp_path):
    rng = np.random.default_rng(3)
    results = build_results(inputs_for(tmp_path, {"policy": random_judgments(0.6, rng=rng)}))
    paths = {"json_path": tmp_path / "out" / "results.json", "markdown_path": tmp_path / "out" / "results.md",
                 "plot_path": tmp_path / "out" / "forest.png"}
    write_results(results, settings=FAST, **paths)
    loaded = json.loads(paths["json_path"].read_text())
    assert loaded["rows"][0]["row_id"] == "policy/gpt-4-0314"
    assert paths["plot_path"].stat().st_size > 1000
    assert paths["markdown_path"].read_text().startswith("# Results")


# ----------------------------------------------------------------------------- winner's curse


def _contests(rows: list[dict]) -> pd.DataFrame:
    return contest_table(validate_judgments(rows))


def test_planted_equal_candidates_best_of_k_is_inflated_and_fresh_pool_is_not(tmp_path):
    """K = 8 candidates of equal true rate 0.55: the best on the selection pool looks better than
    it is; the optimism estimate sees it; the fresh pool does not; promotion is refused."""
    k, true_rate = 8, 0.55
    inflation, optimism, fresh_gap = [], [], []
    for rep in range(6):
        rng = np.random.default_rng(100 + rep)
        pools = {f"ckpt{i}": random_judgments(true_rate, rng=rng, prefix=f"c{i}-", seed_offset=10_000 * i,
                                              generations=6)
                 for i in range(k)}
        out = best_of_k_optimism({n: _contests(r) for n, r in pools.items()}, iterations=500, seed=rep)
        winner = out["selected"]
        fresh = _contests(random_judgments(true_rate, rng=rng, prefix="fresh-", seed_offset=900_000, generations=6))
        fresh_rate = fresh.groupby("vignette_id")["observed"].mean().mean()
        inflation.append(out["selection_pool_win_rate"] - true_rate)
        optimism.append(out["expected_optimism"])
        fresh_gap.append(fresh_rate - true_rate)
        assert out["k"] == k and winner in pools
    assert np.mean(inflation) > 0.04              # the winner's curse on the selection pool
    assert np.mean(optimism) > 0.02               # ... which the bootstrap estimate detects
    assert abs(np.mean(fresh_gap)) < 0.03         # the fresh pool is not inflated
    assert np.mean(inflation) > np.mean(fresh_gap) + 0.03
    # through the table: the winner of the last replicate, with its fresh pool, is not promotable
    fresh_rows = random_judgments(true_rate, rng=rng, prefix="fresh-", seed_offset=900_000, generations=6)
    results = build_results(inputs_for(tmp_path, pools, kinds=dict.fromkeys(pools, "model"), candidates=tuple(pools),
                                       fresh=(winner, fresh_rows)))
    sel = results["selection"]
    assert sel["selected"] == winner and sel["k"] == k and sel["expected_optimism"] > 0
    assert sel["promotable"] is False and sel["fresh_pool_win_rate"] < sel["selection_pool_win_rate"]
    assert sel["selection_minus_fresh"] == pytest.approx(sel["selection_pool_win_rate"] - sel["fresh_pool_win_rate"])


def test_one_clear_winner_has_little_optimism():
    rng = np.random.default_rng(7)
    pools = {"good": random_judgments(0.9, rng=rng, prefix="g-"),
             **{f"bad{i}": random_judgments(0.3, rng=rng, prefix=f"b{i}-", seed_offset=10_000 * (i + 1))
                for i in range(3)}}
    out = best_of_k_optimism({n: _contests(r) for n, r in pools.items()}, iterations=500, seed=0)
    assert out["selected"] == "good"
    assert abs(out["expected_optimism"]) < 0.02


def test_selected_candidate_promotable_only_on_a_fresh_pool_that_clears_the_bar(tmp_path):
    rng = np.random.default_rng(11)
    strong = random_judgments([0.92, 0.9, 0.95, 0.9, 0.93, 0.91], rng=rng, prefix="p-")
    base = random_judgments(0.3, rng=rng, prefix="b-", seed_offset=50_000)
    # without a fresh pool: never promotable, however good the selection pool looks
    results = build_results(inputs_for(tmp_path / "a", {"policy": strong, "base": base}, candidates=("policy", "base")))
    sel = results["selection"]
    assert sel["selected"] == "policy" and row(results, "policy/gpt-4-0314")["bar_cleared"]
    assert sel["promotable"] is False and "only from the pool it was selected on" in sel["reason"]
    # a fresh pool at the bar: refused
    weak_fresh = random_judgments(0.5, rng=rng, prefix="f-", seed_offset=700_000)
    results = build_results(inputs_for(tmp_path / "b", {"policy": strong, "base": base},
                                       candidates=("policy", "base"), fresh=("policy", weak_fresh)))
    sel = results["selection"]
    assert sel["promotable"] is False and sel["fresh_pool_cluster_low"] < REFERENCE.bar
    assert sel["selection_minus_fresh"] > 0.3
    # a fresh pool that clears it: promotable
    good_fresh = random_judgments([0.92, 0.9, 0.95, 0.9, 0.93, 0.91], rng=rng, prefix="f-", seed_offset=700_000)
    results = build_results(inputs_for(tmp_path / "c", {"policy": strong, "base": base},
                                       candidates=("policy", "base"), fresh=("policy", good_fresh)))
    assert results["selection"]["promotable"] is True
    assert results["selection"]["fresh_pool_near_duplicates"] == []   # answers of their own (the guard's view)


def test_bar_rows_and_promotion_need_the_bars_pinned_judge_and_calibration_size(tmp_path):
    """The same judgments that promote under the bar's pinned judge (the control) promote nothing when the
    bar pins another judge's weights: every bar row and the promotion carry judge_mismatch; a parity
    (generalisation) claim is not about the bar and is untouched."""
    from reappreg.evidence.reference import JudgeIdentity

    rng = np.random.default_rng(11)
    strong = random_judgments([0.92, 0.9, 0.95, 0.9, 0.93, 0.91], rng=rng, prefix="p-")
    good_fresh = random_judgments([0.92, 0.9, 0.95, 0.9, 0.93, 0.91], rng=rng, prefix="f-", seed_offset=700_000)
    inputs = inputs_for(tmp_path, {"policy": strong}, fresh=("policy", good_fresh))
    assert build_results(inputs)["selection"]["promotable"] is True   # the control
    inputs.reference = REFERENCE.model_copy(update={"judge_identity": JudgeIdentity(
        weights_md5="md5:99999999999999999999999999999999.dir")})
    results = build_results(inputs)
    assert results["judge"]["bar_judge"] is False and "local weights md5:9999" in results["judge"]["bar_judge_reason"]
    bar_row = row(results, "policy/gpt-4-0314")
    assert bar_row["bar_cleared"] and not bar_row["bar_supported"] and "judge_mismatch" in bar_row["flags"]
    sel = results["selection"]
    assert sel["promotable"] is False and "judge_mismatch" in sel["fresh_pool_flags"]
    # the bar's judge, trusted by a policy without a floor, on a calibration below the bar's pinned 16 pairs
    inputs.reference = REFERENCE
    inputs.calibration = {**TRUSTED, "n_pairs": 12, "min_pairs": 10}
    results = build_results(inputs)
    assert results["judge"]["trusted"] and "calibrated on 12 pairs" in results["judge"]["calibration_too_small"]
    assert "calibration_too_small" in row(results, "policy/gpt-4-0314")["flags"]
    assert results["selection"]["promotable"] is False
    assert "calibration_too_small" in results["selection"]["fresh_pool_flags"]


def test_fresh_pool_that_reuses_selection_generations_is_refused(tmp_path):
    rng = np.random.default_rng(12)
    strong = random_judgments(0.9, rng=rng, prefix="p-")
    with pytest.raises(InputError, match="not fresh evidence"):
        build_results(inputs_for(tmp_path, {"policy": strong}, fresh=("policy", strong)))
    relabelled = [{**r, "generation_id": "x" + r["generation_id"], "contest_id": "x" + r["contest_id"]}
                  for r in strong]   # same sampling seeds: the same samples under new names
    with pytest.raises(InputError, match="sampling_seed"):
        build_results(inputs_for(tmp_path / "b", {"policy": strong}, fresh=("policy", relabelled)))


def test_fresh_pool_that_repeats_the_selection_pools_answers_under_new_ids_and_seeds_is_refused(tmp_path):
    """New generation ids, new contest ids, new sampling seeds: every label a judgments file
    carries is fresh, but the words are the selection pool's (one answer respaced and
    recased is the same answer to the guard's normalisation): refused, naming the pairs."""
    rng = np.random.default_rng(14)
    strong = random_judgments(0.9, rng=rng, prefix="p-")
    renamed = [{**r, "generation_id": "n" + r["generation_id"], "contest_id": "n" + r["contest_id"],
                "sampling_seed": r["sampling_seed"] + 10_000_000} for r in strong]
    from stats_fixtures import answer_text

    own = {g: answer_text(g) for g in {r["generation_id"] for r in strong}}   # the selection pool's words
    reused = {"n" + g: text for g, text in own.items()}
    reused = {g: (t.upper().replace(" ", "  ") if i % 2 else t) for i, (g, t) in enumerate(sorted(reused.items()))}
    with pytest.raises(InputError, match=r"repeats \d+ answer text\(s\) of its selection pool under other ids "
                                         r"\(np-v\d-g\d+ = p-v\d-g\d+"):
        build_results(inputs_for(tmp_path, {"policy": strong}, fresh=("policy", renamed), fresh_texts=reused))
    # the same labels with words of their own are fresh
    results = build_results(inputs_for(tmp_path / "b", {"policy": strong}, fresh=("policy", renamed)))
    assert results["selection"]["fresh_pools"] == ["policy"]


def _sentences_reversed(text: str) -> str:
    return " ".join(reversed([f"{part.strip()}." for part in text.split(".") if part.strip()]))


@pytest.mark.parametrize("edit,share", [
    (lambda text: text + " Indeed", 1.0),                       # one word appended
    (_sentences_reversed, 1.0),                                  # sentences swapped
    (lambda text: _sentences_reversed(text).upper(), 1.0),      # case changed and sentences swapped (a case
                                                                 # change alone is the same text: refused above)
    (lambda text: text.replace(".", ", truly.", 1), 1 / 3),      # a word inserted, a third of the answers
])
def test_a_fresh_pool_that_near_duplicates_the_selection_pool_is_no_confirmation(tmp_path, edit, share):
    """New ids, seeds and contests, a fresh pool that clears the bar, and answers that are the selection pool's
    lightly edited: no exact text is repeated, but the guard's detectors see the copies, so the pool is not a
    confirmation: flagged, not promotable, the reason naming the pairs. Honest answers of their own promote
    (the control, and test_selected_candidate_promotable_only_on_a_fresh_pool_that_clears_the_bar)."""
    from stats_fixtures import answer_text

    rng = np.random.default_rng(11)
    strong = random_judgments([0.92, 0.9, 0.95, 0.9, 0.93, 0.91], rng=rng, prefix="p-")
    good_fresh = random_judgments([0.92, 0.9, 0.95, 0.9, 0.93, 0.91], rng=rng, prefix="f-", seed_offset=700_000)
    fresh_ids = sorted({r["generation_id"] for r in good_fresh})
    copied = fresh_ids[:: round(1 / share)]
    texts = {gid: edit(answer_text("p-" + gid[len("f-"):])) for gid in copied}
    results = build_results(inputs_for(tmp_path / "edited", {"policy": strong}, fresh=("policy", good_fresh),
                                       fresh_texts=texts))
    sel = results["selection"]
    assert sel["fresh_pool_status"] == "confirmed" and sel["promotable"] is False
    assert "fresh_pool_near_duplicates" in sel["fresh_pool_flags"]
    found = {d["fresh"]: d["selection"] for d in sel["fresh_pool_near_duplicates"]}
    assert found == {gid: "p-" + gid[len("f-"):] for gid in copied}
    first = sel["fresh_pool_near_duplicates"][0]
    assert (f"fresh_pool_near_duplicates: {len(copied)} of {len(fresh_ids)} fresh answer(s) near-duplicate the "
            f"selection pool's by the guard's detectors ({first['fresh']} ~ {first['selection']} "
            f"({first['detector']} ") in sel["reason"]


def test_fresh_pool_of_another_candidate_does_not_promote_the_selected_one(tmp_path):
    rng = np.random.default_rng(13)
    judged = {"policy": random_judgments(0.9, rng=rng, prefix="p-"),
              "base": random_judgments(0.3, rng=rng, prefix="b-", seed_offset=50_000)}
    fresh = random_judgments(0.95, rng=rng, prefix="f-", seed_offset=700_000)
    results = build_results(inputs_for(tmp_path, judged, candidates=("policy", "base"), fresh=("base", fresh)))
    sel = results["selection"]
    assert sel["selected"] == "policy" and sel["fresh_pools"] == ["base"]
    assert sel["promotable"] is False and sel["fresh_pool_win_rate"] is None
    with pytest.raises(InputError, match="not selection candidates"):
        build_results(inputs_for(tmp_path / "b", judged, candidates=("policy",), fresh=("base", fresh)))


# ----------------------------------------------------------------------------- opponents, generalisation


def _ood_rows(rng, opponent: str, rate: float) -> list[dict]:
    scenarios = [f"sharma-{i}" for i in range(8)]
    return random_judgments(rate, rng=rng, prefix="o-", seed_offset=300_000, opponent=opponent, vignettes=scenarios,
                            generations=15, answers=2)


def test_ood_win_against_a_weak_opponent_is_labelled_and_supports_nothing(tmp_path):
    rng = np.random.default_rng(21)
    judged = {"policy": random_judgments(0.6, rng=rng, prefix="p-"),
              "humans": random_judgments(0.2, rng=rng, prefix="h-", seed_offset=50_000),  # human answers vs GPT-4
              "policy-ood": _ood_rows(rng, "humans", 0.95)}
    results = build_results(inputs_for(tmp_path, judged, kinds={"humans": "reference", "policy-ood": "ood"},
                                       sources={"humans": "humans"}, ood={"policy-ood"}))
    strength = results["opponents"]["humans"]
    assert strength["measured"] is True and strength["strength"] < 0.5
    (claim,) = results["claims"]
    assert claim["status"] == "confirmed"          # a big win on fresh scenarios ...
    assert claim["label"] == "weak_opponent"       # ... against a weak opponent
    assert claim["supported"] is False and claim["supports_generalisation"] is False
    assert "weak_opponent" in claim["flags"]
    r = row(results, "policy-ood/humans")
    assert r["ood"] and r["bar"] is None and r["bar_cleared"] is None


def test_ood_opponent_without_any_strength_is_weak(tmp_path):
    rng = np.random.default_rng(22)
    judged = {"policy": random_judgments(0.6, rng=rng, prefix="p-"), "policy-ood": _ood_rows(rng, "humans", 0.95)}
    results = build_results(inputs_for(tmp_path, judged, kinds={"policy-ood": "ood"}, ood={"policy-ood"}))
    assert results["opponents"]["humans"]["strength"] is None
    assert results["claims"][0]["label"] == "weak_opponent" and not results["claims"][0]["supported"]


def test_ood_win_against_a_declared_strong_opponent_is_supported(tmp_path):
    rng = np.random.default_rng(23)
    judged = {"policy": random_judgments(0.6, rng=rng, prefix="p-"), "policy-ood": _ood_rows(rng, "frontier", 0.9)}
    declared = {"frontier": DeclaredStrength(0.62, "its model card, judged by the same protocol")}
    results = build_results(inputs_for(tmp_path, judged, kinds={"policy-ood": "ood"}, ood={"policy-ood"},
                                       declared=declared))
    assert results["opponents"]["frontier"]["measured"] is False
    (claim,) = results["claims"]
    assert claim["label"] == "supported" and claim["supported"] is True
    # the same win against it, measured weaker in-distribution by the pipeline, loses the claim
    judged["frontier"] = random_judgments(0.25, rng=rng, prefix="fr-", seed_offset=60_000)
    results = build_results(inputs_for(tmp_path / "b", judged, kinds={"policy-ood": "ood", "frontier": "reference"},
                                       sources={"frontier": "frontier"}, ood={"policy-ood"}, declared=declared))
    assert results["opponents"]["frontier"]["measured"] is True
    assert results["claims"][0]["label"] == "weak_opponent"


def test_ood_loss_against_a_strong_opponent_is_not_confirmed(tmp_path):
    rng = np.random.default_rng(24)
    judged = {"policy": random_judgments(0.6, rng=rng, prefix="p-"), "policy-ood": _ood_rows(rng, "frontier", 0.5)}
    declared = {"frontier": DeclaredStrength(0.6, "declared")}
    results = build_results(inputs_for(tmp_path, judged, kinds={"policy-ood": "ood"}, ood={"policy-ood"},
                                       declared=declared))
    assert results["claims"][0]["label"] == "not_confirmed" and not results["claims"][0]["supported"]


def test_judge_model_name_in_rows(tmp_path):
    rng = np.random.default_rng(25)
    results = build_results(inputs_for(tmp_path, {"policy": random_judgments(0.6, rng=rng)}))
    assert results["judge"]["model"] == JUDGE
    write_json(tmp_path / "r.json", results)   # JSON-serialisable as is


def test_results_command_reads_every_declared_condition(tmp_path):
    """The stage command: the policy, each kept checkpoint (policy.train.checkpoint_steps: [3]) and
    stats.model_conditions under --conditions-dir, outputs written."""
    from reappreg.settings import load_params

    repo = Path(__file__).resolve().parents[2]
    p = load_params(repo / "params.yaml")
    up = sampled_upstream(tmp_path, p.generate, p.judge, {"policy": 0.6, "base": 0.4, "policy-step-3": 0.5})
    write_json(tmp_path / "calibration.json", TRUSTED)
    out = tmp_path / "out"
    args = ["stats", "results", "--params", str(repo / "params.yaml"), "--models", str(repo / "registry/models.yaml"),
            "--policy-judgments", str(up["policy/judgments"]), "--policy-generations", str(up["policy/generations"]),
            "--conditions-dir", str(tmp_path / "conditions"), "--answers", str(up["answers"]),
            "--vignettes", str(up["vignettes"]),
            "--calibration", str(tmp_path / "calibration.json"), "--json", str(out / "results.json"),
            "--markdown", str(out / "results.md"), "--plot", str(out / "forest.png")]
    from reappreg.cli import main

    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code == 0
    results = json.loads((out / "results.json").read_text())
    assert [r["row_id"] for r in results["rows"]] == ["policy/gpt-4-0314", "policy-step-3/gpt-4-0314", "base/gpt-4-0314"]
    assert results["reference_bar"]["bar"] == 0.608 and results["selection"]["promotable"] is False
    assert all(r["bar_status"] == "not_tested" for r in results["rows"])   # 36 contests < min_n_confirm
    assert {r["row_id"]: r["design"]["planned_contests"] for r in results["rows"]} == {
        "policy/gpt-4-0314": 36, "policy-step-3/gpt-4-0314": 36, "base/gpt-4-0314": 36}
    # a declared condition whose judgments are missing is a not-run row, never silently dropped
    (tmp_path / "conditions" / "base" / "judgments.jsonl").unlink()
    with pytest.raises(SystemExit):
        main(args)
    results = json.loads((out / "results.json").read_text())
    assert results["not_run"] == ["base"] and results["complete"] is False


@pytest.mark.parametrize("overlay, message", [
    ({"model_conditions": ["base", "base"]}, "used twice"),
    ({"model_conditions": ["policy"]}, "used twice"),
    ({"model_conditions": ["fresh-policy"]}, "reserved"),
    ({"model_conditions": ["policy-step-3"]}, "reserved"),
    ({"selection_candidates": ["policy-step-x"]}, "not conditions"),
    ({"model_conditions": ["../x"]}, "folder-safe"),
    ({"selection_candidates": ["nope"]}, "not conditions"),
    ({"fresh_pools": [{"condition": "base", "model": "models/policy/base", "seed": 1}]}, "not in selection_candidates"),
    ({"fresh_pools": [{"condition": "policy", "model": "a", "seed": 1}, {"condition": "policy", "model": "b", "seed": 1}]},
     "own seed"),
])
def test_condition_settings_refuse_ambiguous_declarations(overlay, message):
    from pydantic import ValidationError

    from reappreg.settings.stats import StatsSettings

    with pytest.raises(ValidationError, match=message):
        StatsSettings(**overlay)


def test_a_selection_candidate_that_is_not_a_kept_checkpoint_is_refused(tmp_path):
    """stats.selection_candidates may name policy-step-<n> only for a step in policy.train.checkpoint_steps."""
    import yaml

    repo = Path(__file__).resolve().parents[2]
    raw = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))
    raw["stats"]["selection_candidates"] = ["policy", "policy-step-9"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    write_json(tmp_path / "calibration.json", TRUSTED)
    from typer.testing import CliRunner

    from reappreg.cli import app

    result = CliRunner().invoke(app, [
        "stats", "results", "--params", str(tmp_path / "params.yaml"), "--models", str(repo / "registry/models.yaml"),
        "--policy-judgments", str(tmp_path / "policy.jsonl"), "--conditions-dir", str(tmp_path / "conditions"),
        "--policy-generations", str(tmp_path / "g.jsonl"), "--answers", str(tmp_path / "a.jsonl"),
        "--vignettes", str(tmp_path / "v.jsonl"),
        "--calibration", str(tmp_path / "calibration.json"), "--json", str(tmp_path / "r.json"),
        "--markdown", str(tmp_path / "r.md"), "--plot", str(tmp_path / "f.png")])
    assert result.exit_code != 0
    assert "policy-step-9" in str(result.exception) + result.output and "no such kept checkpoint" in \
        str(result.exception) + result.output
    assert not (tmp_path / "r.json").exists()


def test_each_row_says_how_its_verdicts_were_read(tmp_path):
    """The method mix is counted per row from that row's own judged orders, so a row that leans on the
    free-text fallback shows it beside its win-rate (and in the Markdown table)."""
    rng = np.random.default_rng(4)
    policy = random_judgments(0.7, rng=rng, prefix="p-")
    base = random_judgments(0.4, rng=rng, prefix="b-", seed_offset=50_000)
    for r in base[:40]:
        r["verdict_method"] = "free_text"
    results = build_results(inputs_for(tmp_path, {"policy": policy, "base": base}))
    assert row(results, "policy/gpt-4-0314")["verdict_methods"] == {"guided": len(policy)}
    assert row(results, "base/gpt-4-0314")["verdict_methods"] == {"free_text": 40, "guided": len(base) - 40}
    assert "| free_text 40, guided 440 |" in render_markdown(results)


# ----------------------------------------------------------------------------- every condition bound to its design

def _stage(out, params, up):
    """The results stage over the upstream ``up`` (sampled_upstream), writing under ``out``."""
    from reappreg.stats.results import ResultsFiles
    from reappreg.stats.stage import results_stage

    repo = Path(__file__).resolve().parents[2]
    root = Path(up["answers"]).parent
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "calibration.json", TRUSTED)
    files = ResultsFiles(policy_judgments=up["policy/judgments"], policy_generations=up["policy/generations"],
                         conditions_dir=root / "conditions", answers=up["answers"], vignettes=up["vignettes"],
                         ood_dir=root / "ood")
    return results_stage(params, files, calibration=out / "calibration.json", models=repo / "registry/models.yaml",
                         out_json=out / "results.json", markdown=out / "results.md", plot=out / "forest.png")


def _jsonl(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("attack, message", [
    ("split_vignette", "differ only by case, width, whitespace or invisible"),
    ("drop_lost_generations", "planned generation\\(s\\) are absent"),
    ("drop_lost_orders", None),   # judged orders deleted: planned, so they come back as worst case
    ("weaker_opponent", "label\\(s\\) differ from the planned contest's"),
])
def test_every_condition_is_bound_to_its_own_design(attack, message, tmp_path):
    """The other conditions' files get the same binding as the policy's: a model condition whose
    judgments or generations were edited is refused (naming it) or can only get harder."""
    from reappreg.settings import load_params

    p = load_params(Path(__file__).resolve().parents[2] / "params.yaml")
    up = sampled_upstream(tmp_path, p.generate, p.judge, {"policy": 0.5, "base": 0.5})
    honest = row(_stage(tmp_path / "honest", p, up), "base/gpt-4-0314")
    gens, rows = _jsonl(up["base/generations"]), _jsonl(up["base/judgments"])
    lost = {r["generation_id"] for r in rows if r["policy_score"] == 0.0}
    if attack == "split_vignette":
        rows = [{**r, "vignette_id": r["vignette_id"].upper()} if r["eval_k"] == 1 else r for r in rows]
    elif attack == "drop_lost_generations":
        gens = [g for g in gens if g["generation_id"] not in lost]
        rows = [r for r in rows if r["generation_id"] not in lost]
    elif attack == "drop_lost_orders":
        rows = [r for r in rows if r["generation_id"] not in lost]
    elif attack == "weaker_opponent":
        rows = [{**r, "opponent_source": "weak-model"} if r["generation_id"] in lost else r for r in rows]
    write_jsonl(up["base/generations"], gens)
    write_jsonl(up["base/judgments"], rows)
    if message is None:
        edited = row(_stage(tmp_path / "edited", p, up), "base/gpt-4-0314")
        assert edited["design"]["missing_orders"] == 2 * len(lost)
        # the point over the judged orders is all wins; the bound the bar reads counts the rest as losses
        assert edited["cluster_low"] <= honest["cluster_low"] and edited["bar_supported"] is False
        return
    with pytest.raises(InputError, match=message) as refused:
        _stage(tmp_path / "edited", p, up)
    assert "base" in str(refused.value)


def test_a_fresh_pool_is_its_own_sampling_plan(tmp_path):
    """A fresh pool sampled with its own seed binds; the selection pool's generations passed off as
    fresh under new ids (so no id, seed or contest is shared) are not the fresh seed's plan."""
    from reappreg.settings import load_params

    p = load_params(Path(__file__).resolve().parents[2] / "params.yaml")
    fresh_seed = 4321
    p = p.model_copy(update={"stats": p.stats.model_copy(update={
        "fresh_pools": [type(p.stats).model_fields["fresh_pools"].annotation.__args__[0](
            condition="policy", model="models/policy/grpo", seed=fresh_seed)]})})
    up = sampled_upstream(tmp_path, p.generate, p.judge, {"policy": 0.5})
    from reappreg.eval.plan import fresh_pool_prefix

    fresh = sampled_upstream(tmp_path / "f", p.generate.model_copy(update={"seed": fresh_seed}), p.judge,
                             {"fresh-policy": 0.5}, seed=1, id_prefix=fresh_pool_prefix(fresh_seed))
    target = tmp_path / "conditions" / "fresh-policy"
    target.mkdir(parents=True)
    for name in ("generations", "judgments"):
        (target / f"{name}.jsonl").write_text(Path(fresh[f"fresh-policy/{name}"]).read_text())
    results = _stage(tmp_path / "out", p, up)
    assert results["selection"]["fresh_pools"] == ["policy"]
    assert results["selection"]["fresh_pool_win_rate"] is not None
    # the selection pool's own generations and verdicts under the fresh pool's ids (contest ids
    # follow), so no id, contest or seed is shared: the seeds are not the fresh seed's plan
    prefix = fresh_pool_prefix(fresh_seed)
    gens = [{**g, "generation_id": prefix + g["generation_id"], "pool_id": prefix + g["pool_id"],
             "sampling_seed": g["sampling_seed"] + 1} for g in _jsonl(up["policy/generations"])]
    rows = []
    for r in _jsonl(up["policy/judgments"]):
        gid = prefix + r["generation_id"]
        rows.append({**r, "generation_id": gid, "sampling_seed": r["sampling_seed"] + 1,
                     "contest_id": hashlib.sha256(f"{gid}|{r['opponent_answer_id']}".encode()).hexdigest()[:16]})
    write_jsonl(target / "generations.jsonl", gens)
    write_jsonl(target / "judgments.jsonl", rows)
    with pytest.raises(InputError, match="not the sampling plan of the generate params .* seed 4321.*sampling_seed"):
        _stage(tmp_path / "again", p, up)
