"""Claims that cannot be manufactured: one test (class) per attack, and a clean control.

Every attack goes through the public path (validated rows -> analyze -> claims). Each asserts
``supported: false`` with the specific flag, or the specific error; the control asserts
``supported: true``. The attacks vary the mechanism (which orders go missing, how rows are
copied, which bar moves), so they test the class, not one example.
"""

from __future__ import annotations

import numpy as np
import pytest
from stats_fixtures import FAST, POLICY, REFERENCE, TRUSTED, claim, order_row, planted

from reappreg.errors import InputError
from reappreg.stats import (
    BLOCKING_FLAGS,
    analyze,
    validate_calibration,
    validate_judgments,
)

BAR = "bar/policy/gpt-4-0314"


def run(rows, calibration=TRUSTED, settings=FAST, policy=POLICY):
    return analyze(validate_judgments(rows), validate_calibration(calibration), settings=settings, reference=REFERENCE,
                   trust_policy=policy)


def assert_refused(report, claim_id, flag):
    c = claim(report, claim_id)
    assert c["supported"] is False, c["reason"]
    assert flag in c["flags"], (flag, c["flags"], c["reason"])
    return c


# --------------------------------------------------------------------------- control


def test_clean_control_is_supported():
    report = run(planted([0.85, 0.8, 0.9, 0.82, 0.88, 0.86]))
    c = claim(report, BAR)
    assert c["supported"] is True and c["status"] == "confirmed", c["reason"]
    assert not set(c["flags"]) & set(BLOCKING_FLAGS)
    assert c["evidence"]["cluster_low"] > 0.608 and c["evidence"]["n"] == 240
    assert c["kind"] == "bar" and c["threshold"] == REFERENCE.bar
    ev = c["evidence"]
    assert ev["estimand"].startswith("equal-weight mean over vignettes")
    assert "generation" in ev["clustering"] and ev["worst_case_low"] == ev["cluster_low"]
    assert report["metrics"]["judge/trusted"] == 1


# --------------------------------------------------------------------------- 1. missing verdicts


def _drop_losses(rows, share, how):
    """Make ``share`` of the lost contests unparseable (both orders / one order) or delete their rows."""
    lost = sorted({r["contest_id"] for r in rows if r["policy_score"] == 0.0})
    hit = set(lost[: round(share * len(lost))])
    out = []
    for r in rows:
        if r["contest_id"] in hit:
            if how == "delete_both":
                continue
            if how == "delete_one" and r["order"] == "policy_second":
                continue
            if how == "both" or (how == "one" and r["order"] == "policy_first"):
                r = {**r, "verdict": "unparseable", "policy_score": None, "raw_output": "?"}
        out.append(r)
    return out


@pytest.mark.parametrize("how", ["both", "one", "delete_one"])
def test_selectively_missing_losses_cannot_carry_a_claim(how):
    rows = _drop_losses(planted([0.5] * 6, generations=40), 0.6, how)
    report = run(rows)
    c = assert_refused(report, BAR, "too_many_unparseable")
    assert c["status"] == "not_tested"
    # Without the hard cap the worst-case bound still refuses: missing verdicts count as losses.
    lenient = run(rows, settings=FAST.model_copy(update={"max_unparseable_rate": 1.0}))
    c = assert_refused(lenient, BAR, "unparseable_worst_case")
    assert c["status"] != "confirmed"
    assert c["evidence"]["worst_case_low"] < 0.608
    m = lenient["metrics"]
    assert m["policy/gpt-4-0314/worst_case_win_rate"] <= 0.5 + 1e-9   # the truth is 0.5
    assert c["evidence"]["observed_low"] is not None                  # the bound both ways


@pytest.mark.parametrize("generations", [20, 40])
def test_whole_contests_deleted_come_back_as_worst_case_gaps(generations):
    # Deleting both orders of lost contests leaves generations with fewer contests than the others:
    # the gaps are counted (as losses for the bound) and n falls with them.
    rows = _drop_losses(planted([0.5] * 6, generations=generations), 0.6, "delete_both")
    report = run(rows)
    c = assert_refused(report, BAR, "missing_contests")
    assert "too_many_unparseable" in c["flags"]
    assert c["evidence"]["n_missing_contests"] > 0
    lenient = run(rows, settings=FAST.model_copy(update={"max_unparseable_rate": 1.0}))
    assert claim(lenient, BAR)["evidence"]["worst_case_low"] < 0.5


