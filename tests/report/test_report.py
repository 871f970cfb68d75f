"""The pipeline report: every section from small planted files, missing inputs named, never invented."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from reappreg.guard.certificate import detector_rows
from reappreg.report import HEADLINE_MAX_KEYS, ReportSources, collect, headline, render_html, render_markdown
from reappreg.evidence.formatting import fmt
from reappreg.report.blocks import Figure, Table
from card_fixtures import report_sources
from stage_commands import stage_argv

RESULTS_TITLE = "Results across models"
RM_COMPARISON_TITLE = "Reward models and trivial rankers: pairwise accuracy"

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj), encoding="utf-8")


sources_in = report_sources  # the pipeline's paths, as dvc.yaml's report stage passes them


FOREST = """condition,opponent,row,row_kind,label,n,n_unparseable,win_rate,iid_low,iid_high,cluster_low,cluster_high,n_clusters,n_eff
policy,gpt-4-0314,v1,vignette,x,10,0,0.7,0.397,0.892,0.412,0.911,4,10.0
policy,gpt-4-0314,v2,vignette,x,0,7,,,,,,0,
policy,gpt-4-0314,pooled,pooled,x,10,7,0.7,0.397,0.892,0.412,0.911,4,8.5
"""


HELDOUT = ["It may be that your friend was overwhelmed by the evening and meant to thank you in person later on.",
           "Perhaps the silence says more about the pressure your friend is under at work than about how much they value you."]


def plant(root: Path) -> ReportSources:
    """One small file per source, with numbers that appear nowhere else."""
    s = sources_in(root)
    _jsonl(s.canonical / "reappraisals.jsonl", [{"source": "human"}] * 3 + [{"source": "gpt-4-0314"}] * 2)
    _jsonl(s.canonical / "vignettes.jsonl", [{"vignette_id": "v1"}, {"vignette_id": "v2"}])
    _jsonl(s.train / "reappraisals.jsonl", [{"source": "human"}] * 3)
    _jsonl(s.train / "ratings.jsonl", [{"rating": 1}] * 7)
    _jsonl(s.heldout, [{"answer_id": f"g-v1-0{i}", "source": "gpt-4-0314", "vignette_id": "v1", "text": text} for i, text in
                       enumerate(HELDOUT, 1)])
    _json(s.validation, {"success": False, "n_expectations": 23, "n_failed": 1, "source": "sample",
                         "tables": {"reappraisals": 5},
                         "failed": [{"table": "ratings", "expectation": "expect_column_values_to_be_between",
                                     "kwargs": {"column": "effectiveness"}, "unexpected_count": 4, "element_count": 7,
                                     "example_ids": ["r9"]}]})
    _json(s.certificate, {"schema": "reappreg.guard.certificate/v1", "result": "pass", "policy": "block",
                          "counts": {"hits": 0, "texts_checked": 618, "removed_records": 0, "records_checked": 611,
                                     "sources": 3, "hits_ngram": 0, "hits_minhash": 0},
                          "detectors": {"ngram": {"n": 5, "min_run": 20, "containment": 0.5},
                                        "minhash": {"threshold": 0.3, "num_perm": 64}, "normalisation": "norm/v3"},
                          "detector_rows": detector_rows(),
                          "heldout": {"answers": 177, "answer_variants": 199}, "tokenizers": [{"name": "rm-encoder"}],
                          "training": [{"path": "data/train/reappraisals.jsonl", "records": 3, "flagged_records": 0,
                                        "guarded_path": "data/guarded/reappraisals.jsonl"}]})

    def rm_split(acc, length, rival, difference, low, high, vs_regression=None, longer_worse=None):
        # The strongest trivial rival here is the length regression (as on real expert ratings).
        split = {"pairwise_accuracy": acc, "spearman_within_vignette": 0.6351, "n_pairs": 830,
                 "trivial_baselines": {"rankers": {"length_chars": {"accuracy": length},
                                                   "length_regression": {"accuracy": rival}},
                                       "vs_rival": {"ranker": "length_regression", "rival_accuracy": rival,
                                                    "difference": difference, "cluster_low": low, "cluster_high": high}}}
        if vs_regression:
            split["trivial_baselines"]["model_minus_ranker"] = {"length_regression": dict(zip(
                ("difference", "cluster_low", "cluster_high"), vs_regression))}
        if longer_worse:
            split["trivial_baselines"]["longer_is_worse"] = {"model": dict(zip(
                ("accuracy", "cluster_low", "cluster_high"), longer_worse))}
        return split

    _json(s.rm_metrics / "bt_seed_0.json", {"objective": "bt", "holdout": rm_split(0.8123, 0.5512, 0.6613, 0.2611, 0.1212, 0.3313),
                                            "lovo": rm_split(0.7891, 0.5414, 0.6515, 0.1376, -0.0312, 0.2911,
                                                             (0.1376, -0.0312, 0.2911), (0.7123, 0.6012, 0.8034)),
                                            "baselines": {"length_only": {"pairwise_accuracy": 0.5512}}})
    _json(s.rm_metrics / "ensemble.json", {
        "objective": "length_residual", "two_part": {"enabled": True, "weight": 0.8125},
        "recipe": {"reward": "the residual part alone (mean - k * std over the length_residual members), behind the "
                             "format gate"},
        "holdout": {"ranking": {**rm_split(0.8456, 0.5512, 0.6613, 0.2944, 0.2011, 0.3877), "pairwise_accuracy_low": 0.8111,
                                "pairwise_accuracy_high": 0.8777},
                    "residual": rm_split(0.7012, 0.5512, 0.6613, 0.0399, -0.0511, 0.1302)},
        "lovo": {"ranking": rm_split(0.9335, 0.5414, 0.6515, 0.2820, 0.1919, 0.3721),
                 "residual": rm_split(0.6988, 0.5414, 0.6515, 0.0473, -0.0322, 0.1288, None, (0.7345, 0.6232, 0.8122)),
                 "format_gate": {"rejected_share": 0.4167, "gated_fraction_by_source": {"human": 0.4167},
                                 "gated": {"accuracy": 0.6012, "cluster_low": 0.5511, "cluster_high": 0.6533},
                                 "ungated": {"accuracy": 0.6988, "cluster_low": 0.6611, "cluster_high": 0.7344}}},
        "beats_length_baseline": {"passed": True, "rival": "length_regression", "cluster_low": 0.1919,
                                  "rule": "the paired difference's interval lies above zero, and the reward part's lower "
                                          "bound lies above chance where the longer text is worse",
                                  "reward_longer_is_worse": {"part": "residual", "accuracy": 0.7345, "low": 0.6123,
                                                             "chance": 0.5}}})
    _json(s.policy_metrics / "train.json", {"healthy": True, "steps_run": 3, "unhealthy_reason": None,
                                            "reward": {"reads": "the residual part of the two-part RM, behind the format "
                                                                "gate", "length_prior_weight": 0.0},
                                            "final": {"health/format_gate_hit_rate": 0.2468, "health/kl": 0.0135},
                                            "history": [{"step": 1, "health/kl": 0.01, "health/reward_std": 0.5},
                                                        {"step": 2, "health/kl": 0.012, "health/reward_std": 0.4},
                                                        {"step": 3, "health/kl": 0.0135, "health/reward_std": 0.3}]})
    _json(s.calibration, {"trusted": True, "judge_model": "judge-x", "agreement": 0.7321, "agreement_low": 0.6543,
                          "agreement_high": 0.8012, "kappa_new_key": 0.4242, "n_pairs": 41, "min_agreement": 0.65,
                          "min_pairs": 16, "position_bias_A": 0.0513, "position_bias_B": 0.0244, "unparseable_rate": 0.0})
    _json(s.eval_metrics, {"policy/gpt-4-0314/win_rate": 0.7, "policy/gpt-4-0314/cluster_low": 0.412,
                           "policy/gpt-4-0314/n": 10, "policy/gpt-4-0314/vignette/v1/n": 10, "judge/trusted": 1})
    s.forest.parent.mkdir(parents=True, exist_ok=True)
    s.forest.write_text(FOREST, encoding="utf-8")
    _json(s.claims, [{"claim_id": "bar/policy/gpt-4-0314", "kind": "bar", "status": "not_tested", "supported": False,
                      "statement": "The policy wins.", "reason": "n = 10 < 240", "flags": ["below_min_n"],
                      "blocking_flags": ["below_min_n"], "threshold": 0.608,
                      "evidence": {"win_rate": 0.7, "n": 10, "cluster_low": 0.412, "cluster_high": 0.911,
                                   "binding_interval": "vignette_t"}}])
    _json(s.registration, {"registered": [{"name": "reappraisal-policy-grpo", "version": "3",
                                           "aliases": ["candidate"], "gates": {"min_n": {"passed": False, "value": 10}},
                                           "gate_results": [{"gate": "guard_pass", "passed": True, "evidence": "pass"}]}],
                           "verify": {"verify_passes": True, "verified": 2, "violations": 0, "history_problems": [],
                                      "checked": "signature, bytes", "aliases": [
                                          {"name": "reappraisal-policy-grpo", "alias": "candidate", "version": "3", "verified": True,
                                           "detail": "passes its signed gates"},
                                          {"name": "reappraisal-policy-grpo", "alias": "champion", "version": "2", "verified": True,
                                           "detail": "passes its signed gates"}]}})
    _json(s.leakscan, {"passed": True, "n_hits": 0, "n_probes": 1264, "mlflow_runs_scanned": 32, "hits": []})
    verdicts = [{"opponent_source": "gpt-4-0314", "opponent_answer_id": "g-v1-01", "order": "policy_first", "verdict": "A",
                 "policy_score": 1.0, "outcome": "win"},
                {"opponent_source": "gpt-4-0314", "opponent_answer_id": "g-v1-01", "order": "policy_second", "verdict": "A",
                 "policy_score": 0.0, "outcome": "loss"}]
    _json(s.samples, {"schema": "reappreg.report.samples/v1", "per_vignette": 1, "rule": "first 1 per vignette",
                      "reward": "the GRPO reward", "conditions": {"policy": {}, "base": {}},
                      "samples": [{"condition": "policy", "vignette_id": "v1", "scenario": "Your friend did not reply.",
                                   "answer": "You can read the silence as a busy week | not a verdict on you.",
                                   "rm_reward": 0.4321, "format_gate_hit": False, "missing_close_tag": False,
                                   "hit_max_new_tokens": False, "verdicts": verdicts},
                                  {"condition": "base", "vignette_id": "v1", "scenario": "Your friend did not reply.",
                                   "answer": "Sure! Here is a reappraisal.", "rm_reward": -1.0, "format_gate_hit": True,
                                   "missing_close_tag": False, "hit_max_new_tokens": True, "verdicts": []}]})
    _json(s.results, RESULTS)
    s.rm_comparison.parent.mkdir(parents=True, exist_ok=True)
    s.rm_comparison.write_bytes(comparison_png())
    return s


def _result_row(condition: str, kind: str, opponent: str = "gpt-4-0314", **values) -> dict:
    """A metrics/results.json row (reappreg.stats.results) with the keys the stats stage writes."""
    row = {"row_id": f"{condition}/{opponent}", "condition": condition, "kind": kind, "pool": "policy",
           "opponent": opponent, "ood": kind == "ood", "checkpoint_step": None, "status": "evaluated", "reason": None,
           "n_eff": None, "n_vignettes": 4, "n_generations": 8, "binding_interval": "vignette_t", "bar": 0.608,
           "bar_cleared": False, "bar_status": "not_confirmed", "bar_supported": False, "bar_reason": "", "flags": []}
    return {**row, **values}


# One row per condition the stats stage evaluates: the policy, a kept checkpoint, base, a reference
# condition, a declared condition that was not run and an off-distribution set; numbers found nowhere else.
RESULTS = {
    "schema_version": 1, "confidence": 0.95,
    "reference_bar": {"bar": 0.608, "opponent": "gpt-4-0314", "source": "AlpacaEval-style bar"},
    "judge": {"model": "judge-x", "trusted": True, "trust_reason": None},
    "rows": [
        _result_row("policy", "policy", win_rate=0.6931, n=40, iid_screening_low=0.5402, iid_screening_high=0.8133,
                    cluster_low=0.4721, cluster_high=0.8566, lc_win_rate=0.6244, lc_low=0.5017, lc_high=0.7362,
                    mean_length=412.5, flags=["below_min_n"]),
        _result_row("policy-step-2", "checkpoint", checkpoint_step=2, win_rate=0.5813, n=40, iid_screening_low=0.4274,
                    iid_screening_high=0.7209, cluster_low=0.3561, cluster_high=0.7790, lc_win_rate=0.5528,
                    lc_low=0.4119, lc_high=0.6807, mean_length=388.25, flags=["below_min_n"]),
        _result_row("base", "model", win_rate=0.2188, n=40, iid_screening_low=0.1167, iid_screening_high=0.3719,
                    cluster_low=0.0833, cluster_high=0.4102, lc_win_rate=None, lc_low=None, lc_high=None,
                    mean_length=1290.75, flags=["below_min_n", "length_sensitive"]),
        _result_row("human-reference", "reference", win_rate=0.4477, n=40, iid_screening_low=0.3036,
                    iid_screening_high=0.6009, cluster_low=0.2688, cluster_high=0.6352, lc_win_rate=0.4615,
                    lc_low=0.3302, lc_high=0.5934),   # a file written before mean_length: no length shown
        _result_row("sft", "model", status="not_run", reason="no judgments for condition 'sft'", n=None, win_rate=None,
                    iid_screening_low=None, iid_screening_high=None, cluster_low=None, cluster_high=None,
                    lc_win_rate=None, lc_low=None, lc_high=None, mean_length=None, bar_cleared=None, bar_status=None),
        _result_row("ood-coping", "ood", opponent="coping-human", win_rate=0.5377, n=24, iid_screening_low=0.3538,
                    iid_screening_high=0.7121, cluster_low=0.2905, cluster_high=0.7711, lc_win_rate=0.5106,
                    lc_low=0.3216, lc_high=0.6983, mean_length=402.0, bar=None, bar_cleared=None, bar_status=None,
                    bar_supported=None),
    ],
}


def comparison_png() -> bytes:
    """A stand-in for plots/rm/comparison.png (`reappreg rm compare` draws the real one)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.barh([0, 1, 2], [0.8123, 0.6515, 0.5414], color=["tab:blue", "tab:grey", "tab:grey"])
    ax.set_yticks([0, 1, 2], ["bt/seed_0", "baseline: length_regression", "baseline: length_chars"])
    ax.set_title("comparison (planted)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def markdown_of(sources: ReportSources, root: Path) -> str:
    return render_markdown(collect(sources, root), "report", "subtitle")


def test_every_section_shows_the_planted_values(tmp_path):
    md = markdown_of(plant(tmp_path), tmp_path)
    expected = [
        "| human | 3 | 3 | 0 |", "| gpt-4-0314 | 2 | 0 | 2 |", "| total | 5 | 3 | 2 |",      # data per source
        "| data/train/ratings.jsonl | 7 |",
        "**FAILED**: 1 of 23", "| ratings | expect_column_values_to_be_between | effectiveness | 4 | 7 | r9 |",
        "| ngram | exact word n-grams | n=5, min_run=20, containment=0.500 | 0 |",         # detectors x (setting, hits)
        "| held-out answers (variants) | 177 (199) |", "| records | 611 |",
        "| counts.texts_checked | 618 |", "| data/train/reappraisals.jsonl | 3 | 0 | data/guarded/reappraisals.jsonl |",
        # one row per RM, one column per comparison, intervals in the cell
        "| bt_seed_0 | bt | 0.812 (no interval) | 0.789 (no interval) | 0.661 / 0.651 (length_regression) | 0.661 / 0.651 | "
        "0.138 [-0.031, 0.291] | 0.138 [-0.031, 0.291] | 0.712 [0.601, 0.803] | NO |",
        "| ensemble (two-part ranking model) | length_residual | 0.846 [0.811, 0.878] | 0.933 (no interval) | "
        "0.661 / 0.651 (length_regression) | 0.661 / 0.651 | 0.282 [0.192, 0.372] | — | — | yes (registry gate: pass) |",
        "| ensemble (residual part: the GRPO reward) | length_residual | 0.701 (no interval) | 0.699 (no interval) | "
        "0.661 / 0.651 (length_regression) | 0.661 / 0.651 | 0.047 [-0.032, 0.129] | — | 0.735 [0.623, 0.812] | "
        "longer-is-worse lower bound 0.612 vs chance 0.500 |",
        # the format gate: the share of training texts it rejects, next to the gated accuracy
        "| ensemble | leave-one-vignette-out (every training text once) | 0.417 | 0.601 [0.551, 0.653] | "
        "0.699 [0.661, 0.734] |",
        # the gate's rule in the words of the metrics file that computed it, not restated
        "in the words of the metrics that computed it: the paired difference's interval lies above zero, and the reward "
        "part's lower bound lies above chance where the longer text is worse",
        "| bt_seed_0 | length_only.pairwise_accuracy | 0.551 |",                                # baselines by key (raw)
        "Training monitor verdict: **healthy** after 3 steps",
        "| Format-gate hit rate (last logged step) | 0.247 | final.health/format_gate_hit_rate |",
        "| Agreement with human preference pairs | 0.732 | 0.654 | 0.801 | agreement |",      # intervals joined
        "| Kappa new key | 0.424 | — | — | kappa_new_key |",                                   # an unknown key is kept
        "| policy | gpt-4-0314 | v1 | 10 | 0.700 | [0.397, 0.892] | [0.412, 0.911] |",
        "| bar/policy/gpt-4-0314 | not_tested | no | The policy wins. | n = 10 < 240 | below_min_n |",
        "| reappraisal-policy-grpo | 3 | — | — | — |",                                          # registered versions
        "| reappraisal-policy-grpo | champion | 2 | yes | passes its signed gates |",            # where aliases point
        "`reappreg registry verify` right after registration: **passes** (2 alias(es) verified, 0 violation(s)",
        "| guard_pass | yes | pass |", "`gate_results` of reappraisal-policy-grpo 3",           # a list of records: its own table
        "Leak scan: **passed**: 0 hit(s) in 1264 probes",
        "**v1**: Your friend did not reply.",                                                   # the policy's own words
        "| policy | You can read the silence as a busy week \\| not a verdict on you. | 0.432 | passed | "
        "win (A) vs gpt-4-0314 g-v1-01 | loss (A) vs gpt-4-0314 g-v1-01 |",
        "| base | Sure! Here is a reappraisal. | -1.000 | HIT: format penalty; cut at the token limit | not judged | not judged |",
    ]
    missing = [e for e in expected if e not in md]
    assert missing == [], md
    assert "> **Missing:**" not in md


def test_the_detector_table_has_the_row_each_registered_detector_declares(tmp_path):
    """Each detector declares its own report row (label, settings shown), and the certificate
    carries the rows: every registered detector is in the table, a row is never hand-kept in
    the report, and a certificate made before the rows were declared still shows its settings."""
    from reappreg.guard.registry import REGISTERED
    from reappreg.settings.guard import GuardSettings

    sources = plant(tmp_path)
    cert = json.loads(sources.certificate.read_text())
    cert["detectors"].update({d.name: d.record(GuardSettings()) for d in REGISTERED})
    cert["counts"].update({f"hits_{d.name}": i for i, d in enumerate(REGISTERED)})
    sources.certificate.write_text(json.dumps(cert))
    md = markdown_of(sources, tmp_path)
    for i, d in enumerate(REGISTERED):
        assert any(line.startswith(f"| {d.name} | {d.label} | ") and line.endswith(f" | {i} |") for line in md.splitlines()), d.name
    del cert["detector_rows"]
    sources.certificate.write_text(json.dumps(cert))
    md = markdown_of(sources, tmp_path)
    assert "| ngram | not declared in the certificate | n=5, containment=0.500, min_run=20, span=3.000 | 0 |" in md


def test_a_row_without_a_value_says_why(tmp_path):
    md = markdown_of(plant(tmp_path), tmp_path)
    assert "| policy | gpt-4-0314 | v2 | 0 | — | — | — | no scored judgment: all 7 judgment(s) unparseable |" in md
    pooled = next(line for line in md.splitlines() if "| pooled |" in line)
    assert "from only 4 vignette(s)" in pooled


def test_missing_inputs_are_named_with_their_stage_and_nothing_is_invented(tmp_path):
    sources = sources_in(tmp_path)
    summary, *sections = collect(sources, tmp_path)
    assert all(s.missing for s in sections), [s.title for s in sections if not s.missing]
    assert all(not [b for b in s.blocks if isinstance(b, (Table, Figure))] for s in sections)
    lines = summary.blocks[0].lines
    assert {line.verdict for line in lines} == {"missing"} and not [f for line in lines for f in line.facts]
    md = render_markdown(sections, "report", "subtitle")
    for path, stage in [("data/validation/report.json", "validate"), ("data/guard/certificate.json", "guard"),
                        ("metrics/rm", "rm_train"), ("metrics/policy", "policy_train"), ("reports/claims.json", "stats"),
                        ("reports/registry/registration.json", "register"), ("reports/leakscan.json", "leakscan"),
                        ("metrics/results.json", "results")]:
        assert f"`{path}`: not found (written by `dvc repro {stage}`)" in md
    assert headline(sources) == {}
    body = md.split("subtitle", 1)[1]
    assert re.findall(r"\d+\.\d+", body) == []  # no number appears without a file behind it


def test_an_unreadable_or_wrong_shaped_file_is_a_missing_section_with_the_reason(tmp_path):
    sources = plant(tmp_path)
    sources.validation.write_text("{not json", encoding="utf-8")
    _json(sources.claims, {"not": "a list"})
    (sources.rm_metrics / "regression_seed_0.json").write_text("[1,", encoding="utf-8")
    md = markdown_of(sources, tmp_path)
    assert "`data/validation/report.json`: unreadable (" in md and "invalid JSON at line 1" in md
    assert "`reports/claims.json`: expected a JSON list, found dict" in md
    assert "`metrics/rm/regression_seed_0.json`: unreadable (" in md
    assert "| bt_seed_0 | bt | 0.812 (no interval) |" in md  # the readable files are still shown


def test_policy_section_applies_the_cards_health_gates(tmp_path):
    from reappreg.settings.card import CardHealthSettings

    sources = plant(tmp_path)
    md = render_markdown(collect(sources, tmp_path, health=CardHealthSettings(max_format_gate_hit_rate=0.2),
                                 max_completion_length=48), "r", "s")
    assert "Verdict with the format-gate and truncation gates (as on the model card): **unhealthy**." in md
    assert "| format-gate hit rate | 0.247 | 0.200 | FAIL | train.final.health/format_gate_hit_rate |" in md
    assert "| truncation rate | — | 0.250 | not checked | not recorded |" in md
    assert "as on the model card" not in markdown_of(sources, tmp_path)  # without params: only what the file says


def test_policy_without_history_says_so_instead_of_drawing_curves(tmp_path):
    sources = plant(tmp_path)
    _json(sources.policy_metrics / "train.json", {"healthy": False, "unhealthy_reason": "kl above max_kl", "steps_run": 2})
    sections = collect(sources, tmp_path)
    policy = next(s for s in sections if s.title.startswith("Policy"))
    assert not [b for b in policy.blocks if isinstance(b, Figure)]
    assert any("no per-step history" in m for m in policy.missing)
    assert "**UNHEALTHY** (kl above max_kl)" in render_markdown(sections, "r", "s")


def test_html_is_self_contained_with_every_figure_embedded(tmp_path):
    sections = collect(plant(tmp_path), tmp_path)
    figures = [b for s in sections for b in s.blocks if isinstance(b, Figure)]
    titles = {f.title for f in figures}
    assert {RM_COMPARISON_TITLE, "Policy health per training step",
            "Win-rate of policy against gpt-4-0314"} <= titles
    page = render_html(sections, "report <&>", "from `files`")
    assert "<title>report &lt;&amp;&gt;</title>" in page and "<code>files</code>" in page
    for external in ("http://", "https://", "<script", "<link", "@import"):
        assert external not in page
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)">', page)
    assert len(images) == len(figures)
    for data in images:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"


