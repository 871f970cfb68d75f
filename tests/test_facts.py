"""Facts computed once: every number or verdict shown by more than one output (the headline
metrics, the report, the model cards, the registration's gate evidence) is the same everywhere.

All outputs are built from one planted pipeline (tests/card_fixtures.py) the way their stages
build them, then each shared fact is read back from each output and compared: the policy's
training health, the judge's trust, the reward models' held-out accuracies, the win-rates and
their vignette-cluster lower bounds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from card_fixtures import report_sources, write_pipeline
from reappreg.card.build import CardBuild, card_inputs_for, load_evidence, render_card
from reappreg.evidence.declarations import load_declarations
from reappreg.evidence.formatting import fmt
from reappreg.io import read_json, write_json
from reappreg.registry.provenance import evidence_of
from reappreg.report import collect, headline, render_markdown
from reappreg.settings import load_params
from reappreg.stats.trust import TrustPolicy

POLICY, RM = "reappraisal-policy-grpo", "reappraisal-rm-ensemble"


def _outputs(root: Path) -> dict:
    """headline.json's numbers, report.md, the cards and the policy's gate evidence, as the report,
    card and register stages build them from ``root``."""
    params = load_params(root / "params.yaml")
    sources = report_sources(root)
    # As reappreg.report.stage.report passes them.
    health, length = params.card.health, params.policy.train.max_completion_length
    trust_policy = TrustPolicy.from_settings(params.stats, params.judge)
    numbers = headline(sources, health=health, max_completion_length=length, trust_policy=trust_policy)
    markdown = render_markdown(collect(sources, root, health=health, max_completion_length=length,
                                       trust_policy=trust_policy, settings_dump=params.model_dump(by_alias=True)), "r", "s")
    evidence = load_evidence(certificate=root / "data/guard/certificate.json", eval_metrics=root / "metrics/eval.json",
                             calibration=root / "metrics/judge_calibration.json", claims=root / "reports/claims.json",
                             rm_metrics=root / "metrics/rm", policy_metrics=root / "metrics/policy",
                             prompt=root / "pipelines/prompts/grpo_prompt.yaml")
    decl = load_declarations(root / "registry/models.yaml")
    build = CardBuild(decl=decl, evidence=evidence, root=root,
                      revision={"commit": "0f3c9e2ab41d5e6f7a8b9c0d1e2f3a4b5c6d7e8f", "dirty": "false", "dirty_paths": []})
    template = root / "registry/card_template.md"
    cards = {name: render_card(template.read_text(encoding="utf-8"), str(template), card_inputs_for(params, build, name),
                               evidence) for name in (POLICY, RM)}
    gates = evidence_of("policy", evidence, health=health, max_completion_length=length)
    return {"headline": numbers, "report": markdown, "cards": cards, "gates": gates}


def _one(pattern: str, text: str) -> str:
    found = re.findall(pattern, text)
    assert len(found) == 1, (pattern, found)
    return found[0]


@pytest.fixture(scope="module")
def unhealthy_policy(tmp_path_factory) -> dict:
    """The seeds' run: the training monitor said healthy, but 75% of completions hit the format
    gate and every completion reached the token limit."""
    root = write_pipeline(tmp_path_factory.mktemp("facts"))
    length = load_params(root / "params.yaml").policy.train.max_completion_length
    train = read_json(root / "metrics/policy/train.json")
    assert train["healthy"] is True
    train["final"].update({"health/format_gate_hit_rate": 0.75, "health/completion_length": float(length)})
    write_json(root / "metrics/policy/train.json", train)
    return _outputs(root)


def test_training_health_is_one_verdict_everywhere(unhealthy_policy):
    out = unhealthy_policy
    policy = out["headline"]["policy"]
    said = {
        "headline policy.healthy": "healthy" if policy["healthy"] == 1 else "not healthy",
        "report section": _one(r"gates \(as on the model card\): \*\*([^*]+)\*\*", out["report"]),
        "report summary": _one(r"\| \[Policy training\]\(#policy-training-health\) \| \*\*([^*]+)\*\*", out["report"]),
        "card": _one(r"\nVerdict: \*\*([^*]+)\*\*", out["cards"][POLICY]),
        "card facts row": _one(r"\| Training health \| \*\*([^*]+)\*\*", out["cards"][POLICY]).lower(),
        "registry gate evidence": out["gates"]["training.verdict"],
    }
    assert said == {where: "unhealthy" for where in said} | {"headline policy.healthy": "not healthy"}, said
    assert out["gates"]["training.healthy"] is False and policy["healthy"] == 0
    # The monitor's own flag stays visible, under its own name, in every output.
    assert policy["monitor_healthy"] == 1 and out["gates"]["training.monitor_healthy"] is True
    assert "Training monitor verdict: **healthy**" in out["report"]
    assert "training monitor (reward spread, KL): healthy" in out["report"]
    # The values the verdict was judged on are the ones the headline reports.
    assert (policy["format_gate_hit_rate"], policy["truncation_rate"]) == (0.75, 1.0)
    assert f"| Format-gate hit rate | {fmt(0.75)} |" in out["cards"][POLICY]
    assert f"format-gate hit rate {fmt(0.75)} (>" in out["report"]


def test_judge_trust_is_one_verdict_everywhere(unhealthy_policy):
    out = unhealthy_policy
    trusted = out["headline"]["judge"]["trusted"] == 1
    assert _one(r"\| \[Judge\]\(#judge-calibration\) \| \*\*([^*]+)\*\*", out["report"]) == \
        ("trusted" if trusted else "NOT trusted")
    assert ("-- trusted by its calibration" in out["cards"][POLICY]) is trusted
    assert out["gates"]["judge.trusted"] is trusted


def test_a_stale_cached_trust_flag_is_nowhere_the_verdict(tmp_path):
    # The calibration's `trusted` is a cache: a judge whose numbers fail the criteria is untrusted in
    # every output even when the cache says otherwise.
    root = write_pipeline(tmp_path / "p", trusted=False)
    calibration = read_json(root / "metrics/judge_calibration.json")
    write_json(root / "metrics/judge_calibration.json", {**calibration, "trusted": True})
    out = _outputs(root)
    assert out["headline"]["judge"]["trusted"] == 0
    assert _one(r"\| \[Judge\]\(#judge-calibration\) \| \*\*([^*:]+)", out["report"]).startswith("NOT trusted")
    assert "NOT TRUSTED by its calibration" in out["cards"][POLICY]
    assert out["gates"]["judge.trusted"] is False


def test_reward_model_accuracies_are_the_same_everywhere(unhealthy_policy):
    out = unhealthy_policy
    rm = out["headline"]["rm"]
    assert rm, "the headline reports no reward model"
    for stem, accuracy in rm.items():
        shown = fmt(accuracy)
        # The planted ensemble is two-part: its row is the ranking model's (the residual part has its own row).
        label = re.escape(stem) + (r" \(two-part ranking model\)" if stem == "ensemble" else "")
        assert re.search(rf"\| {label} \| \w+ \| {re.escape(shown)}[ |]", out["report"]), (stem, shown)
        assert re.search(rf"\| `{re.escape(stem)}`[^|]* \| {re.escape(shown)} \|", out["report"]), (stem, shown)  # summary
    assert f"| Pairwise accuracy (held-out, ranking model) | {fmt(rm['ensemble'])} |" in out["cards"][RM]


def test_win_rates_and_cluster_bounds_are_the_same_everywhere(unhealthy_policy):
    out = unhealthy_policy
    evals = out["headline"]["eval"]
    pairs = sorted({tuple(k.split("/")[:2]) for k in evals if k.endswith("/win_rate")})
    assert pairs
    for condition, opponent in pairs:
        win, low = fmt(evals[f"{condition}/{opponent}/win_rate"]), fmt(evals[f"{condition}/{opponent}/cluster_low"])
        n = evals[f"{condition}/{opponent}/n"]
        assert re.search(rf"\| {condition} \| {re.escape(opponent)} \| pooled \| {n} \| {re.escape(win)} \| \[[^]]+\] \| "
                         rf"\[{re.escape(low)}, ", out["report"]), (condition, opponent)
        assert re.search(rf"\| {condition} \| {re.escape(opponent)} \| {re.escape(win)} \| {fmt(n)} \| [^|]+ \| "
                         rf"{re.escape(low)} \|", out["cards"][POLICY]), (condition, opponent)
        gate = out["gates"]
        if gate.get("eval.bar.reference") == opponent and condition == "policy":
            assert (fmt(gate["eval.bar.win_rate"]), fmt(gate["eval.bar.cluster_low"])) == (win, low)