# --------------------------------------------------------------------------- 2. one order / position bias


def _always_a(rows):
    out = []
    for r in rows:
        score = 1.0 if r["order"] == "policy_first" else 0.0
        out.append({**r, "verdict": "A", "policy_score": score, "raw_output": "A"})
    return out


def test_one_order_only_from_an_always_a_judge_is_refused():
    rows = [r for r in _always_a(planted([0.5] * 6, generations=40)) if r["order"] == "policy_first"]
    report = run(rows)
    c = assert_refused(report, BAR, "incomplete_contests")
    assert "position_biased" in c["flags"] and "too_many_unparseable" in c["flags"]
    assert report["metrics"]["policy/gpt-4-0314/worst_case_win_rate"] == pytest.approx(0.5)
    assert report["metrics"]["judgments/n_missing_orders"] == 480


def test_position_bias_in_the_judgments_blocks_even_when_the_bound_clears():
    rows = planted([0.9] * 6, generations=30)
    contests = sorted({r["contest_id"] for r in rows})
    biased = set(contests[::4])            # a quarter of the contests: judge says A in both orders
    rows = [{**r, "verdict": "A", "policy_score": float(r["order"] == "policy_first")}
            if r["contest_id"] in biased else r for r in rows]
    report = run(rows)
    c = assert_refused(report, BAR, "position_biased")
    assert report["metrics"]["judgments/position_bias_A"] == pytest.approx(0.25, abs=0.01)
    assert "position A" in c["reason"]


# --------------------------------------------------------------------------- 3. trust


FAILED = {**TRUSTED, "agreement": 0.156, "agreement_low": 0.07, "agreement_high": 0.31, "position_bias_A": 1.0,
          "position_bias_B": 0.0, "unparseable_rate": 0.69, "n_pairs": 16, "trusted": True}


@pytest.mark.parametrize("calibration,why", [
    (FAILED, "agreement 0.156"),                                                   # the project's own failure, flipped
    ({**TRUSTED, "agreement": 0.5, "agreement_low": 0.4, "agreement_high": 0.6, "min_agreement": 0.1},
     "agreement 0.5 (lower bound 0.4) < min_agreement 0.65"),  # bar lowered in file
    # a small calibration: the point clears the floor, its interval does not (12 of 16 pairs)
    ({**TRUSTED, "agreement": 0.75, "agreement_low": 0.505, "agreement_high": 0.898, "n_pairs": 240},
     "agreement 0.75 (lower bound 0.505) < min_agreement 0.65"),
    ({**TRUSTED, "n_pairs": 10}, "n_pairs 10 < min_pairs 200"),
    ({**TRUSTED, "position_bias_B": 0.4}, "position_bias_B 0.4"),
    ({**TRUSTED, "position_bias_A": None}, "position_bias_A unmeasured"),
    ({**TRUSTED, "unparseable_rate": 0.3}, "unparseable_rate 0.3"),
    ({**TRUSTED, "judge_model": "another-judge"}, "calibration is for judge 'another-judge'"),
    ({**TRUSTED, "judge_fingerprint": "sha256:other"}, "fingerprint"),
    ({**TRUSTED, "trusted": False}, "cached trusted=False disagrees"),
])
def test_trust_is_recomputed_not_read(calibration, why):
    report = run(planted([0.85] * 6), calibration=calibration)
    c = assert_refused(report, BAR, "untrusted_judge")
    assert why in c["reason"]
    assert report["metrics"]["judge/trusted"] == 0
    assert c["judge_trusted"] is False


@pytest.mark.parametrize("key", ["judge_model", "judge_fingerprint", "min_pairs", "position_bias_A", "trusted"])
def test_calibration_missing_a_contract_key_is_an_error(key):
    with pytest.raises(InputError, match=f"missing key\\(s\\) {key}"):
        validate_calibration({k: v for k, v in TRUSTED.items() if k != key}, "calib.json")


def test_card_lint_recomputes_trust_from_the_calibration():
    from reappreg.card.build import lint_claims

    report = run(planted([0.85] * 6))
    supported = [c for c in report["claims"] if c["supported"]]
    assert supported and not lint_claims(supported, report["metrics"], TRUSTED, min_n_confirm=240)
    problems = lint_claims(supported, report["metrics"], FAILED, min_n_confirm=240)
    assert any("untrusted judge" in str(p) for p in problems)
    # a claim that carries a blocking flag is refused by the linter too
    forged = [{**supported[0], "flags": ["position_biased"]}]
    assert any("blocking flags" in str(p) for p in lint_claims(forged, report["metrics"], TRUSTED, min_n_confirm=240))