def test_headline_is_a_few_numbers_only(tmp_path):
    numbers = headline(plant(tmp_path))
    flat = {f"{g}.{k}": v for g, values in numbers.items() for k, v in values.items()}
    assert 0 < len(flat) <= HEADLINE_MAX_KEYS
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat.values()), flat
    assert flat["validation.failed"] == 1 and flat["guard.pass"] == 1 and flat["guard.hits"] == 0
    assert flat["rm.bt_seed_0"] == 0.8123 and flat["rm.ensemble"] == 0.8456
    # Without the card.health params only the monitor's flag is written, never as the verdict.
    assert flat["policy.monitor_healthy"] == 1 and "policy.healthy" not in flat
    assert flat["policy.format_gate_hit_rate"] == 0.2468
    assert flat["judge.trusted"] == 1 and flat["judge.agreement"] == 0.7321
    assert flat["eval.policy/gpt-4-0314/win_rate"] == 0.7 and "eval.policy/gpt-4-0314/vignette" not in str(flat)
    assert flat["claims.total"] == 1 and flat["claims.supported"] == 0 and flat["leakscan.hits"] == 0


def test_headline_policy_healthy_is_the_verdict_not_the_monitor(tmp_path):
    from reappreg.settings.card import CardHealthSettings

    sources = plant(tmp_path)
    strict = headline(sources, health=CardHealthSettings(max_format_gate_hit_rate=0.2), max_completion_length=48)
    assert strict["policy"]["monitor_healthy"] == 1 and strict["policy"]["healthy"] == 0
    assert strict["policy"]["format_gate_hit_rate"] == 0.2468


