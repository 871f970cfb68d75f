"""The card tests' planted pipeline, shared with the browser test: a repository-shaped folder holding
every input of the card and register stages, its judgments drawn at a chosen win probability and its
guard run for real."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
from pathlib import Path

import yaml

from reappreg import stats
from reappreg.hashing import dvc_md5
from reappreg.io import read_json, write_json, write_jsonl
from reappreg.settings import load_params

REPO = Path(__file__).resolve().parents[1]
VIGNETTES = [f"v{i}" for i in range(1, 7)]
OPPONENTS = ["gpt-4-0314", "claude-3-opus"]
# The planted run is judged by the judge the reference bar was measured with (as the full profile
# is): only then can its bar claim be supported. The judge is its identity: the fixture's
# registry/models.yaml pins this fingerprint (local weights) beside the bar (write_pipeline).
JUDGE = stats.load_reference_bar(REPO / "registry/models.yaml").judge
JUDGE_FINGERPRINT = "md5:fedcba9876543210fedcba9876543210.dir"

# --------------------------------------------------------------------------- fixture builder


def synthetic_judgments(win_prob: float, *, generations: int = 10, answers: int = 4, seed: int = 0) -> list[dict]:
    """Judged orders for every vignette x generation x opponent answer x order."""
    rng = random.Random(seed)
    rows = []
    for vid in VIGNETTES:
        for g in range(generations):
            for opponent in OPPONENTS:
                for a in range(answers):
                    contest = f"{vid}-g{g}-{opponent}-a{a}"
                    for order in stats.ORDERS:
                        won = rng.random() < win_prob
                        policy_pos = "A" if order == "policy_first" else "B"
                        other = "B" if policy_pos == "A" else "A"
                        rows.append({
                            "contest_id": contest, "generation_id": f"{vid}-g{g}", "vignette_id": vid, "eval_k": 0,
                            "opponent_source": opponent, "opponent_answer_id": f"{opponent}-{vid}-{a}",
                            "order": order, "verdict": policy_pos if won else other,
                            "policy_score": 1.0 if won else 0.0, "judge_model": JUDGE, "selection": "none",
                            "p_a": None, "p_b": None, "p_tie": None, "verdict_method": "free_text",
                            "judge_fingerprint": JUDGE_FINGERPRINT, "sampling_seed": 1000 * VIGNETTES.index(vid) + g,
                            "policy_chars": 80, "opponent_chars": 80,
                        })
    return rows


HELDOUT = ["Perhaps the delay says more about their week than about how much they value you.",
           "You could treat this as a chance to tell them plainly what the evening meant to you."]


def guard(root: Path) -> None:
    """The real guard stage over the fixture's training text (as dvc.yaml runs it, from the root)."""
    from reappreg.guard import GuardPaths, SourceSpec, run_guard
    from reappreg.guard.run import HELDOUT_DEFAULTS
    from reappreg.settings.guard import SemanticSettings

    settings = load_params(root / "params.yaml").guard
    with contextlib.chdir(root):
        run_guard(heldout=SourceSpec.parse("data/heldout/answers.jsonl:answer_id:text", **HELDOUT_DEFAULTS),
                  train=[SourceSpec.parse("data/train/vignettes.jsonl:vignette_id:title,scenario"),
                         SourceSpec.parse("data/train/reappraisals.jsonl:reappraisal_id:text"),
                         SourceSpec.parse("prompts.jsonl=data/prompts/grpo.jsonl:prompt_id:prompt")],
                  settings=settings.model_copy(update={"policy": "block", "semantic": SemanticSettings(enabled=False)}),
                  paths=GuardPaths(guarded_dir="data/guarded", certificate_path="data/guard/certificate.json",
                                   quarantine_path="data/guard/quarantine.jsonl",
                                   sketch_path="data/guard/heldout_sketch.json", secret_dir="data/guard_secret",
                                   sketch_key_path="data/heldout/sketch.key"))