# --------------------------------------------------------------------------- 4. duplicates


def test_same_generation_answer_and_order_under_new_contest_ids_is_rejected():
    rows = planted([0.62] * 6, generations=10)        # 120 contests
    copies = [{**r, "contest_id": r["contest_id"] + "-again"} for r in rows[:40]]
    with pytest.raises(InputError, match=r"\(generation, opponent answer, order\) judged more than once") as exc:
        validate_judgments(rows + copies, "judgments.jsonl")
    assert "at rows 1, 241" in str(exc.value)


def test_a_generation_relabelled_under_a_new_id_is_rejected_by_its_seed():
    rows = planted([0.62] * 6, generations=10)
    relabel = [{**r, "contest_id": r["contest_id"] + "-x", "generation_id": r["generation_id"] + "-x"}
               for r in rows if r["generation_id"].endswith("-g0")]
    with pytest.raises(InputError, match="sampling seed\\(s\\) shared by different generations"):
        validate_judgments(rows + relabel)


def test_min_n_counts_contests_not_orders():
    rows = planted([0.95] * 6, generations=10, answers=2)   # 120 contests, 240 orders
    report = run(rows)
    c = assert_refused(report, BAR, "below_min_n")
    assert c["evidence"]["n"] == 120 and c["evidence"]["n_orders"] == 240
    assert "120 distinct contests < min_n_confirm = 240" in c["reason"]


# --------------------------------------------------------------------------- 5. correlated generations


@pytest.mark.parametrize("per_vignette,contests", [(3, 20), (4, 30)])
def test_generations_that_win_or_lose_together_do_not_count_as_many(per_vignette, contests):
    rows = []
    for v in range(6):
        for g in range(per_vignette):
            won = g < round(per_vignette * 2 / 3)      # 2/3 of the generations win every contest
            for j in range(contests):
                for order in ("policy_first", "policy_second"):
                    rows.append(order_row(contest=f"v{v}-g{g}-c{j}", generation=f"v{v}-g{g}", vignette=f"v{v}",
                                          answer=f"a{v}-{j}", order=order, score=float(won), seed=100 * v + g))
    report = run(rows)
    c = claim(report, BAR)
    assert c["supported"] is False and c["status"] in ("inconclusive", "refuted"), c["reason"]
    m = report["metrics"]
    assert m["policy/gpt-4-0314/vignette_low"] > 0.608   # the vignette means agree: vignette level alone would pass
    assert c["evidence"]["cluster_low"] < 0.608
    assert c["evidence"]["n_eff"] <= 6 * per_vignette   # capped by the independent generations
    assert c["evidence"]["binding_interval"] in ("generation", "generation_wilson")


def test_cluster_interval_never_narrower_than_the_independent_generations_allow():
    # every vignette mean identical (deff < 1 at the vignette level): no fallback to an iid SE
    rows = planted([0.7] * 6, generations=20)
    report = run(rows)
    m = report["metrics"]
    assert m["policy/gpt-4-0314/vignette_high"] - m["policy/gpt-4-0314/vignette_low"] == pytest.approx(0, abs=1e-12)
    assert m["policy/gpt-4-0314/cluster_low"] < m["policy/gpt-4-0314/generation_wilson_low"] + 1e-12
    assert m["policy/gpt-4-0314/cluster_low"] < 0.7 - 0.05


# --------------------------------------------------------------------------- 6. unbalanced vignettes


def test_a_dominant_vignette_cannot_carry_the_claim():
    rows = planted({"v0": 0.75}, generations=285, answers=2)     # 570 of 600 contests
    for v, rate in enumerate([0.34, 0.34, 0.67, 0.34, 0.34], start=1):
        rows += planted({f"v{v}": rate}, generations=3, answers=2, seed=v, seed_offset=10_000 * v)
    report = run(rows)
    m = report["metrics"]
    assert m["policy/gpt-4-0314/n_missing_contests"] == 0
    assert m["policy/gpt-4-0314/win_rate_pooled"] > 0.7
    c = claim(report, BAR)
    assert c["supported"] is False and c["status"] != "confirmed"
    assert "unbalanced_vignettes" in c["flags"]
    assert c["evidence"]["win_rate"] < 0.5   # the equal-weight estimand


# --------------------------------------------------------------------------- 7. moved bars