def test_headline_refuses_to_grow_past_the_limit(tmp_path):
    from reappreg.errors import InputError

    sources = plant(tmp_path)
    _json(sources.eval_metrics, {f"policy/opponent-{i}/win_rate": 0.5 for i in range(HEADLINE_MAX_KEYS + 1)})
    with pytest.raises(InputError, match="more than 100"):
        headline(sources)


def test_report_command_writes_the_page_and_logs_it_to_mlflow(tmp_path, monkeypatch, tracking_uri):
    from mlflow import MlflowClient

    from reappreg import cli

    plant(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: cpu\n", encoding="utf-8")  # every section at its defaults
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        cli.main(stage_argv("report"))
    assert info.value.code == 0
    page = (tmp_path / "reports/report.html").read_text(encoding="utf-8")
    assert "Win-rates against held-out answers" in page
    # The stage passes the results table and the RM comparison figure (dvc.yaml's command): the page leads with one
    # and embeds the other.
    assert page.index('<section id="results">') < page.index('<section id="data">')
    assert base64.b64encode((tmp_path / "plots/rm/comparison.png").read_bytes()).decode("ascii") in page
    assert "| bt_seed_0 | bt | 0.812 (no interval) |" in (tmp_path / "reports/report.md").read_text(encoding="utf-8")
    assert json.loads((tmp_path / "metrics/headline.json").read_text())["rm"]["bt_seed_0"] == 0.8123
    client = MlflowClient(tracking_uri=tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.stage = 'report'")
    assert len(runs) == 1
    logged = {a.path for a in client.list_artifacts(runs[0].info.run_id, "report")}
    assert logged == {"report/report.html", "report/report.md", "report/headline.json"}
    assert runs[0].data.metrics["rm/bt_seed_0"] == 0.8123
    assert "checked against the 2 held-out answers with the guard's detectors: no overlap" in \
        (tmp_path / "reports/report.md").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                    reason="needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver")
def test_the_page_reads_in_headless_chromium(tmp_path):
    """Open the page as a person would; every section title shows and every figure loads. Keeps a screenshot
    (copied to $REAPPREG_REPORT_SCREENSHOT when set, for CI to keep as an artifact)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    page = tmp_path / "report.html"
    sections = collect(plant(tmp_path / "repo"), tmp_path / "repo")
    page.write_text(render_html(sections, "reappreg pipeline report", "planted files"), encoding="utf-8")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                 "--disable-dev-shm-usage", "--window-size=1280,4000", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get(page.as_uri())
        text = driver.find_element("tag name", "body").text
        assert [s.title for s in sections if s.title not in text] == []
        assert "no scored judgment: all 7 judgment(s) unparseable" in text
        widths = driver.execute_script("return Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
        assert len(widths) == 3 and all(w > 300 for w in widths), widths
        # The summary is the first thing on the page, above the first section, and its links land on sections.
        summary = driver.find_element("id", "summary")
        assert summary.location["y"] < driver.find_element("id", "data").location["y"]
        assert "1 of 2 beat length" in summary.text and "verify passes" in summary.text
        hrefs = [a.get_attribute("href").rsplit("#", 1)[1] for a in summary.find_elements("css selector", "table.summary a")]
        assert hrefs and all(driver.find_elements("id", h) for h in hrefs), hrefs
        # Raw dumps are folded: their rows are not visible until opened.
        raw = driver.find_element("xpath", "//details//td[text()='counts.texts_checked']")
        assert not raw.is_displayed()
        shot = tmp_path / "report.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 20_000
        shots = {"": shot}
        for name in ("summary", "the-policy-s-own-words"):
            shots[f"_{name}"] = tmp_path / f"{name}.png"
            driver.find_element("id", name).screenshot(str(shots[f"_{name}"]))
            assert shots[f"_{name}"].stat().st_size > 5_000
        target = os.environ.get("REAPPREG_REPORT_SCREENSHOT")
        if target:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            for suffix, path in shots.items():
                shutil.copy(path, Path(target).with_stem(Path(target).stem + suffix))
    finally:
        driver.quit()


def test_the_headline_file_is_the_only_declared_metrics_file():
    """`dvc metrics show` prints one column per key of every declared file: only headline numbers are declared."""
    import yaml

    stages = yaml.safe_load((Path(__file__).resolve().parents[2] / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    declared = {name: [next(iter(m)) if isinstance(m, dict) else m for m in stage["metrics"]]
                for name, stage in stages.items() if stage.get("metrics")}
    assert declared == {"report": ["metrics/headline.json"]}
    report = stages["report"]
    assert "reports/report.html" in [next(iter(o)) if isinstance(o, dict) else o for o in report["outs"]]
    for flag in ("--html", "--markdown", "--headline"):
        assert flag in report["cmd"]


def test_validation_section_says_whether_the_report_still_matches_the_data(tmp_path):
    """A passing report shown beside data it did not validate must say so, not just 'passed'."""
    from reappreg.data.canonical import write_canonical
    from reappreg.data.ingest import ingest
    from reappreg.io import write_json
    from reappreg.settings import DataSettings, ValidateSettings
    from reappreg.data.validate import validate_folder

    data_settings = DataSettings(sample={"seed": 3, "reappraisals_per_vignette": 6, "gpt4_answers_per_vignette": 2,
                                         "opponent_answers_per_vignette": 1})
    rules = ValidateSettings()
    sources = sources_in(tmp_path)
    write_canonical(ingest(data_settings), sources.canonical)
    write_json(sources.validation, validate_folder(sources.canonical, rules, data_settings))

    def binding() -> str:
        section = next(s for s in collect(sources, tmp_path, validate_rules=rules) if s.title.startswith("Validation"))
        return next(b for b in section.blocks if isinstance(b, str) and b.startswith("Bound to the data"))

    assert binding().startswith("Bound to the data: yes")
    table = sources.canonical / "reappraisals.jsonl"
    table.write_text(table.read_text().replace("You", "Yuo", 1))
    assert "**NO**" in binding() and "reappraisals.jsonl" in binding()


# ------------------------------------------------------------------------ the summary


def _summary(sources: ReportSources, root: Path, **kwargs):
    sections = collect(sources, root, **kwargs)
    assert sections[0].title == "Summary"
    return sections, sections[0].blocks[0].lines


def _trust_policy():
    from reappreg.stats.trust import TrustPolicy

    return TrustPolicy(max_position_bias=0.2, max_unparseable_rate=0.05, min_agreement_floor=0.6, min_pairs_floor=16)


def test_every_number_in_the_summary_is_read_from_the_file_it_names(tmp_path):
    """Each fact is re-read from its file (or params), and the summary shows no number that is not a fact."""
    from reappreg.report.blocks import walk
    from reappreg.settings import Params
    from reappreg.settings.card import CardHealthSettings

    sources = plant(tmp_path)
    params = Params().model_dump(by_alias=True)
    _, lines = _summary(sources, tmp_path, health=CardHealthSettings(max_format_gate_hit_rate=0.2),
                        max_completion_length=48, trust_policy=_trust_policy(), settings_dump=params)
    facts = [f for line in lines for f in line.facts]
    assert len(facts) >= 30
    for fact in facts:
        if fact.source == "params.yaml":
            assert walk(params, fact.path) == fact.value, fact
            continue
        path = tmp_path / fact.source
        if fact.count:
            records = (read_jsonl(path) if path.suffix == ".jsonl" else walk(json.loads(path.read_text()), fact.path))
            assert len(records) == fact.value, fact
        else:
            assert walk(json.loads(path.read_text()), fact.path) == fact.value, fact
    for line in lines:
        shown = {fmt(f.value) for f in line.facts}
        cells = [str(c) for row in (line.table.rows if line.table else []) for c in row if c is not None]
        text = re.sub(r"`[^`]*`", "", " ".join([*line.sentences, *cells]))  # names in code spans (bt_seed_0, v1) are not numbers
        numbers = re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])", text)
        assert [n for n in numbers if n not in shown] == [], (line.title, text)
    by_title = {line.title: line for line in lines}
    assert by_title["Reward models vs length"].verdict == "1 of 2 beat length"   # bt's LOVO interval crosses 0
    assert by_title["Policy training"].verdict == "unhealthy"                     # the cards' gate: 0.247 > 0.2
    # what the policy was paid for, and what the RM's reward is, each read from its own file
    assert ("Reward: the residual part of the two-part RM, behind the format gate (length prior weight 0.000)."
            in by_title["Policy training"].sentences)
    assert ("`ensemble` as the GRPO reward: the residual part alone (mean - k * std over the length_residual members), "
            "behind the format gate." in by_title["Reward models vs length"].sentences)
    assert by_title["Registry aliases"].sentences[0] == "`champion` → reappraisal-policy-grpo v2."


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_summary_derives_its_verdicts_rather_than_copying_the_files_labels(tmp_path):
    sources = plant(tmp_path)
    calib = json.loads(sources.calibration.read_text())
    _json(sources.calibration, {**calib, "agreement_low": 0.5012, "trusted": True})  # the cache says trusted; the numbers do not
    _, lines = _summary(sources, tmp_path, trust_policy=_trust_policy())
    judge = next(line for line in lines if line.title == "Judge")
    assert judge.verdict == "NOT trusted" and judge.ok is False
    assert "agreement with people, lower bound 0.501, needs >= 0.650" in judge.sentences[-1]
    # The gate's own flag says pass; the RM line applies the test to the interval itself.
    ens = json.loads((sources.rm_metrics / "ensemble.json").read_text())
    ens["lovo"]["ranking"]["trivial_baselines"]["vs_rival"]["cluster_low"] = -0.0101
    _json(sources.rm_metrics / "ensemble.json", ens)
    rm = next(line for line in _summary(sources, tmp_path)[1] if line.title.startswith("Reward"))
    assert rm.verdict == "0 of 2 beat length"
    ensemble = next(row for row in rm.table.rows if row[0].startswith("`ensemble`"))
    assert ensemble[2:] == ["length_regression", "0.933", "0.651", "0.282 [-0.010, 0.372]", "0.735 (0.612; 0.500)",
                            "does NOT beat length (registry gate `beats_length_baseline`: pass)"]
    # ... and so does the reward part where length misleads, with the rival's interval above 0 again
    ens["lovo"]["ranking"]["trivial_baselines"]["vs_rival"]["cluster_low"] = 0.1919
    ens["beats_length_baseline"]["reward_longer_is_worse"]["low"] = 0.4871
    _json(sources.rm_metrics / "ensemble.json", ens)
    rm = next(line for line in _summary(sources, tmp_path)[1] if line.title.startswith("Reward"))
    ensemble = next(row for row in rm.table.rows if row[0].startswith("`ensemble`"))
    assert rm.verdict == "0 of 2 beat length" and ensemble[-2:] == ["0.735 (0.487; 0.500)", "does NOT beat length "
                                                                    "(registry gate `beats_length_baseline`: pass)"]


def test_every_summary_line_links_to_a_section_and_raw_dumps_are_folded_away(tmp_path):
    sections, lines = _summary(plant(tmp_path), tmp_path)
    page = render_html(sections, "r", "s")
    ids = set(re.findall(r'<section id="([^"]+)">', page))
    assert {line.anchor for line in lines} <= ids and len(lines) >= 9
    assert page.index('<table class="summary">') < page.index('<section id="data">')
    # A raw key/value dump is only ever inside a collapsed <details> block.
    folded = "".join(re.findall(r"<details>.*?</details>", page, flags=re.S))
    for raw in ("<td>counts.texts_checked</td>", "<td>length_only.pairwise_accuracy</td>", "<td>n_probes</td>",
                "<td>kappa_new_key</td>"):
        assert raw in folded and page.count(raw) == folded.count(raw), raw
    md = render_markdown(sections, "r", "s")
    assert all(f'<a id="{line.anchor}"></a>' in md for line in lines)


def test_the_report_refuses_to_write_a_page_that_carries_a_heldout_answer(tmp_path, monkeypatch, tracking_uri, capsys):
    from reappreg import cli

    sources = plant(tmp_path)
    samples = json.loads(sources.samples.read_text())
    samples["samples"][0]["answer"] = "Well. " + HELDOUT[1].upper().replace(" ", "  ")  # case and spacing do not hide it
    _json(sources.samples, samples)
    (tmp_path / "params.yaml").write_text("profile: cpu\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        cli.main(stage_argv("report"))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "reports/report.md would show held-out text: it overlaps g-v1-02" in err and "nothing was written" in err
    assert not (tmp_path / "reports/report.html").exists() and not (tmp_path / "reports/report.md").exists()


# ------------------------------------------------------------------ the results table, the RM figure


def _results_table(sections) -> Table:
    section = next(s for s in sections if s.title == RESULTS_TITLE)
    return next(b for b in section.blocks if isinstance(b, Table))


def test_the_report_leads_with_the_results_table_across_models(tmp_path):
    """Right after the summary, before every stage's section: one row per row of metrics/results.json,
    its values as the file has them (both interval kinds, the length-controlled win-rate, the mean
    length, the judge's trust and the row's flags); a value the file lacks is a dash, never a number."""
    sources = plant(tmp_path)
    sections = collect(sources, tmp_path)
    assert [s.title for s in sections[:2]] == ["Summary", RESULTS_TITLE]
    md = render_markdown(sections, "report", "subtitle")
    assert re.findall(r"^## (.+)$", md, flags=re.M)[:3] == ["Summary", RESULTS_TITLE, "Data"]
    page = render_html(sections, "report", "subtitle")
    assert re.findall(r'<section id="([^"]+)">', page)[:2] == ["summary", "results"]

    table = _results_table(sections)
    col = {name: i for i, name in enumerate(table.columns)}
    iid = next(c for c in table.columns if c.startswith("iid Wilson"))
    cluster = next(c for c in table.columns if c.startswith("vignette-cluster"))
    lc_interval = next(c for c in table.columns if c.startswith("length-controlled") and "interval" in c)
    rows = RESULTS["rows"]
    assert len(table.rows) == len(rows)

    def interval(low, high):
        return None if low is None or high is None else f"[{fmt(low)}, {fmt(high)}]"

    for shown, row in zip(table.rows, rows):
        assert shown[col["condition"]] == row["condition"] and shown[col["opponent"]] == row["opponent"]
        assert shown[col["contests"]] == row["n"]
        assert shown[col["win-rate vs opponent"]] == row["win_rate"]
        assert shown[col[iid]] == interval(row["iid_screening_low"], row["iid_screening_high"])
        assert shown[col[cluster]] == interval(row["cluster_low"], row["cluster_high"])
        assert shown[col["length-controlled win-rate"]] == row["lc_win_rate"]
        assert shown[col[lc_interval]] == interval(row["lc_low"], row["lc_high"])
        length = row.get("mean_length")
        assert shown[col["mean length (characters)"]] == (None if length is None else fmt(length, 1))
        if row["status"] == "evaluated":
            assert shown[col["judge trusted"]] is RESULTS["judge"]["trusted"]
            assert shown[col["flags"]] == (", ".join(row["flags"]) or "none")
    # Both interval kinds are there for every evaluated row, the bar's and its opponent's named in the headers.
    evaluated = [r for r, row in zip(table.rows, rows) if row["status"] == "evaluated"]
    assert all(r[col[iid]] and r[col[cluster]] for r in evaluated)
    assert "iid Wilson 95% interval (screening only)" in md and "vignette-cluster 95% interval (claims use it)" in md
    # Missing values: an explicit dash, no invented number.
    line = next(x for x in md.splitlines() if x.startswith("| sft |"))
    assert line == ("| sft | model | gpt-4-0314 | — | — | — | — | — | — | — | — | — | "
                    "not run: no judgments for condition 'sft' |")
    human = next(x for x in md.splitlines() if x.startswith("| human-reference |"))
    assert human.split(" | ")[col["mean length (characters)"]] == "—"
    assert ("| policy | policy | gpt-4-0314 | 40 | 0.693 | [0.540, 0.813] | [0.472, 0.857] | 0.624 | [0.502, 0.736] | "
            "412.5 | no (claim not_confirmed) | yes | below_min_n |") in md
    assert "| ood-coping | ood | coping-human | 24 | 0.538 |" in md and "n/a (off-distribution)" in md


def test_a_missing_results_table_is_named_with_its_stage(tmp_path):
    sources = plant(tmp_path)
    sources.results.unlink()
    sections = collect(sources, tmp_path)
    assert sections[1].title == RESULTS_TITLE and not sections[1].blocks
    assert sections[1].missing == ["`metrics/results.json`: not found (written by `dvc repro results`)"]


def test_the_rm_figure_is_the_comparison_with_the_length_baselines(tmp_path):
    """The reward-model section embeds plots/rm/comparison.png (every RM beside the trivial rankers, as
    `rm compare` drew it), not a figure of its own; without the file it names the file and its stage."""
    sources = plant(tmp_path)
    sections = collect(sources, tmp_path)
    rm = next(s for s in sections if s.title.startswith("Reward models"))
    figures = [b for b in rm.blocks if isinstance(b, Figure)]
    assert len(figures) == 1 and figures[0].title == RM_COMPARISON_TITLE
    assert figures[0].png == sources.rm_comparison.read_bytes()
    page = render_html(sections, "report", "subtitle")
    assert base64.b64encode(sources.rm_comparison.read_bytes()).decode("ascii") in page
    sources.rm_comparison.unlink()
    rm = next(s for s in collect(sources, tmp_path) if s.title.startswith("Reward models"))
    assert not [b for b in rm.blocks if isinstance(b, Figure)]
    assert "`plots/rm/comparison.png`: not found (written by `dvc repro rm_compare`)" in rm.missing


def test_the_rm_summary_row_states_one_kind_of_number_per_column(tmp_path):
    """Each column of the summary's reward-model table is one kind of number, its header saying which:
    the difference column is the difference of the two accuracies shown beside it (the same split, the
    same pairs), never a leave-one-vignette-out difference beside held-out accuracies."""
    sources = plant(tmp_path)
    _, lines = _summary(sources, tmp_path)
    rm = next(line for line in lines if line.title == "Reward models vs length")
    columns = rm.table.columns
    model, rival = columns.index("LOVO accuracy: model"), columns.index("LOVO accuracy: rival")
    diff = columns.index("LOVO difference, model − rival [vignette-cluster 95% CI]")
    assert diff == rival + 1 == model + 2 and "held-out accuracy" in columns
    assert len(rm.table.rows) == 2
    for row in rm.table.rows:
        shown = float(row[diff].split(" ")[0])
        assert abs(shown - (float(row[model]) - float(row[rival]))) <= 0.0015 + 1e-9, row  # three roundings to 0.001
    # ... and the numbers behind them, as read from the files.
    for stem in ("bt_seed_0", "ensemble"):
        facts = {f.path: f.value for f in rm.facts if f.source == f"metrics/rm/{stem}.json"}
        inner = ("ranking",) if stem == "ensemble" else ()
        acc = facts[("lovo", *inner, "pairwise_accuracy")]
        rival_acc = facts[("lovo", *inner, "trivial_baselines", "vs_rival", "rival_accuracy")]
        difference = facts[("lovo", *inner, "trivial_baselines", "vs_rival", "difference")]
        assert difference == pytest.approx(acc - rival_acc, abs=1e-9)
    md = render_markdown(collect(sources, tmp_path), "report", "subtitle")
    assert ("| `bt_seed_0` | 0.812 | length_regression | 0.789 | 0.651 | 0.138 [-0.031, 0.291] | — | "
            "does NOT beat length |") in md
    html_page = render_html(collect(sources, tmp_path), "report", "subtitle")
    summary_html = html_page.split('<table class="summary">', 1)[1].split("</tbody></table></td>", 1)[0]
    assert "<th>LOVO difference, model − rival [vignette-cluster 95% CI]</th>" in summary_html