def leak_and_reguard(root: Path) -> None:
    """Copy a held-out answer into the training reappraisals and rerun the guard: it fails."""
    with open(root / "data/train/reappraisals.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"reappraisal_id": "leak", "vignette_id": "v1", "author_id": "b", "source": "human", "text": HELDOUT[0]}) + "\n")
    guard(root)


def write_pipeline(root: Path, *, win_prob: float = 0.9, trusted: bool = True, healthy: bool = True) -> Path:
    """A repository-shaped folder holding every input of the card and register stages."""
    root.mkdir(parents=True, exist_ok=True)
    # Effective params, dumped whole, so every hyperparameter on the card is in params.yaml.
    params = load_params(REPO / "params.yaml").model_dump(by_alias=True)
    params["stats"]["bootstrap_iterations"] = 200
    params["stats"]["lc_bootstrap_iterations"] = 50
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=True), encoding="utf-8")
    shutil.copytree(REPO / "registry", root / "registry", ignore=shutil.ignore_patterns("mlflow.db", "mlartifacts", "mlruns"))
    pin_test_judge(root / "registry/models.yaml")
    (root / "pipelines/prompts").mkdir(parents=True)
    shutil.copy(REPO / "pipelines/prompts/grpo_prompt.yaml", root / "pipelines/prompts/grpo_prompt.yaml")
    (root / "data/prompts").mkdir(parents=True)  # the copy the policy_prompts stage makes (what dvc.yaml passes)
    shutil.copy(REPO / "pipelines/prompts/grpo_prompt.yaml", root / "data/prompts/grpo_prompt.yaml")

    write_jsonl(root / "data/train/vignettes.jsonl", [{"vignette_id": v, "title": f"title {v}", "scenario": f"Your friend {v} forgot your birthday dinner.", "emotion": "anger"} for v in VIGNETTES])
    write_jsonl(root / "data/train/reappraisals.jsonl", [{"reappraisal_id": f"r{i}", "vignette_id": "v1", "author_id": "a", "source": "human", "text": f"Maybe they were overwhelmed at work, reason number {i}."} for i in range(3)])
    write_jsonl(root / "data/prompts/grpo.jsonl", [{"prompt_id": f"p{v}", "vignette_id": v, "prompt": f"Reappraise: your friend {v} forgot."} for v in VIGNETTES])
    write_jsonl(root / "data/train/ratings.jsonl", [{"rating_id": "x1", "reappraisal_id": "r0", "vignette_id": "v1", "rater_id": "q", "effectiveness": 5, "empathy": 4, "novelty": 3, "specificity": 6}])
    write_jsonl(root / "data/heldout/answers.jsonl", [{"answer_id": f"h{i}", "vignette_id": "v1", "source": "gpt-4-0314", "text": text} for i, text in enumerate(HELDOUT)])
    guard(root)
    for folder, files in {
        "models/rm/ensemble": {"ensemble.json": '{"seeds": [0, 1, 2]}', "head_seed0.safetensors": "w0", "head_seed1.safetensors": "w1"},
        "models/policy/base": {"config.json": '{"base": true}', "model.safetensors": "base-weights"},
        "models/policy/grpo": {"config.json": '{"grpo": true}', "model.safetensors": "policy-weights", "tokenizer/tokenizer.json": "{}"},
        # The kept step-3 checkpoint (params.yaml policy.train.checkpoint_steps).
        "models/policy/checkpoints/step_3": {"config.json": '{"grpo": true}', "model.safetensors": "step-3-weights"},
    }.items():
        for rel, text in files.items():
            (root / folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / folder / rel).write_text(text, encoding="utf-8")
    # Shapes of reappreg.rm.ensemble.evaluate_ensemble and reappreg.policy.train's outcome.
    scores = {"pairwise_accuracy": 0.6734, "n_pairs": 412, "spearman": 0.4121, "spearman_within_vignette": 0.3817,
              "n": 120, "per_vignette": {"v1": {"pairwise_accuracy": 0.61, "spearman": 0.29, "n": 20, "n_pairs": 30}}}
    write_json(root / "metrics/rm/ensemble.json", {
        "objective": "length_residual", "k": 0.5, "seeds": [0, 1, 2],
        "recipe": {"ranking": "length prior + weight x (mean - k * std over the length_residual members) + offset",
                   "reward": "the residual part alone (mean - k * std over the length_residual members), behind the "
                             "format gate", "pays_for_length": False},
        "two_part": {"enabled": True, "weight": 0.8125, "offset": -1.25, "shipped_fold": "final"},
        "holdout": {"ranking": {**scores, "calibration_error": 0.2113}, "residual": {**scores, "pairwise_accuracy": 0.6012},
                    "mean": {**scores, "pairwise_accuracy": 0.6691},
                    "members": {f"seed_{s}": {**scores, "pairwise_accuracy": 0.64 + s / 100} for s in range(3)},
                    "std_mean": 0.0871, "disagreement_vs_error": {"spearman": 0.1432, "p_value": 0.0311}},
        "beats_length_baseline": {"passed": True, "rival": "length_regression", "rival_accuracy": 0.6233,
                                  "model_accuracy": 0.6612, "difference": 0.0379, "cluster_low": 0.0121,
                                  "cluster_high": 0.0644, "n_pairs": 412, "n_vignettes": 6, "rule": "the gate's rule",
                                  "reward_longer_is_worse": {"part": "residual", "accuracy": 0.7512, "low": 0.6318,
                                                             "chance": 0.5}},
    })
    write_json(root / "metrics/rm/length_residual_seed_0.json", {"objective": "length_residual", "seed": 0,
                                                                 "holdout": scores})
    write_json(root / "metrics/policy/train.json", {
        "global_step": 6, "steps_run": 6, "healthy": healthy, "unhealthy_reason": None if healthy else "reward std collapsed",
        "final": {"health/reward_mean": 4.1875, "health/reward_std": 0.3125, "health/kl": 0.0214,
                  "healthy": 1.0 if healthy else 0.0},
        "model_md5": dvc_md5(root / "models/policy/grpo"),
        "training_run_id": TRAINING_RUN,
        "checkpoints": {"step_3": {"step": 3, "model_md5": dvc_md5(root / "models/policy/checkpoints/step_3")}},
    })

    settings = load_params(root / "params.yaml")
    calibration = {"judge_model": JUDGE, "judge_fingerprint": JUDGE_FINGERPRINT, "n_pairs": 40,
                   "agreement": 0.85 if trusted else 0.55, "agreement_low": 0.72 if trusted else 0.39,
                   "agreement_high": 0.93 if trusted else 0.70, "position_bias_A": 0.1, "position_bias_B": 0.05,
                   "order_consistency": 0.85, "unparseable_rate": 0.0125, "min_agreement": settings.judge.min_agreement,
                   "min_pairs": settings.judge.calibration_min_pairs, "trusted": trusted}
    write_json(root / "metrics/judge_calibration.json", calibration)
    # As the stats stage runs it (reappreg.commands.stats).
    trust_policy = stats.TrustPolicy.from_settings(settings.stats, settings.judge)
    frame = stats.validate_judgments(synthetic_judgments(win_prob))
    report = stats.analyze(frame, calibration, settings=settings.stats,
                           reference=stats.load_reference_bar(root / "registry/models.yaml"), trust_policy=trust_policy)
    write_json(root / "metrics/eval.json", report["metrics"])
    write_json(root / "reports/claims.json", report["claims"])
    # The results table's promotion evidence (reappreg stats results); no fresh pool here.
    write_json(root / "metrics/results.json", {"rows": RESULTS_ROWS, "selection": {
        "selected": "policy", "promotable": False, "reason": "no fresh pool"}})
    return root