@pytest.mark.parametrize("update,opponent", [({"bar": 0.30}, "gpt-4-0314"), ({"bar_opponent": "weak-model"}, "weak-model"),
                                             ({"bar": 0.4, "bar_opponent": "weak-model"}, "weak-model")])
def test_a_moved_bar_is_labelled_custom_and_is_never_the_bar_claim(update, opponent):
    rows = planted([0.55] * 6, generations=40) + planted([0.95] * 6, generations=40, opponent="weak-model",
                                                         seed_offset=50_000, id_prefix="w")
    report = run(rows, settings=FAST.model_copy(update=update))
    custom = claim(report, f"custom_bar/policy/{opponent}")
    assert custom["kind"] == "custom_bar" and "custom_bar" in custom["flags"]
    assert custom["statement"].startswith("[custom_bar: not the reference bar 0.608 vs gpt-4-0314]")
    bars = [c for c in report["claims"] if c["kind"] == "bar"]
    assert [c["threshold"] for c in bars] == [0.608] and bars[0]["opponent"] == "gpt-4-0314"
    assert bars[0]["supported"] is False
    # what the card and registry read as "the bar claim" is the reference one, never the custom one
    from reappreg.card.build import Evidence
    evidence = Evidence.__new__(Evidence)
    evidence.claims = report["claims"]
    assert evidence.bar_claim("policy")["claim_id"] == BAR


@pytest.mark.parametrize("fingerprint", ["md5:99999999999999999999999999999999.dir",
                                         "served:fake-judge:vllm:0123456789abcdef", "fake-judge"])
def test_rows_naming_the_bars_judge_under_another_identity_are_judge_mismatch(fingerprint):
    """Judgments and their calibration consistently rewritten to name the bar's judge (so trust is recomputed
    and met) still carry the fingerprint of the judge that wrote them: not the pinned one, not the bar claim."""
    rows = [{**r, "judge_fingerprint": fingerprint} for r in planted([0.85, 0.8, 0.9, 0.82, 0.88, 0.86])]
    report = run(rows, calibration={**TRUSTED, "judge_fingerprint": fingerprint})
    c = assert_refused(report, BAR, "judge_mismatch")
    assert c["blocking_flags"] == ["judge_mismatch"] and c["judge_model"] == REFERENCE.judge
    assert claim(report, "beats_opponent/policy/gpt-4-0314")["supported"]   # the parity claim needs no bar judge


# --------------------------------------------------------------------------- 8. pools


def _pools(selection_rate=0.9, fresh_rate=0.85):
    sel = planted([selection_rate] * 6, generations=40, selection="best_of_n_selection_pool", seed_offset=1_000_000)
    fresh = planted([fresh_rate] * 6, generations=40, selection="best_of_n_fresh", seed_offset=2_000_000, seed=9)
    return sel, fresh


def test_selection_pool_rows_relabelled_as_fresh_are_rejected():
    sel, _ = _pools()
    relabelled = [{**r, "selection": "best_of_n_fresh"} for r in sel]
    with pytest.raises(InputError, match="judged more than once|disagree on 'selection'"):
        validate_judgments(sel + relabelled)
    new_ids = [{**r, "selection": "best_of_n_fresh", "contest_id": "f" + r["contest_id"],
                "generation_id": "f" + r["generation_id"]} for r in sel]
    with pytest.raises(InputError, match="sampling seed"):
        validate_judgments(sel + new_ids)
    new_seeds = [{**r, "sampling_seed": r["sampling_seed"] + 7_000_000} for r in new_ids]
    frame = validate_judgments(sel + new_seeds)
    with pytest.raises(InputError, match="fresh and selection pools are identical"):
        analyze(frame, TRUSTED, settings=FAST, reference=REFERENCE, trust_policy=POLICY)


def test_fresh_pool_claim_needs_its_selection_pool():
    sel, fresh = _pools()
    alone = run(fresh)
    assert_refused(alone, "bar/best_of_n_fresh_pool/gpt-4-0314", "no_selection_pool")
    both = run(sel + fresh)
    c = claim(both, "bar/best_of_n_fresh_pool/gpt-4-0314")
    assert c["supported"] is True, c["reason"]
    assert c["evidence"]["selection_minus_fresh"] == pytest.approx(0.05)
    assert_refused(both, "bar/best_of_n_selection_pool/gpt-4-0314", "selection_pool")


# --------------------------------------------------------------------------- contest-level scoring (issue 15)


