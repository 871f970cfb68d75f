"""Leak probes: held-out text planted in each place the scan covers is found; clean passes."""

from __future__ import annotations

import json

import mlflow
import pytest

from reappreg.errors import InputError
from reappreg.io import read_jsonl
from reappreg.guard.leakscan import run_leakscan
from reappreg.settings.guard import GuardSettings

SETTINGS = GuardSettings()


@pytest.fixture
def setup(split_data, tmp_path):
    train_dir, heldout = split_data
    answers = read_jsonl(heldout)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    exp = mlflow.create_experiment("leak-exp", artifact_location=(tmp_path / "art").as_uri())
    models = tmp_path / "models" / "rm"
    models.mkdir(parents=True)
    (models / "config.json").write_text(json.dumps({"hidden_size": 384, "note": "clean"}))
    (models / "weights.safetensors").write_bytes(answers[0]["text"].encode() * 3)  # binary: not scanned
    clean_text = read_jsonl(train_dir / "reappraisals.jsonl")[0]["text"]
    with mlflow.start_run(experiment_id=exp, tags={"stage": "rm_train@0"}):
        mlflow.log_param("objective", "multidim")
        mlflow.log_text(clean_text, "examples/train_example.txt")  # training text is fine
    with mlflow.start_run(experiment_id=exp, tags={"stage": "judge"}):
        mlflow.log_text(answers[1]["text"], "judge_prompt.txt")  # evaluation may see answers
    sketch = tmp_path / "sketch.json"
    sketch.write_text(json.dumps({"ngram_keys": ["a1b2c3", "d4e5f6"], "n": 5}))
    return {"heldout": heldout, "answers": answers, "uri": uri, "exp": exp, "models": tmp_path / "models", "sketch": sketch}


def _scan(s):
    return run_leakscan(heldout_path=s["heldout"], settings=SETTINGS, folders=[s["models"]], sketch_path=s["sketch"],
                        tracking_uri=s["uri"], experiment="leak-exp")


def test_clean_state_passes_and_eval_runs_are_excluded(setup):
    report = _scan(setup)
    assert report["passed"], report["hits"]
    assert report["mlflow_runs_scanned"] == 1
    assert report["probes_by_kind"]["mlflow_artifact"] == 1


def _plant(setup, where: str, text: str):
    if where == "param":
        with mlflow.start_run(experiment_id=setup["exp"], tags={"stage": "policy_train"}):
            mlflow.log_param("system_prompt", text[:500])
    elif where == "tag":
        with mlflow.start_run(experiment_id=setup["exp"], tags={"stage": "rm_ensemble", "example": text}):
            pass
    elif where == "artifact":
        with mlflow.start_run(experiment_id=setup["exp"], tags={"stage": "policy_train"}):
            mlflow.log_text(f"step 3 completions:\n- {text.upper()}\n", "completions/step_3.txt")
    elif where == "checkpoint":
        (setup["models"] / "rm" / "trainer_state.json").write_text(json.dumps({"log": [{"sample": text}]}))
    elif where == "sketch":
        setup["sketch"].write_text(json.dumps({"ngram_keys": [], "debug_text": text}))


@pytest.mark.parametrize("where", ["param", "tag", "artifact", "checkpoint", "sketch"])
def test_each_probe_finds_a_planted_answer(setup, where):
    answer = setup["answers"][2]
    _plant(setup, where, answer["text"])
    report = _scan(setup)
    assert not report["passed"]
    kinds = {"param": "mlflow_param", "tag": "mlflow_tag", "artifact": "mlflow_artifact", "checkpoint": "file", "sketch": "sketch"}
    assert {h["kind"] for h in report["hits"]} == {kinds[where]}
    assert answer["answer_id"] in {h["answer_id"] for h in report["hits"]}
    # the report names places and ids, never the answer text
    assert answer["text"] not in json.dumps(report)


def test_light_paraphrase_in_a_checkpoint_is_found(setup):
    words = setup["answers"][3]["text"].split()
    words[2] = "truly"
    _plant(setup, "checkpoint", " ".join(words))
    assert not _scan(setup)["passed"]


def test_missing_target_is_an_error_not_a_pass(setup, tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        run_leakscan(heldout_path=setup["heldout"], settings=SETTINGS, folders=[tmp_path / "nope"],
                     sketch_path=None, tracking_uri=None, experiment="leak-exp")


def test_logged_model_code_is_scanned(setup, tmp_path):
    """MLflow 3 keeps logged models outside run artifacts; their files are probed too."""

    class Echo(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input):
            return model_input

    code = tmp_path / "code_pkg"
    code.mkdir()
    (code / "bank.py").write_text(f'TEXT = """{setup["answers"][5]["text"]}"""\n')
    with mlflow.start_run(experiment_id=setup["exp"], tags={"stage": "rm_ensemble"}):
        mlflow.pyfunc.log_model(name="m", python_model=Echo(), code_paths=[str(code)], pip_requirements=[])
    report = _scan(setup)
    assert not report["passed"]
    assert {h["kind"] for h in report["hits"]} == {"mlflow_model_artifact"}
    assert any(h["location"].endswith("bank.py") for h in report["hits"])


def test_a_text_found_in_several_places_is_checked_once_and_reported_at_each(setup):
    """A tokenizer copied into every model folder is one text: scanned once, every copy reported."""
    leaked = setup["answers"][2]["text"]
    for name in ("base", "grpo", "checkpoints/step_1"):
        folder = setup["models"] / "policy" / name
        folder.mkdir(parents=True)
        (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"content": leaked}]}))
    with mlflow.start_run(experiment_id=setup["exp"], tags={"stage": "register"}):
        mlflow.log_text(json.dumps({"added_tokens": [{"content": leaked}]}), "policy/tokenizer.json")
    report = _scan(setup)
    locations = sorted(h["location"].split(":")[-1].replace(str(setup["models"]), "") for h in report["hits"]
                       if h["answer_id"] == setup["answers"][2]["answer_id"] and h["detector"] == "ngram")
    assert locations == ["/policy/base/tokenizer.json", "/policy/checkpoints/step_1/tokenizer.json",
                         "/policy/grpo/tokenizer.json", "policy/tokenizer.json"], report["hits"]
    assert report["n_distinct_texts"] <= report["n_probes"] - 3  # the four copies are one text
