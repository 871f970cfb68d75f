"""Model cards: every number traceable to a tracked file; the claims linter refuses what the data do not support.

``write_pipeline`` builds a tiny repository-shaped folder with every file the card and
registry stages read (eval metrics and claims come from the real ``reappreg.stats``
on synthetic judgments); tests/registry/test_registry.py reuses it.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from reappreg import stats
from reappreg.card.build import (
    CardBuild,
    ClaimRejected,
    card_inputs_for,
    check_template,
    lint_claims,
    load_evidence,
    numbers_in,
    parse_card,
    render_card,
)
from reappreg.errors import InputError
from reappreg.evidence.declarations import load_declarations
from reappreg.evidence.formatting import fmt
from reappreg.hashing import dvc_md5
from reappreg.io import read_json, write_json
from reappreg.settings import load_params
from reappreg.stats.claims import BLOCKING_FLAGS

from card_fixtures import (
    TRAINING_RUN,
    write_pipeline,
)
from stage_commands import stage_argv

REPO = Path(__file__).resolve().parents[2]
def evidence_of(root: Path):
    return load_evidence(certificate=root / "data/guard/certificate.json", eval_metrics=root / "metrics/eval.json",
                         calibration=root / "metrics/judge_calibration.json", claims=root / "reports/claims.json",
                         rm_metrics=root / "metrics/rm", policy_metrics=root / "metrics/policy",
                         prompt=root / "pipelines/prompts/grpo_prompt.yaml")


def build_card(root: Path, name: str, evidence=None) -> str:
    params = load_params(root / "params.yaml")
    decl = load_declarations(root / "registry/models.yaml")
    evidence = evidence or evidence_of(root)
    revision = {"commit": "0f3c9e2ab41d5e6f7a8b9c0d1e2f3a4b5c6d7e8f", "dirty": "false", "dirty_paths": []}
    inputs = card_inputs_for(params, CardBuild(decl=decl, evidence=evidence, revision=revision, root=root), name)
    template = root / "registry/card_template.md"
    return render_card(template.read_text(encoding="utf-8"), str(template), inputs, evidence)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    return write_pipeline(tmp_path_factory.mktemp("pipeline"))


# --------------------------------------------------------------------------- number provenance


# The tracked files a card may take numbers from.
SOURCES = ("metrics", "reports/claims.json", "data/guard/certificate.json", "params.yaml", "registry/models.yaml",
           "pipelines/prompts/grpo_prompt.yaml")


def source_numbers(paths: list[Path]) -> list[float]:
    """Every number written in the source files: parsed JSON/YAML values and numbers inside their strings."""
    values: list[float] = []

    def walk(node):
        if isinstance(node, bool):
            return
        if isinstance(node, (int, float)):
            values.append(float(node))
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for path in paths:
        for file in ([path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())):
            text = file.read_text(encoding="utf-8")
            walk(json.loads(text) if file.suffix == ".json" else yaml.safe_load(text))
            values.extend(float(n) for n in numbers_in(text))
    return values


def traceable(printed: str, sources: list[float]) -> bool:
    """A printed number is traceable if some source value rounds to it at its printed precision."""
    value = float(printed)
    decimals = len(printed.split(".")[1]) if "." in printed and "e" not in printed.lower() else 0
    tolerance = 0.5 * 10 ** (-decimals) + 1e-12 if "e" not in printed.lower() else abs(value) * 1e-3
    return any(math.isclose(value, s, abs_tol=tolerance) for s in sources)


@pytest.mark.parametrize("name", ["reappraisal-policy-grpo", "reappraisal-rm-ensemble"])
def test_card_contains_no_number_absent_from_the_tracked_files(pipeline, name):
    card = build_card(pipeline, name)
    sources = source_numbers([pipeline / p for p in SOURCES])
    printed = numbers_in(card)
    assert len(printed) > 20  # the card really carries the evaluation, metrics and hyperparameters
    untraceable = [n for n in printed if not traceable(n, sources)]
    assert untraceable == []


def test_number_check_catches_a_hand_typed_number(pipeline):
    card = build_card(pipeline, "reappraisal-policy-grpo") + "\nThe policy wins 73.9% of the time.\n"
    sources = source_numbers([pipeline / p for p in SOURCES])
    assert [n for n in numbers_in(card) if not traceable(n, sources)] == ["73.9"]


def test_policy_card_front_matter_and_sections(pipeline):
    card = build_card(pipeline, "reappraisal-policy-grpo")
    meta, body = parse_card(card)
    # No `datasets`: it names hub datasets, and the training data are local files (paths and md5s in the body).
    assert set(meta) == {"license", "language", "base_model", "pipeline_tag", "tags", "library_name", "model_name",
                         "model-index", "reappreg"}
    assert meta["model_name"] == "reappraisal-policy-grpo"
    params = load_params(pipeline / "params.yaml")
    assert meta["base_model"] == params.policy.base.model_name
    assert meta["pipeline_tag"] == "text-generation"
    for section in ("## Model details", "## Evaluation", "## Prompting", "## Hyperparameters", "## Data separation",
                    "## Intended use", "## Limitations", "## Reproduce"):
        assert section in body
    metrics = json.loads((pipeline / "metrics/eval.json").read_text())
    row = next(line for line in body.splitlines() if line.startswith("| policy | gpt-4-0314 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:8] == [fmt(metrics[f"policy/gpt-4-0314/{k}"]) for k in ("win_rate", "n", "iid_low", "cluster_low", "n_eff", "n_clusters")]
    assert "trusted by its calibration" in body
    certificate = json.loads((pipeline / "data/guard/certificate.json").read_text())
    prompts = next(e for e in certificate["training"] if e["guarded_path"] == "data/guarded/prompts.jsonl")
    assert f"| `data/prompts/grpo.jsonl` | `{prompts['md5']}` | `data/guarded/prompts.jsonl` | `{prompts['guarded_md5']}` |" in body
    assert f"Held-out set `data/heldout/answers.jsonl` (md5 `{certificate['heldout']['md5']}`)" in body
    assert "Guard certificate `data/guard/certificate.json`" in body and "**pass**" in body
    # The revision is named by the policy's bytes (its md5 in dvc.lock), not by the commit the card was built at.
    policy_md5 = read_json(pipeline / "metrics/policy/train.json")["model_md5"]
    assert f"git checkout $(git log --reverse --format=%H -S {policy_md5} -- dvc.lock | head -n 1)" in body
    assert "git checkout 0f3c9e2ab41d5e6f7a8b9c0d1e2f3a4b5c6d7e8f\n" not in body and "dvc repro register" in body
    assert "Built at commit `0f3c9e2ab41d5e6f7a8b9c0d1e2f3a4b5c6d7e8f` (no uncommitted changes" in body
    # The system prompt is printed from the prompt file, not retyped.
    prompt = yaml.safe_load((pipeline / "pipelines/prompts/grpo_prompt.yaml").read_text())
    assert prompt["system"] in body
    # Hyperparameters come from params: the KL coefficient and the ensemble penalty.
    assert re.search(rf"\| `policy.train` \|.* beta {re.escape(fmt(params.policy.train.beta))};", body)
    assert re.search(rf"\| `rm.ensemble` \|.* k {re.escape(fmt(params.rm.ensemble.k))};", body)


def test_supported_claims_are_printed_and_unsupported_ones_explained(pipeline):
    claims = json.loads((pipeline / "reports/claims.json").read_text())
    body = parse_card(build_card(pipeline, "reappraisal-policy-grpo"))[1]
    supported = [c for c in claims if c["supported"]]
    assert supported, "the strong synthetic policy should confirm at least one claim"
    for claim in claims:
        if claim["supported"]:
            assert f"- {claim['statement']}" in body
        else:
            assert f"`{claim['claim_id']}` ({claim['status']}): {claim['reason']}" in body


def test_every_claims_looks_are_printed_on_the_card(tmp_path):
    """A claim's looks (earlier evaluations of this policy against this bar, and what each used) are printed
    under it, not only in claims.json: a supported claim drawn after earlier looks says so beside its
    statement, and every claim, supported or not, prints what its looks were keyed by."""
    from reappreg.stats.looks import LookKey, stamp_claims

    root = write_pipeline(tmp_path / "p")
    path = root / "reports/claims.json"
    claims = json.loads(path.read_text())
    policy = "md5:" + "c" * 32 + ".dir"
    keys = {c["claim_id"]: LookKey(policy, c["opponent"], c["threshold"]) for c in claims}
    first = next(c for c in claims if c["supported"])
    earlier = [{"run_id": f"r{i}", "design": {"evals": evals, "samples_per_vignette": 2, "best_of_n": 1, "seed": 1234,
                                              "n_vignettes": vignettes, "contests": 24 * vignettes}}
               for i, (evals, vignettes) in enumerate([(3, 6), (3, 4), (2, 6)])]
    design = {"evals": 2, "samples_per_vignette": 2, "best_of_n": 1, "seed": 99, "n_vignettes": 6, "contests": 96}
    stamp_claims(claims, inputs={}, keys=keys, earlier={keys[first["claim_id"]].digest: earlier}, design=design,
                 decision_settings={})
    path.write_text(json.dumps(claims))
    lines = parse_card(build_card(root, "reappraisal-policy-grpo"))[1].splitlines()
    at = lines.index(f"- {first['statement']} **Drawn after 3 earlier evaluation(s) of this policy against this "
                     "bar**: its interval certifies one look, not the search.")
    assert lines[at + 1] == (
        f"  - Looks: look 4 at this policy against this bar (keyed by policy model {policy}, opponent "
        f"{first['opponent']}, threshold {first['threshold']:.3f}; any vignettes, evals, samples or seeds); this one: "
        "2 eval(s) x 2 sample(s), seed 99, 6 vignette(s), 96 contests; earlier: 3 eval(s) x 2 sample(s), seed 1234, "
        "6 vignette(s), 144 contests; 3 eval(s) x 2 sample(s), seed 1234, 4 vignette(s), 96 contests; 2 eval(s) x "
        "2 sample(s), seed 1234, 6 vignette(s), 144 contests.")
    for claim in claims:   # a first look prints the statement alone, and its looks line under it
        if claim is first:
            continue
        head = f"- {claim['statement']}" if claim["supported"] else f"- `{claim['claim_id']}` ({claim['status']}): {claim['reason']}"
        at = lines.index(head)
        assert lines[at + 1].startswith("  - Looks: look 1 at this policy against this bar (keyed by policy model ")


def test_rm_card_shows_rm_metrics_not_policy_eval(pipeline):
    meta, body = parse_card(build_card(pipeline, "reappraisal-rm-ensemble"))
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"  # via known_models
    assert ("| Pairwise accuracy (held-out, ranking model) | 0.673 | `ensemble.holdout.ranking.pairwise_accuracy` |"
            in body)
    assert ("| Pairwise accuracy (held-out, residual part: the GRPO reward) | 0.601 | "
            "`ensemble.holdout.residual.pairwise_accuracy` |") in body
    assert "| Pairwise accuracy (held-out, seed 2) | 0.660 | `ensemble.holdout.members.seed_2.pairwise_accuracy` |" in body
    assert "| Pairwise accuracy (held-out, mean of the seeds) | 0.669 |" in body
    assert "per_vignette" not in body and "length_residual_seed_0" not in body  # not among the declared card_metrics
    # The gate's rival is named and both figures are shown, read from the metrics file, not retyped.
    gate = "gate beats_length_baseline, leave-one-vignette-out"
    assert f"| Strongest trivial rival ({gate}) | length_regression | `ensemble.beats_length_baseline.rival` |" in body
    assert (f"| Pairwise accuracy minus the strongest rival's ({gate}) | 0.038 | "
            "`ensemble.beats_length_baseline.difference` |") in body
    assert (f"| Vignette-cluster 95% CI lower bound ({gate}) | 0.012 | `ensemble.beats_length_baseline.cluster_low` |"
            in body)
    assert (f"| Accuracy ({gate}, reward part, pairs where the longer text is worse) | 0.751 | "
            "`ensemble.beats_length_baseline.reward_longer_is_worse.accuracy` |") in body
    assert "| Weight of the residual part beside the length prior (two-part recipe) | 0.812 |" in body
    assert ("| Reward (recipe) | the residual part alone (mean - k * std over the length_residual members), behind the "
            "format gate | `ensemble.recipe.reward` |") in body
    assert "passes: guard_pass, beats_length_baseline." in body
    # A wildcard never pulls text into the card: only the keys named exactly.
    assert "`ensemble.beats_length_baseline.rule`" not in body
    assert "| policy | gpt-4-0314 |" not in body
    # Sections only for evidence this model has: no judge, prompt or policy training here.
    for absent in ("judge", "Judge", "## Prompting", "## Training health", "win-rate"):
        assert absent not in body, absent


def test_untrusted_judge_card_says_so_and_supports_nothing(tmp_path):
    root = write_pipeline(tmp_path / "p", trusted=False)
    body = parse_card(build_card(root, "reappraisal-policy-grpo"))[1]
    assert "NOT TRUSTED by its calibration" in body
    assert "**Supported claims**" in body and body.split("**Supported claims**")[1].split("**Claims not supported")[0].strip().endswith("- none")


# --------------------------------------------------------------------------- linter


def _lint(evidence, claims):
    return lint_claims(claims, evidence.eval_metrics, evidence.calibration, min_n_confirm=240)


def test_linter_accepts_the_stats_modules_own_claims(pipeline):
    evidence = evidence_of(pipeline)
    assert _lint(evidence, evidence.claims) == []


def test_linter_refuses_above_bar_from_an_iid_bound(pipeline):
    evidence = evidence_of(pipeline)
    metrics = dict(evidence.eval_metrics)
    claim = copy.deepcopy(evidence.bar_claim("policy"))
    # The cluster bound does not clear the bar; only the iid (Wilson) one does.
    metrics["policy/gpt-4-0314/cluster_low"] = claim["threshold"] - 0.05
    metrics["policy/gpt-4-0314/iid_low"] = claim["threshold"] + 0.05
    claim.update(supported=True, status="confirmed", blocking_flags=[])
    claim["flags"] = [f for f in claim["flags"] if f not in BLOCKING_FLAGS]  # the iid bound is the only fault
    claim["evidence"]["cluster_low"] = metrics["policy/gpt-4-0314/cluster_low"]
    problems = lint_claims([claim], metrics, evidence.calibration, min_n_confirm=240)
    assert [p.rule for p in problems] == ["above the bar only by an iid bound"]


def test_linter_refuses_a_win_with_n_below_the_confirmation_rule(pipeline):
    evidence = evidence_of(pipeline)
    claim = next(c for c in evidence.claims if c["supported"])
    n = evidence.eval_metrics[f"{claim['condition']}/{claim['opponent']}/n"]
    problems = lint_claims([claim], evidence.eval_metrics, evidence.calibration, min_n_confirm=n + 1)
    assert [p.rule for p in problems] == ["win with n below the confirmation rule"]


def test_linter_refuses_an_untrusted_judge_presented_as_trusted(pipeline):
    evidence = evidence_of(pipeline)
    claim = next(c for c in evidence.claims if c["supported"])
    untrusted = {**evidence.calibration, "trusted": False}
    rules = {p.rule for p in lint_claims([claim], evidence.eval_metrics, untrusted, min_n_confirm=240)}
    assert "untrusted judge presented as trusted" in rules


def test_linter_refuses_a_supported_bar_claim_judged_by_another_judge(pipeline):
    """Whoever edits claims.json to drop the `judge_mismatch` flag still has to make three identities agree:
    the judge pinned beside the bar, the claim's judge fingerprint and the calibration's judge. A judge is
    its identity: renaming it changes nothing the linter matches on except the claim-calibration pairing."""
    evidence = evidence_of(pipeline)
    bar = evidence.bar_claim("policy")
    assert bar["supported"] and _lint(evidence, [bar]) == []
    other_weights = "md5:00000000000000000000000000000000.dir"
    for edit in ({"judge_fingerprint": other_weights},
                 {"judge_fingerprint": "served:Llama-3.1-70B-Instruct:vllm:0123456789abcdef"},
                 {"judge_model": "SmolLM2-135M-Instruct"},
                 {"reference_bar": {**bar["reference_bar"], "judge_identity": None}},
                 {"reference_bar": {**bar["reference_bar"], "judge_identity": {"weights_md5": other_weights}}}):
        problems = _lint(evidence, [{**copy.deepcopy(bar), **edit}])
        assert [p.rule for p in problems] == ["bar claim under another judge"], (edit, problems)
    other = {**evidence.calibration, "judge_fingerprint": other_weights}
    assert "bar claim under another judge" in {p.rule for p in lint_claims([bar], evidence.eval_metrics, other,
                                                                          min_n_confirm=240)}


def test_linter_refuses_claims_that_disagree_with_eval_json(pipeline):
    evidence = evidence_of(pipeline)
    claim = copy.deepcopy(next(c for c in evidence.claims if c["supported"]))
    claim["evidence"]["win_rate"] = 0.99
    assert [p.rule for p in _lint(evidence, [claim])] == ["disagrees with eval.json"]


def test_card_build_refuses_when_a_supported_claim_is_not_backed(tmp_path):
    root = write_pipeline(tmp_path / "weak", win_prob=0.55)
    claims = json.loads((root / "reports/claims.json").read_text())
    bar = next(c for c in claims if c["claim_id"] == "bar/policy/gpt-4-0314")
    assert not bar["supported"]
    bar.update(supported=True, status="confirmed")  # someone edits the claims by hand
    write_json(root / "reports/claims.json", claims)
    with pytest.raises(ClaimRejected, match="bar/policy/gpt-4-0314: cluster lower bound not above threshold"):
        build_card(root, "reappraisal-policy-grpo")


def test_template_with_a_literal_number_is_refused():
    check_template("{{ value | num }} of {{ total }}", "ok")
    with pytest.raises(InputError, match="line 2 has a literal number"):
        check_template("# Card\nWin-rate 61% against {{ opponent }}\n", "template.md")
    # The shipped template passes its own rule.
    check_template((REPO / "registry/card_template.md").read_text(encoding="utf-8"), "card_template.md")


def test_cli_card_build_and_lint(pipeline, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from reappreg.cli import app

    monkeypatch.chdir(pipeline)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    runner = CliRunner()
    result = runner.invoke(app, stage_argv("card", out_dir=tmp_path / "cards"))
    assert result.exit_code == 0, result.output
    built = sorted(p.name for p in (tmp_path / "cards").iterdir())
    assert built == ["reappraisal-policy-grpo.md", "reappraisal-policy-grpo.step-3.md", "reappraisal-rm-ensemble.md"]
    assert parse_card((tmp_path / "cards/reappraisal-policy-grpo.md").read_text())[0]["library_name"] == "transformers"
    assert runner.invoke(app, ["card", "lint"]).exit_code == 0
    claims = json.loads((pipeline / "reports/claims.json").read_text())
    forged = copy.deepcopy(claims)
    forged[0]["judge_trusted"] = True
    forged[0]["supported"] = True
    forged[0]["flags"] = ["below_min_n"]
    write_json(tmp_path / "forged.json", forged)
    result = runner.invoke(app, ["card", "lint", "--claims", str(tmp_path / "forged.json")])
    assert result.exit_code == 1 and "blocking flags" in result.output


def test_each_kept_checkpoint_gets_a_card_linking_to_its_own_results_row(pipeline, tmp_path, monkeypatch):
    from huggingface_hub import ModelCard
    from typer.testing import CliRunner

    from reappreg.cli import app

    monkeypatch.chdir(pipeline)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(app, stage_argv("card", out_dir=tmp_path / "cards"))
    assert result.exit_code == 0, result.output
    text = (tmp_path / "cards/reappraisal-policy-grpo.step-3.md").read_text()
    meta, body = parse_card(text)
    assert meta["reappreg"]["checkpoint"] == {
        "step": 3, "final_step": 6, "folder": "models/policy/checkpoints/step_3", "training_run_id": TRAINING_RUN,
        "model_md5": dvc_md5(pipeline / "models/policy/checkpoints/step_3"), "condition": "policy-step-3"}
    assert meta["reappreg"]["results_rows"] == ["policy-step-3/gpt-4-0314"]
    assert "| Results row | `policy-step-3/gpt-4-0314` in `metrics/results.json`" in body
    assert f"kept checkpoint at step 3 of 6 of training run `{TRAINING_RUN}`" in body
    # Its evaluation table and model-index are its own row's numbers, never the final model's.
    assert "| policy-step-3 | gpt-4-0314 | 0.583 | 288 | 0.526 | 0.442 | 37.250 | 6 |" in body
    assert "| policy | gpt-4-0314 |" not in body
    index = [(r.dataset_config, r.metric_type, r.metric_value) for r in ModelCard(text).data.eval_results]
    assert index == [("policy-step-3", "win_rate", 0.5833)]
    assert "vignette-cluster 95% CI 0.442 to 0.709; n 288" in ModelCard(text).data.eval_results[0].metric_name
    final_meta, final_body = parse_card((tmp_path / "cards/reappraisal-policy-grpo.md").read_text())
    assert final_meta["reappreg"]["results_rows"] == ["policy/gpt-4-0314"] and "checkpoint" not in final_meta["reappreg"]
    assert "| Results row | `policy/gpt-4-0314`" in final_body
    rm_meta, _ = parse_card((tmp_path / "cards/reappraisal-rm-ensemble.md").read_text())
    assert "results_rows" not in rm_meta["reappreg"]


def test_a_kept_checkpoint_the_training_metrics_do_not_describe_is_refused(pipeline):
    from reappreg.card.build import kept_checkpoints

    decl = load_declarations(pipeline / "registry/models.yaml")
    evidence = evidence_of(pipeline)
    policy = decl.models["reappraisal-policy-grpo"]
    assert [c["step"] for c in kept_checkpoints(policy, evidence, [3])] == [3]
    with pytest.raises(InputError, match=r"no kept checkpoint at step 6.*rerun `reappreg policy train`"):
        kept_checkpoints(policy, evidence, [3, 6])
    assert kept_checkpoints(decl.models["reappraisal-rm-ensemble"], evidence, [3]) == []


def test_numbers_in_ignores_hashes_and_model_names():
    text = "SmolLM2-135M md5 `3f2a9c0e1b` v2 Qwen3-4B n = 240, win-rate 0.612; 1.0e-05 and -1.5."
    assert numbers_in(text) == ["240", "0.612", "1.0e-05", "-1.5"]


# --------------------------------------------------------------------------- Hugging Face metadata, health, revision


@pytest.mark.parametrize("name", ["reappraisal-policy-grpo", "reappraisal-rm-ensemble"])
def test_card_parses_as_a_hugging_face_model_card_with_model_index(pipeline, name):
    from huggingface_hub import ModelCard, ModelCardData

    text = build_card(pipeline, name)
    card = ModelCard(text, ignore_metadata_errors=False)
    assert card.data.model_name == name
    results = card.data.eval_results
    assert results, "model-index has eval results"
    # The same metadata round-trips through ModelCardData, model-index included.
    again = ModelCardData(**card.data.to_dict())
    assert [(r.metric_type, r.metric_value) for r in again.eval_results] == [(r.metric_type, r.metric_value) for r in results]
    if name == "reappraisal-policy-grpo":
        metrics = json.loads((pipeline / "metrics/eval.json").read_text())
        for r in results:
            opponent = r.dataset_name.split(" by ", 1)[1].split(" (", 1)[0]
            assert r.metric_value == metrics[f"{r.dataset_config}/{opponent}/{r.metric_type}"]
        assert {r.metric_type for r in results} == {"win_rate"}
    else:
        flat = {k: v for k, v in inputs_of(pipeline, name).metrics}
        assert {r.metric_value for r in results} <= set(flat.values())
        assert all(r.dataset_split in ("holdout", "leave-one-vignette-out") for r in results)
        assert "Ensemble penalty" not in str([r.metric_name for r in results])  # a setting is not an eval result


# Metric types a hub reader knows (Hugging Face `evaluate` ids and the pairwise judge's win-rate).
HUB_TYPES = {"accuracy", "spearmanr", "win_rate"}


def model_index(text: str) -> list:
    from huggingface_hub import ModelCard

    return ModelCard(text, ignore_metadata_errors=False).data.eval_results


def test_rm_model_index_leads_with_accuracy_beside_the_gates_rival_then_the_rating_correlation(pipeline):
    """A reader comparing reward models looks first at pairwise accuracy (beside its trivial baseline:
    the strongest rival the beats_length_baseline gate names, on the gate's pairs) and at the Spearman
    correlation with the human ratings; the seeds' disagreement-vs-error correlation is no such result."""
    ensemble = read_json(pipeline / "metrics/rm/ensemble.json")
    gate = ensemble["beats_length_baseline"]
    results = model_index(build_card(pipeline, "reappraisal-rm-ensemble"))
    lead = [(r.dataset_split, r.metric_type, r.metric_value) for r in results[:2]]
    assert lead == [("leave-one-vignette-out", "accuracy", gate["model_accuracy"]),
                    ("leave-one-vignette-out", "accuracy", gate["rival_accuracy"])]
    assert f"strongest trivial rival, {gate['rival']}" in results[1].metric_name
    correlations = [r for r in results if r.metric_type == "spearmanr"]
    assert (correlations[0].dataset_split, correlations[0].metric_value) == ("holdout", ensemble["holdout"]["ranking"]["spearman"])
    assert "with the human ratings" in correlations[0].metric_name
    # Right after it, the same model's held-out accuracy.
    after = results[results.index(correlations[0]) + 1]
    assert (after.metric_type, after.metric_value) == ("accuracy", ensemble["holdout"]["ranking"]["pairwise_accuracy"])
    disagreement = ensemble["holdout"]["disagreement_vs_error"]["spearman"]
    assert disagreement not in [r.metric_value for r in results]
    assert not any("disagreement" in (r.metric_name or "") for r in results)


def test_rm_model_index_leads_with_the_unseen_vignette_correlation_when_the_metrics_have_it(tmp_path):
    """With leave-one-vignette-out figures (as the ensemble stage writes them), the gate's split leads
    with accuracy, its rival and the rating correlation, all on unseen vignettes."""
    root = write_pipeline(tmp_path / "p")
    path = root / "metrics/rm/ensemble.json"
    ensemble = read_json(path)
    ensemble["lovo"] = {"ranking": {"pairwise_accuracy": 0.6655, "spearman": 0.3905, "spearman_within_vignette": 0.3512,
                                    "n": 120, "n_pairs": 412},
                        "disagreement_vs_error": {"spearman": 0.0417, "p_value": 0.6543}}
    write_json(path, ensemble)
    gate = ensemble["beats_length_baseline"]
    results = model_index(build_card(root, "reappraisal-rm-ensemble"))
    assert [(r.dataset_split, r.metric_type, r.metric_value) for r in results[:4]] == [
        ("leave-one-vignette-out", "accuracy", gate["model_accuracy"]),
        ("leave-one-vignette-out", "accuracy", gate["rival_accuracy"]),
        ("leave-one-vignette-out", "spearmanr", 0.3905),
        ("leave-one-vignette-out", "accuracy", 0.6655)]
    assert 0.0417 not in [r.metric_value for r in results]


def test_policy_model_index_leads_with_the_win_rate_against_the_bar_with_its_interval(pipeline):
    """A reader looks first at the win-rate against the reference bar's opponent (registry/models.yaml),
    its vignette-cluster interval beside it; the bounds and counts are not results of their own."""
    metrics = read_json(pipeline / "metrics/eval.json")
    reference = yaml.safe_load((pipeline / "registry/models.yaml").read_text())["reference_bar"]
    params = load_params(pipeline / "params.yaml")
    results = model_index(build_card(pipeline, "reappraisal-policy-grpo"))
    first = results[0]
    prefix = f"policy/{reference['opponent']}"
    assert (first.dataset_type, first.dataset_config, first.metric_type, first.metric_value) == (
        f"reappreg/heldout-answers/{reference['opponent']}", "policy", "win_rate", metrics[f"{prefix}/win_rate"])
    assert first.metric_name == (
        f"Win-rate vs {reference['opponent']}, the reference bar's opponent (bar {fmt(reference['bar'])}; policy; "
        f"vignette-cluster {params.stats.confidence * 100:g}% CI {fmt(metrics[f'{prefix}/cluster_low'])} to "
        f"{fmt(metrics[f'{prefix}/cluster_high'])}; n {fmt(metrics[f'{prefix}/n'])})")
    # Every other opponent after it, one win-rate each.
    assert [r.metric_type for r in results] == ["win_rate"] * len(results)
    assert len({r.dataset_type + (r.dataset_config or "") for r in results}) == len(results)


@pytest.mark.parametrize("name", ["reappraisal-policy-grpo", "reappraisal-rm-ensemble"])
def test_front_matter_names_no_local_path_and_only_hub_metric_types(pipeline, name):
    text = build_card(pipeline, name)
    meta, body = parse_card(text)
    assert "datasets" not in meta  # no hub dataset ids: local provenance is in the body
    hub = {k: v for k, v in meta.items() if k != "reappreg"}

    def strings(node):
        if isinstance(node, dict):
            for v in node.values():
                yield from strings(v)
        elif isinstance(node, list):
            for v in node:
                yield from strings(v)
        elif isinstance(node, str):
            yield node

    assert not [s for s in strings(hub) if re.search(r"(^|\s)(data|models|metrics)/|\.jsonl?\b", s)]
    assert {r.metric_type for r in model_index(text)} <= HUB_TYPES
    # The local provenance stays on the card, in the body.
    params_inputs = load_declarations(pipeline / "registry/models.yaml").models[name].training_inputs
    assert all(f"`{p}` (md5 `{dvc_md5(pipeline / p)}`)" in body for p in params_inputs)


def inputs_of(root: Path, name: str, **revision):
    params = load_params(root / "params.yaml")
    build = CardBuild(decl=load_declarations(root / "registry/models.yaml"), evidence=evidence_of(root), root=root,
                      revision={"commit": "abc123", "dirty": "false", "dirty_paths": [], **revision})
    return card_inputs_for(params, build, name)


def test_validate_card_refuses_broken_metadata():
    from reappreg.card.meta import validate_card

    validate_card("---\nlicense: mit\n---\n# ok\n", "ok")
    with pytest.raises(InputError, match="not a valid Hugging Face model card"):
        validate_card("---\nmodel-index:\n- results:\n  - task: {}\n---\n# x\n", "broken.md")


def test_card_body_drops_the_front_matter_and_starts_at_the_title(pipeline):
    from reappreg.card.build import card_body

    text = build_card(pipeline, "reappraisal-policy-grpo")
    body = card_body(text)
    assert body.startswith("# reappraisal-policy-grpo\n")
    assert "license:" not in body and "model-index" not in body and "---\n" not in body.split("\n## ")[0]
    with pytest.raises(InputError, match="no YAML front matter"):
        card_body("# no front matter\n")


def test_dirty_build_is_recorded_in_text_and_front_matter(pipeline):
    from reappreg.card.build import card_revision

    evidence = evidence_of(pipeline)
    template = pipeline / "registry/card_template.md"
    for allowed in (False, True):
        inputs = inputs_of(pipeline, "reappraisal-policy-grpo", dirty="true", dirty_paths=["src/reappreg/card/build.py"],
                           dirty_allowed=allowed)
        text = render_card(template.read_text(encoding="utf-8"), str(template), inputs, evidence)
        assert card_revision(text) == {"git_commit": "abc123", "git_dirty": "true", "dirty_paths": ["src/reappreg/card/build.py"],
                                       "dirty_allowed": allowed}
        body = parse_card(text)[1]
        assert ("Built at commit `abc123` **with uncommitted changes** to `src/reappreg/card/build.py` (built "
                f"{'with' if allowed else 'without'} `--allow-dirty`)") in body
    with pytest.raises(InputError, match="no reappreg.revision"):
        card_revision("---\nlicense: mit\n---\n# old card\n")


def test_source_revision_ignores_the_pipelines_own_outputs(tmp_path):
    import subprocess

    from reappreg.card.build import source_revision

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for rel in ("src/a.py", "metrics/eval.json", "dvc.lock", "reports/cards/x.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("v1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert source_revision(tmp_path) == {"commit": head, "dirty": "false", "dirty_paths": [], "experiment": None}
    for rel in ("metrics/eval.json", "dvc.lock", "reports/cards/x.md"):
        (tmp_path / rel).write_text("v2 from dvc repro\n")
    assert source_revision(tmp_path)["dirty"] == "false"
    (tmp_path / "src/a.py").write_text("edited\n")
    git("mv", "src/a.py", "src/b.py")
    assert source_revision(tmp_path) == {"commit": head, "dirty": "true", "dirty_paths": ["src/b.py"],
                                         "experiment": None}
    assert source_revision(tmp_path / "not-a-repo-child")["commit"] == "none"


def test_source_revision_under_dvc_exp_counts_only_non_params_changes(tmp_path, monkeypatch):
    """`dvc exp run -S ...` edits params.yaml for its experiment (restored by `dvc exp apply`):
    that edit is recorded by name, not reported as uncommitted source; a code edit still is."""
    import subprocess

    from reappreg.card.build import source_revision

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for rel in ("src/a.py", "params.yaml", "data/x/.gitignore"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("v1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    (tmp_path / "params.yaml").write_text("profile: rehearsal\n")
    (tmp_path / "data/x/.gitignore").write_text("v1\n/new-output\n")  # DVC's own entry
    assert source_revision(tmp_path)["dirty_paths"] == ["params.yaml"]  # outside an experiment: dirty
    monkeypatch.setenv("DVC_EXP_NAME", "exp-rehearsal")
    revision = source_revision(tmp_path)
    assert revision["dirty"] == "false" and revision["experiment"] == "exp-rehearsal"
    (tmp_path / "src/a.py").write_text("edited\n")
    assert source_revision(tmp_path)["dirty_paths"] == ["src/a.py"]


def _health(final: dict, *, healthy: bool = True, max_completion_length: int | None = 48, **thresholds):
    from reappreg.card.build import training_health
    from reappreg.settings.card import CardHealthSettings

    flat = {"train.healthy": healthy, **{f"train.final.health/{k}": v for k, v in final.items()}}
    return training_health(flat, CardHealthSettings(**thresholds), max_completion_length)


def test_training_health_is_unhealthy_when_most_completions_hit_the_format_gate():
    # The seeds' run: the monitor said healthy, 75% hit the format gate, every completion hit the limit.
    health = _health({"format_gate_hit_rate": 0.75, "completion_length": 48.0})
    assert health.verdict == "unhealthy"
    gate, truncation = health.gates
    assert (gate.value, gate.passed, gate.source) == (0.75, False, "train.final.health/format_gate_hit_rate")
    assert truncation.value == 1.0 and truncation.passed is False and "every completion was cut" in truncation.source


def test_training_health_thresholds_are_params_and_unknown_is_not_healthy():
    assert _health({"format_gate_hit_rate": 0.2, "truncation_rate": 0.1}).verdict == "healthy"
    assert _health({"format_gate_hit_rate": 0.2, "truncation_rate": 0.1}, max_truncation_rate=0.05).verdict == "unhealthy"
    assert _health({"format_gate_hit_rate": 0.3, "truncation_rate": 0.1}, max_format_gate_hit_rate=0.3).verdict == "healthy"
    # A mean length under the limit says nothing about the truncation rate: not checked, not healthy.
    unknown = _health({"format_gate_hit_rate": 0.2, "completion_length": 40.0})
    assert unknown.verdict == "not established" and unknown.gates[1].passed is None
    assert _health({"format_gate_hit_rate": 0.2, "truncation_rate": 0.0}, healthy=False).verdict == "unhealthy"
    assert _health({}).verdict == "not established"


def test_policy_card_prints_the_health_gates(tmp_path):
    root = write_pipeline(tmp_path / "p")
    metrics = read_json(root / "metrics/policy/train.json")
    metrics["final"].update({"health/format_gate_hit_rate": 0.75, "health/completion_length": 48.0})
    write_json(root / "metrics/policy/train.json", metrics)
    body = parse_card(build_card(root, "reappraisal-policy-grpo"))[1]
    params = load_params(root / "params.yaml")
    assert "| Training health | **UNHEALTHY** (see Training health) |" in body
    assert (f"| Format-gate hit rate | 0.750 | {fmt(params.card.health.max_format_gate_hit_rate)} | **FAIL** | "
            "train.final.health/format_gate_hit_rate |") in body
    assert f"| Truncation rate | 1.000 | {fmt(params.card.health.max_truncation_rate)} | **FAIL** |" in body
    assert "| Format-gate hit rate (last logged step) | 0.750 | `train.final.health/format_gate_hit_rate` |" in body


def test_metric_labels_are_readable():
    from reappreg.card.build import metric_label

    assert metric_label("ensemble.lovo.ranking.spearman_within_vignette") == \
        "Spearman correlation within vignettes (leave-one-vignette-out, ranking model)"
    assert metric_label("ensemble.beats_length_baseline.rival") == \
        "Strongest trivial rival (gate beats_length_baseline, leave-one-vignette-out)"
    assert metric_label("train.reward.length_prior_weight") == "Length prior weight in the reward"
    assert metric_label("train.final.health/kl") == "KL divergence to the base model (last logged step)"
    assert metric_label("train.global_step") == "Optimizer steps"
    assert metric_label("x.some_new_metric") == "Some new metric"


def test_reproduce_section_names_the_remote_access_each_step_needs():
    from reappreg.card.build import reproduce_commands

    lines = reproduce_commands("register", "abc123", "models/policy/grpo", "d41d8cd9.dir", "policy")
    assert lines[0].startswith("git checkout $(git log --reverse --format=%H -S d41d8cd9.dir -- dvc.lock | head -n 1)")
    assert "first commit whose dvc.lock records this model" in lines[0] and "built at abc123" in lines[0]
    assert "git checkout <name>@v<N>.0.0" in lines[1] and "models/policy/grpo" in lines[1]
    remotes = lines.index('# once per clone: point the remotes at the team\'s storage (README "Working as a team")')
    train_pull = next(i for i, line in enumerate(lines) if line.startswith("dvc pull -r train --allow-missing"))
    assert remotes < train_pull
    assert lines[train_pull + 1].startswith("dvc repro --single-item policy_train")
    assert "`heldout`" in lines[train_pull + 2] and lines[-2:] == ["dvc pull", "dvc repro register"]
    assert not any(line.startswith("dvc pull -r train")
                   for line in reproduce_commands("register", "abc123", "models/x", "d41d8cd9", None))


def test_an_experiments_reproduce_section_pulls_and_applies_it_on_its_baseline():
    from reappreg.card.build import reproduce_commands

    lines = reproduce_commands("register", "abc123", "models/policy/grpo", "d41d8cd9.dir", "policy", "exp-lr")
    commands = [line.split("#")[0].strip() for line in lines if not line.startswith("#")]
    assert commands[:3] == ["dvc exp pull --no-cache origin exp-lr", "git checkout abc123", "dvc exp apply exp-lr"]
    assert lines[0].startswith("# once per clone: point the remotes")


def test_the_reproduce_checkout_finds_the_commit_that_recorded_the_model(tmp_path):
    """Run the card's first line in a repository where the card was built one commit before
    the results: it checks out the commit whose dvc.lock first records the model's md5."""
    import subprocess

    from reappreg.card.build import reproduce_commands

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    md5 = "0123456789abcdef0123456789abcdef.dir"
    git("init", "-q")
    commits = []
    for lock in ("stages: {}\n", f"stages:\n  policy_train:\n    outs:\n    - path: models/policy/grpo\n      md5: {md5}\n",
                 f"stages:\n  policy_train:\n    outs:\n    - path: models/policy/grpo\n      md5: {md5}\n# later run\n"):
        (tmp_path / "dvc.lock").write_text(lock)
        git("add", "dvc.lock")
        git("commit", "-q", "-m", "run")
        commits.append(git("rev-parse", "HEAD"))
    checkout = reproduce_commands("register", commits[0], "models/policy/grpo", md5, "policy")[0]
    assert f"built at {commits[0]}" in checkout
    subprocess.run(["bash", "-c", checkout.split("#")[0]], cwd=tmp_path, check=True, capture_output=True)
    assert git("rev-parse", "HEAD") == commits[1]  # not the build commit, not a later one


def test_card_inputs_name_the_models_md5_in_the_reproduce_section(pipeline):
    policy = inputs_of(pipeline, "reappraisal-policy-grpo").revision["commands"][0]
    rm = inputs_of(pipeline, "reappraisal-rm-ensemble").revision["commands"][0]
    assert f"-S {read_json(pipeline / 'metrics/policy/train.json')['model_md5']} " in policy
    assert f"-S {dvc_md5(pipeline / 'models/rm/ensemble')} " in rm


def test_a_policy_card_without_its_md5_metric_is_refused(tmp_path):
    root = write_pipeline(tmp_path / "p")
    metrics = read_json(root / "metrics/policy/train.json")
    del metrics["model_md5"]
    write_json(root / "metrics/policy/train.json", metrics)
    with pytest.raises(InputError, match="training metrics have no 'train.model_md5'"):
        inputs_of(root, "reappraisal-policy-grpo")