def test_every_contest_split_between_its_orders_scores_one_half_and_counts_once():
    rows = planted([0.0] * 6, generations=20, split_share=1.0)   # each contest: won as A, lost as B
    report = run(rows)
    m = report["metrics"]
    assert m["policy/gpt-4-0314/n"] == 240 and m["policy/gpt-4-0314/n_orders"] == 480
    assert m["policy/gpt-4-0314/win_rate"] == pytest.approx(0.5)
    assert m["policy/gpt-4-0314/splits"] == 240
    assert m["policy/gpt-4-0314/order_disagreement_rate"] == pytest.approx(1.0)
    assert m["policy/gpt-4-0314/win_rate_policy_first"] == 1.0 and m["policy/gpt-4-0314/win_rate_policy_second"] == 0.0
    # 240 contests pass min_n 240; the same rows as 240 orders of 120 contests would not
    assert "below_min_n" not in claim(report, BAR)["flags"]
    half = [r for r in rows if int(r["contest_id"].rsplit("-", 1)[1]) < 20]
    assert "below_min_n" in claim(run(half), BAR)["flags"]


def test_ties_and_a_win_score_three_quarters():
    rows = []
    for v in range(2):
        for g in range(2):
            c = f"v{v}g{g}"
            rows.append(order_row(contest=c, generation=c, vignette=f"v{v}", answer=c, order="policy_first",
                                  score=None, verdict="tie", seed=10 * v + g))
            rows.append(order_row(contest=c, generation=c, vignette=f"v{v}", answer=c, order="policy_second",
                                  score=1.0, seed=10 * v + g))
    report = run(rows)
    assert report["metrics"]["policy/gpt-4-0314/win_rate"] == pytest.approx(0.75)



def test_card_lint_refuses_a_bar_claim_moved_off_the_reference_bar():
    from reappreg.card.build import lint_claims

    report = run(planted([0.85] * 6))
    bar = claim(report, BAR)
    assert not lint_claims([bar], report["metrics"], TRUSTED, min_n_confirm=240)
    moved = {**bar, "threshold": 0.30}
    problems = lint_claims([moved], report["metrics"], TRUSTED, min_n_confirm=240)
    assert any("not at the reference bar" in str(p) for p in problems)


def test_opponent_answers_that_lose_to_everyone_do_not_count_as_many():
    # 3 opponent answers per vignette, met by every generation: two always lose, one always wins.
    # Every generation and every vignette wins 2/3, so only the answers reveal that the 720
    # contests carry 18 outcomes.
    rows = []
    for v in range(6):
        for g in range(40):
            for a in range(3):
                won = a < 2                       # the policy beats answers a0 and a1, loses to a2
                cid = f"v{v}-g{g}-a{a}"
                for order in ("policy_first", "policy_second"):
                    rows.append(order_row(contest=cid, generation=f"v{v}-g{g}", vignette=f"v{v}",
                                          answer=f"v{v}-a{a}", order=order, score=float(won), seed=100 * v + g))
    report = run(rows)
    c = claim(report, BAR)
    m = report["metrics"]
    assert m["policy/gpt-4-0314/vignette_low"] > 0.608 and m["policy/gpt-4-0314/generation_low"] > 0.608
    assert c["supported"] is False and c["evidence"]["binding_interval"] == "answer", c["reason"]


def test_a_contest_copied_under_new_generation_and_seed_is_recognised_by_its_content():
    rows = []
    rng = np.random.default_rng(3)
    for i in range(40):
        p_first, p_second = rng.uniform(0.05, 0.95, size=2)
        for order, p in (("policy_first", p_first), ("policy_second", p_second)):
            probs = (float(p), float(1 - p), 0.0) if order == "policy_first" else (float(1 - p), float(p), 0.0)
            rows.append(order_row(contest=f"c{i}", generation=f"g{i}", vignette=f"v{i % 6}", answer=f"a{i}",
                                  order=order, score=None, verdict="A" if probs[0] > probs[1] else "B", probs=probs,
                                  seed=i, policy_chars=100 + i))
    validate_judgments(rows)   # honest rows pass
    copies = [{**r, "contest_id": r["contest_id"] + "-copy", "generation_id": r["generation_id"] + "-copy",
               "sampling_seed": r["sampling_seed"] + 10_000} for r in rows[:6]]
    with pytest.raises(InputError, match="appear under more than one generation id"):
        validate_judgments(rows + copies)
