"""Stats inputs, outputs and the stage command (the attacks are in test_stats_attacks.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from stats_fixtures import FAST, POLICY, REFERENCE, TRUSTED, claim, honest_upstream, planted, write_upstream

from reappreg.errors import InputError
from reappreg.stats import (
    CLAIMS_SCHEMA_VERSION,
    analyze,
    load_calibration,
    load_judgments,
    load_reference_bar,
    validate_judgments,
    write_outputs,
)


@pytest.mark.parametrize("mutate,message", [
    (lambda r: r.pop("vignette_id"), "missing key(s) vignette_id"),
    (lambda r: r.pop("judge_fingerprint"), "missing key(s) judge_fingerprint"),
    (lambda r: r.pop("policy_chars"), "missing key(s) policy_chars"),
    (lambda r: r.update(verdict="maybe"), "'verdict' must be one of"),
    (lambda r: r.update(policy_score=0.5), "does not match verdict"),
    (lambda r: r.update(verdict="unparseable"), "must have policy_score null"),
    (lambda r: r.update(selection="cherry_picked"), "'selection' must be one of"),
    (lambda r: r.update(verdict_method="vibes"), "'verdict_method' must be one of"),
    (lambda r: r.update(sampling_seed="7"), "'sampling_seed' must be a non-negative integer"),
    (lambda r: r.update(p_a=0.5, p_b=None), "p_a and p_b must both be"),
])
def test_bad_judgment_rows_are_named(mutate, message):
    rows = planted([1.0], generations=2, answers=1)
    mutate(rows[1])
    with pytest.raises(InputError, match="row 2") as exc:
        validate_judgments(rows, "judgments.jsonl")
    assert message in str(exc.value)


def test_a_contest_whose_orders_disagree_is_rejected():
    rows = planted([1.0] * 2, generations=2, answers=1)
    rows[1] = {**rows[1], "opponent_answer_id": "another-answer"}
    with pytest.raises(InputError, match="disagree on 'opponent_answer_id'"):
        validate_judgments(rows)


def test_mixed_judges_or_fingerprints_rejected():
    rows = planted([1.0] * 2, generations=2, answers=1)
    for key in ("judge_model", "judge_fingerprint"):
        changed = [dict(r) for r in rows]
        changed[0][key] = "other"
        with pytest.raises(InputError, match=f"more than one {key}"):
            validate_judgments(changed)


def test_reference_bar_is_read_from_the_registry_declarations(tmp_path):
    import yaml

    path = tmp_path / "models.yaml"
    identity = {"weights_md5": "md5:0123456789abcdef0123456789abcdef.dir"}
    path.write_text(yaml.safe_dump({"models": {}, "reference_bar": {"bar": 0.608, "opponent": "gpt-4-0314",
                                                                    "judge": "some-judge", "judge_identity": identity,
                                                                    "source": "card"}}))
    assert load_reference_bar(path).bar == 0.608
    # A bar is on its judge's scale: one that does not say which judge measured it is refused, and so is
    # one that names the judge without pinning who it is (a name is a label anyone can give any weights).
    path.write_text(yaml.safe_dump({"reference_bar": {"bar": 0.608, "opponent": "gpt-4-0314", "source": "card",
                                                      "judge_identity": identity}}))
    with pytest.raises(InputError, match="invalid reference_bar: judge: Field required"):
        load_reference_bar(path)
    path.write_text(yaml.safe_dump({"reference_bar": {"bar": 0.608, "opponent": "gpt-4-0314", "source": "card",
                                                      "judge": "some-judge"}}))
    with pytest.raises(InputError, match="invalid reference_bar: judge_identity: Field required"):
        load_reference_bar(path)
    for bad in ({"weights_md5": "some-judge"}, {"provider": "vllm"},
                {"provider": "vllm", "model_id": "x", "weights_md5": identity["weights_md5"]}):
        path.write_text(yaml.safe_dump({"reference_bar": {"bar": 0.608, "opponent": "gpt-4-0314", "source": "card",
                                                          "judge": "some-judge", "judge_identity": bad}}))
        with pytest.raises(InputError, match="invalid reference_bar: judge_identity"):
            load_reference_bar(path)
    path.write_text(yaml.safe_dump({"models": {}}))
    with pytest.raises(InputError, match="no 'reference_bar:' entry"):
        load_reference_bar(path)
    path.write_text(yaml.safe_dump({"reference_bar": {"bar": 1.5, "opponent": "x", "source": "y"}}))
    with pytest.raises(InputError, match="invalid reference_bar: bar"):
        load_reference_bar(path)


def test_the_repository_pins_the_reference_bar():
    from pathlib import Path

    ref = load_reference_bar(Path(__file__).resolve().parents[2] / "registry" / "models.yaml")
    assert (ref.bar, ref.opponent) == (0.608, "gpt-4-0314") and "0.608" in ref.source
    # The bar's judge is the one its source names, and the full profile (which reproduces the
    # reference) judges with it, so only that profile's bar claims can be supported.
    import yaml

    from reappreg.settings import parse_params

    assert ref.judge in ref.source
    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "params.yaml").read_text())
    judges = {profile: parse_params({**raw, "profile": profile}, "params.yaml").judge for profile in ("cpu", "full")}
    # The bar's judge is pinned by identity: the API model the full profile serves (provider and model id,
    # as vLLM reports them). The CPU profile judges with a local folder, whose identity is its weights' md5:
    # never the pinned API model, so its bar claims stay judge_mismatch.
    pinned = ref.judge_identity
    assert (pinned.provider, pinned.model_id) == ("vllm", ref.judge)
    assert judges["full"].backend == "openai" and judges["full"].model == pinned.model_id, judges
    assert judges["cpu"].backend in ("transformers", "vllm"), judges   # local: md5 of its weights
    assert ref.decision is not None


@pytest.mark.parametrize("profile", ["cpu", "full", "rehearsal"])
def test_every_shipped_profile_decides_within_the_pinned_floors(profile):
    from pathlib import Path

    import yaml

    from reappreg.settings import parse_params
    from reappreg.evidence.reference import check_decision_settings, decision_values

    root = Path(__file__).resolve().parents[2]
    raw = yaml.safe_load((root / "params.yaml").read_text())
    p = parse_params({**raw, "profile": profile})
    decided = check_decision_settings(load_reference_bar(root / "registry/models.yaml"), decision_values(p.stats, p.judge),
                                      "registry/models.yaml")
    assert decided["stats.confidence"] == p.stats.confidence


def test_params_that_loosen_a_pinned_decision_setting_fail_naming_every_key():
    from reappreg.evidence.reference import check_decision_settings

    strict = {"stats.confidence": 0.99, "stats.min_n_confirm": 480, "judge.min_agreement": 0.7,
              "judge.calibration_min_pairs": 240, "stats.max_position_bias": 0.1, "stats.max_unparseable_rate": 0.0}
    assert check_decision_settings(REFERENCE, strict, "models.yaml") == strict  # stricter is always allowed
    loose = {**strict, "stats.confidence": 0.9, "judge.min_agreement": 0.6, "stats.max_position_bias": 0.3}
    with pytest.raises(InputError) as caught:
        check_decision_settings(REFERENCE, loose, "models.yaml")
    message = str(caught.value)
    assert "stats.confidence = 0.9 is looser than the pinned 0.95" in message
    assert "judge.min_agreement = 0.6 is looser than the pinned 0.65" in message
    assert "stats.max_position_bias = 0.3 is looser than the pinned 0.2 (reference_bar.decision.max_position_bias: at most" in message
    assert "min_n_confirm" not in message
    unpinned = REFERENCE.model_copy(update={"decision": None})
    with pytest.raises(InputError, match="reference_bar has no 'decision:' floors"):
        check_decision_settings(unpinned, strict, "models.yaml")


def test_outputs_written_flat_and_claims_refer_to_real_metric_keys(tmp_path):
    rows = planted([0.7] * 6) + planted([0.55] * 6, opponent="gemini-1.5-pro", seed_offset=90_000, id_prefix="x")
    path = tmp_path / "judgments.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "calib.json").write_text(json.dumps(TRUSTED))
    report = analyze(load_judgments(path), load_calibration(tmp_path / "calib.json"), settings=FAST,
                     reference=REFERENCE, trust_policy=POLICY)
    out = {k: tmp_path / v for k, v in dict(metrics_path="eval.json", plot_path="forest.png",
                                            plot_data_path="forest.csv", claims_path="claims.json").items()}
    write_outputs(report, **out)
    metrics = json.loads(out["metrics_path"].read_text())
    assert all(not isinstance(v, (dict, list)) for v in metrics.values())  # flat for dvc metrics
    claims = json.loads(out["claims_path"].read_text())
    assert isinstance(claims, list) and claims
    for c in claims:
        assert c["schema_version"] == CLAIMS_SCHEMA_VERSION == 3
        assert {"estimand", "clustering", "worst_case_low"} <= set(c["evidence"])
        assert all(ref in metrics for ref in c["metric_refs"])
    assert out["plot_path"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(out["plot_data_path"])
    assert len(table) == 2 * (6 + 1)
    pooled = table[(table.row == "pooled") & (table.opponent == "gemini-1.5-pro")].iloc[0]
    assert pooled.cluster_unit == "vignette" and pooled.win_rate == pytest.approx(0.55)
    assert metrics["policy/gpt-4-0314/n"] == 240 and metrics["policy/gpt-4-0314/n_orders"] == 480
    assert metrics["reference_bar/bar"] == 0.608


def test_iid_bound_above_bar_but_cluster_bound_below_is_not_claimed():
    # the seeds' mistake: many contests, 6 vignettes, three strong and three weak
    report = analyze(validate_judgments(planted([0.95, 0.9, 0.85, 0.5, 0.45, 0.4], generations=60)), TRUSTED,
                     settings=FAST, reference=REFERENCE, trust_policy=POLICY)
    m = report["metrics"]
    assert m["policy/gpt-4-0314/iid_low"] > 0.608 > m["policy/gpt-4-0314/cluster_low"]
    bar = claim(report, "bar/policy/gpt-4-0314")
    assert bar["status"] == "inconclusive" and bar["supported"] is False
    assert not any("iid" in ref for c in report["claims"] for ref in c["metric_refs"])


@pytest.mark.slow
def test_stats_command_writes_outputs_and_logs_one_mlflow_run(tmp_path, monkeypatch):
    import mlflow
    import yaml
    from typer.testing import CliRunner

    from reappreg.cli import app

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    upstream = honest_upstream([0.9] * 6, generations=20, answers_per_generation=2, opponents=("gpt-4-0314",))
    write_upstream(upstream, tmp_path)
    (tmp_path / "calib.json").write_text(json.dumps({**TRUSTED, "agreement": 0.5, "agreement_low": 0.4, "agreement_high": 0.6, "trusted": False}))
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"reference_bar": REFERENCE.model_dump()}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "tracking": {"uri": uri, "artifact_root": str(tmp_path / "mlart"), "experiment": "stats-test"},
        "stats": {"bootstrap_iterations": 500, "lc_bootstrap_iterations": 50},
        "judge": {"opponents": upstream["opponents"], "answers_per_generation": upstream["answers_per_generation"]},
        "generate": {"evals": 20, "samples_per_vignette": 1, "seed": 0},   # the plan honest_upstream sampled
    }))
    args = ["stats", "run", "--params", "params.yaml", "--judgments", "judgments.jsonl", "--generations",
            "generations.jsonl", "--answers", "answers.jsonl", "--vignettes", "vignettes.jsonl", "--calibration",
            "calib.json", "--models", "models.yaml", "--metrics", "out/eval.json", "--plot", "out/forest.png",
            "--plot-data", "out/forest.csv", "--claims", "out/claims.json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "untrusted judge: agreement 0.5 (lower bound 0.4) < min_agreement" in result.output
    claims = json.loads((tmp_path / "out/claims.json").read_text())
    bar = next(c for c in claims if c["claim_id"] == "bar/policy/gpt-4-0314")
    assert bar["status"] == "confirmed" and bar["supported"] is False and "untrusted_judge" in bar["flags"]

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["stats-test"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.data.tags["stage"] == "stats" and run.data.tags["judge_trusted"] == "false"
    assert "input.judgments.md5" in run.data.tags and "input.models.md5" in run.data.tags
    assert "input.generations.md5" in run.data.tags and "input.answers.md5" in run.data.tags
    assert run.data.metrics["policy/gpt-4-0314/win_rate"] == pytest.approx(0.9)
    assert run.data.metrics["design/planned_contests"] == 240 and run.data.metrics["design/missing_orders"] == 0
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "eval")}
    assert artifacts == {"eval/eval.json", "eval/forest.png", "eval/forest.csv", "eval/claims.json"}
    # Every claim names the md5 of each input (as MLflow recorded them) and its decision settings;
    # the first look over these generations is the only one.
    assert bar["inputs"] == {k[len("input."):-len(".md5")]: v for k, v in run.data.tags.items() if k.startswith("input.")}
    assert set(bar["inputs"]) == {"judgments", "calibration", "models", "generations", "answers", "vignettes"}
    assert bar["decision_settings"]["stats.min_n_confirm"] == 240 and bar["decision_settings"]["stats.confidence"] == 0.95
    assert bar["looks"]["earlier"] == 0 and "repeated_looks" not in bar["flags"]
    assert run.data.tags["look.policy"] == upstream["generations"][0]["model_md5"]

    # A second look at the same policy (here with an edited calibration) is counted and said.
    (tmp_path / "calib.json").write_text(json.dumps({**TRUSTED, "agreement": 0.5, "agreement_low": 0.41,
                                                     "agreement_high": 0.6, "trusted": False}))
    assert CliRunner().invoke(app, args).exit_code == 0
    again = next(c for c in json.loads((tmp_path / "out/claims.json").read_text()) if c["claim_id"] == bar["claim_id"])
    assert again["looks"]["earlier"] == 1
    assert [e["run_id"] for e in again["looks"]["earlier_looks"]] == [run.info.run_id]
    assert "repeated_looks" in again["flags"] and "drawn after 1 earlier evaluation(s) of this policy" in again["reason"]
    # Other generations of the same policy (the same records with their keys in another order) are a look too.
    rows = [json.loads(line) for line in (tmp_path / "generations.jsonl").read_text().splitlines()]
    (tmp_path / "generations.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    assert CliRunner().invoke(app, args).exit_code == 0
    other = next(c for c in json.loads((tmp_path / "out/claims.json").read_text()) if c["claim_id"] == bar["claim_id"])
    assert other["looks"]["earlier"] == 2 and other["inputs"]["generations"] != bar["inputs"]["generations"]

    (tmp_path / "calib.json").write_text(json.dumps({"trusted": True}))
    failed = CliRunner().invoke(app, args)
    assert isinstance(failed.exception, InputError) and "missing key(s)" in str(failed.exception)