def pin_test_judge(models_yaml: Path, fingerprint: str = JUDGE_FINGERPRINT) -> None:
    """Pin ``fingerprint`` (a local judge's weights) as the reference bar's judge identity, the
    bar and everything else as the repository pins them."""
    declared = yaml.safe_load(models_yaml.read_text(encoding="utf-8"))
    declared["reference_bar"]["judge_identity"] = {"weights_md5": fingerprint}
    models_yaml.write_text(yaml.safe_dump(declared, sort_keys=False), encoding="utf-8")


TRAINING_RUN = "0123456789abcdef0123456789abcdef"
# metrics/results.json rows (reappreg.stats.results) of the final policy and its kept step-3 checkpoint.
RESULTS_ROWS = [
    {"row_id": "policy/gpt-4-0314", "condition": "policy", "kind": "policy", "checkpoint_step": None, "pool": "policy",
     "opponent": "gpt-4-0314", "status": "evaluated", "win_rate": 0.7125, "n": 300, "n_eff": 41.5, "n_vignettes": 6,
     "iid_screening_low": 0.6587, "iid_screening_high": 0.7611, "cluster_low": 0.5512, "cluster_high": 0.8433,
     "bar": 0.608, "bar_status": "not_confirmed", "bar_supported": False},
    {"row_id": "policy-step-3/gpt-4-0314", "condition": "policy-step-3", "kind": "checkpoint", "checkpoint_step": 3,
     "pool": "policy", "opponent": "gpt-4-0314", "status": "evaluated", "win_rate": 0.5833, "n": 288, "n_eff": 37.25,
     "n_vignettes": 6, "iid_screening_low": 0.5259, "iid_screening_high": 0.6385, "cluster_low": 0.4417,
     "cluster_high": 0.7092, "bar": 0.608, "bar_status": "not_confirmed", "bar_supported": False},
]


def retrain_policy(root: Path, weights: str) -> None:
    """New policy weights, and training metrics that describe them (as the training stage writes)."""
    (root / "models/policy/grpo/model.safetensors").write_text(weights)
    metrics = read_json(root / "metrics/policy/train.json")
    metrics["model_md5"] = dvc_md5(root / "models/policy/grpo")
    write_json(root / "metrics/policy/train.json", metrics)


def report_sources(root: Path):
    """What the report stage reads in a pipeline written by :func:`write_pipeline` (dvc.yaml's paths)."""
    from reappreg.report import ReportSources

    return ReportSources(
        canonical=root / "data/canonical", train=root / "data/train", heldout=root / "data/heldout/answers.jsonl",
        validation=root / "data/validation/report.json", certificate=root / "data/guard/certificate.json",
        rm_metrics=root / "metrics/rm", policy_metrics=root / "metrics/policy",
        calibration=root / "metrics/judge_calibration.json", eval_metrics=root / "metrics/eval.json",
        forest=root / "plots/eval/forest.csv", claims=root / "reports/claims.json",
        registration=root / "reports/registry/registration.json", leakscan=root / "reports/leakscan.json",
        samples=root / "reports/samples.json", results=root / "metrics/results.json",
        rm_comparison=root / "plots/rm/comparison.png")
