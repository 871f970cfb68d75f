"""Kept GRPO checkpoints: which steps (validated params), their export out of the Trainer's
rotating resume points, the published folder + manifest, and resume after a kill."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from reappreg.errors import InputError, ReappregError
from reappreg.hashing import dvc_md5
from reappreg.io import write_json
from reappreg.policy.checkpoints import (
    CHECKPOINT_MANIFEST,
    export_checkpoint,
    export_missing,
    publish_checkpoints,
    read_checkpoint_manifest,
)
from reappreg.policy.train import GrpoSpec, prepare_work_dir
from reappreg.settings import parse_params
from reappreg.settings.policy import PolicyTrainSettings
from policy_fixtures import StandinEnsemble, write_training_inputs

REPO = Path(__file__).resolve().parents[2]
MODEL_FILES = {"model.safetensors": "weights", "config.json": "{}", "generation_config.json": "{}",
               "tokenizer.json": "{}", "tokenizer_config.json": "{}", "training_args.bin": "args"}
RESUME_FILES = {"optimizer.pt": "adam", "scheduler.pt": "lr", "rng_state.pth": "rng", "rng_state_1.pth": "rng1",
                "trainer_state.json": '{"global_step": 3}'}


def _fake_checkpoint(folder: Path, step: int, weights: str = "weights") -> Path:
    ck = folder / f"checkpoint-{step}"
    ck.mkdir(parents=True)
    for name, text in {**MODEL_FILES, **RESUME_FILES, "model.safetensors": weights}.items():
        (ck / name).write_text(text)
    write_json(ck / "trainer_state.json", {"global_step": step})
    (ck / f"global_step{step}").mkdir()  # DeepSpeed's sharded optimizer state
    (ck / f"global_step{step}" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_text("shard")
    return ck


# ----------------------------------------------------------------------------- params


@pytest.mark.parametrize("steps, why", [
    ([4], "multiple of save_steps"),   # the trainer never saves step 4 with save_steps 3
    ([6], "below max_steps"),          # max_steps is the final model, not a kept checkpoint
    ([0], "positive multiple"),
    ([3, 3], "once, in ascending order"),
])
def test_checkpoint_steps_must_be_steps_the_trainer_saves(steps, why):
    with pytest.raises(ValueError, match=why):
        PolicyTrainSettings(max_steps=6, save_steps=3, checkpoint_steps=steps)


def test_checkpoint_steps_descending_is_refused():
    with pytest.raises(ValueError, match="ascending"):
        PolicyTrainSettings(max_steps=10, save_steps=3, checkpoint_steps=[6, 3])


def test_every_profile_keeps_valid_checkpoints():
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    for profile, expected_final in (("cpu", 6), ("full", 500), ("rehearsal", 2)):
        train = parse_params({**raw, "profile": profile}).policy.train
        assert train.checkpoint_steps, profile
        assert train.max_steps == expected_final
        assert all(n % train.save_steps == 0 and n < train.max_steps for n in train.checkpoint_steps), profile
    assert parse_params(raw).policy.train.checkpoint_steps == [3]   # the CPU matrix: step 3 + the final step 6


def test_a_profile_with_an_invalid_checkpoint_list_fails_at_load():
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["profiles"]["full"]["policy"]["train"]["checkpoint_steps"] = [130]   # not a multiple of 25
    with pytest.raises(InputError, match=r"(?s)profiles\.full.*policy\.train.*checkpoint_steps \[130\]"):
        parse_params(raw)


# ----------------------------------------------------------------------------- export


def test_export_keeps_model_files_and_drops_resume_state(tmp_path):
    ck = _fake_checkpoint(tmp_path / "checkpoints", 3)
    out = export_checkpoint(ck, tmp_path / "exports/step_3")
    assert sorted(p.name for p in out.iterdir()) == sorted(MODEL_FILES)
    assert (out / "model.safetensors").read_text() == "weights"
    assert not list((tmp_path / "exports").glob(".*"))   # no temp folder left behind


def test_export_refuses_an_incomplete_checkpoint(tmp_path):
    ck = _fake_checkpoint(tmp_path / "checkpoints", 3)
    (ck / "trainer_state.json").unlink()   # cut off mid-save: the Trainer writes it last
    with pytest.raises(InputError, match="not a complete Trainer checkpoint"):
        export_checkpoint(ck, tmp_path / "exports/step_3")
    ck2 = _fake_checkpoint(tmp_path / "other", 3)
    (ck2 / "model.safetensors").unlink()
    with pytest.raises(InputError, match="no safetensors"):
        export_checkpoint(ck2, tmp_path / "exports/step_3")
    assert not (tmp_path / "exports/step_3").exists()


def _spec(work: Path, steps=(3,)) -> GrpoSpec:
    return GrpoSpec(base_model_dir="unused", prompts_path="unused", vignettes_path="unused", ensemble_path="unused",
                    work_dir=str(work), train=PolicyTrainSettings(max_steps=9, save_steps=3, checkpoint_steps=list(steps)))


def test_resume_exports_a_kept_checkpoint_killed_before_its_copy(tmp_path):
    spec = _spec(tmp_path / "work")
    ck = _fake_checkpoint(spec.checkpoint_dir, 3)
    assert export_missing(spec, ck) == 3
    assert (spec.export_dir / "step_3" / "model.safetensors").read_text() == "weights"
    assert export_missing(spec, ck) is None          # already exported: left alone
    assert export_missing(spec, None) is None        # a fresh run
    later = _fake_checkpoint(spec.checkpoint_dir, 6)
    assert export_missing(spec, later) is None       # step 6 is not kept


def test_work_dir_discards_exports_of_another_run_and_keeps_its_own(tmp_path):
    work = tmp_path / "work"
    prepare_work_dir(work, "run-a")
    (work / "exports/step_3").mkdir(parents=True)
    (work / "exports/step_3/model.safetensors").write_text("w")
    prepare_work_dir(work, "run-a")
    assert (work / "exports/step_3/model.safetensors").is_file()
    _, discarded = prepare_work_dir(work, "run-b")
    assert discarded and not (work / "exports").exists()


# ----------------------------------------------------------------------------- publish


def test_publish_moves_every_step_and_writes_a_manifest(tmp_path):
    spec = _spec(tmp_path / "work", steps=(3, 6))
    for step in (3, 6):
        export_checkpoint(_fake_checkpoint(spec.checkpoint_dir, step, weights=f"w{step}"), spec.export_dir / f"step_{step}")
    out = tmp_path / "models/policy/checkpoints"
    manifest = publish_checkpoints(spec.export_dir, out, steps=[3, 6], final_step=9, fingerprint="fp",
                                   extra_files={"training_prompt.json": {"version": 1}})
    assert manifest == read_checkpoint_manifest(out) == json.loads((out / CHECKPOINT_MANIFEST).read_text())
    assert [e["step"] for e in manifest["checkpoints"]] == [3, 6]
    assert manifest["final_step"] == 9 and manifest["run_fingerprint"] == "fp"
    for entry in manifest["checkpoints"]:
        folder = out / entry["path"]
        assert entry["md5"] == dvc_md5(folder)
        assert json.loads((folder / "training_prompt.json").read_text()) == {"version": 1}
    assert (out / "step_6/model.safetensors").read_text() == "w6"
    # The exports stay (linked, not a second copy): a forced rerun of the same run resumes from its
    # last checkpoint, past every kept step, and must be able to publish them again.
    assert (spec.export_dir / "step_3/model.safetensors").stat().st_ino == (out / "step_3/model.safetensors").stat().st_ino
    again = publish_checkpoints(spec.export_dir, tmp_path / "again", steps=[3, 6], final_step=9, fingerprint="fp",
                                extra_files={"training_prompt.json": {"version": 1}})
    assert again == manifest
    # Nothing run-specific (no MLflow run id): a resumed run publishes the same bytes.
    assert "run_id" not in json.dumps(manifest)


def test_publish_refuses_a_kept_step_that_was_never_exported(tmp_path):
    spec = _spec(tmp_path / "work", steps=(3, 6))
    export_checkpoint(_fake_checkpoint(spec.checkpoint_dir, 3), spec.export_dir / "step_3")
    out = tmp_path / "checkpoints"
    with pytest.raises(ReappregError, match=r"step\(s\) \[6\].*not exported"):
        publish_checkpoints(spec.export_dir, out, steps=[3, 6], final_step=4, fingerprint="fp")
    assert not out.exists() and (spec.export_dir / "step_3").is_dir()   # nothing half-published


def test_a_failed_publish_keeps_the_exports_for_the_next_run(tmp_path):
    """The Trainer's resume points of those steps may be gone: the exports are the only copy."""
    spec = _spec(tmp_path / "work")
    export_checkpoint(_fake_checkpoint(spec.checkpoint_dir, 3), spec.export_dir / "step_3")
    out = tmp_path / "checkpoints"
    with pytest.raises(TypeError):
        publish_checkpoints(spec.export_dir, out, steps=[3], final_step=9, fingerprint="fp",
                            extra_files={"training_prompt.json": {"not json": object()}})
    assert not out.exists() and (spec.export_dir / "step_3/model.safetensors").read_text() == "weights"
    publish_checkpoints(spec.export_dir, out, steps=[3], final_step=9, fingerprint="fp")
    assert (out / "step_3/model.safetensors").read_text() == "weights"


def test_publish_with_no_kept_steps_writes_an_empty_manifest(tmp_path):
    out = tmp_path / "checkpoints"
    manifest = publish_checkpoints(tmp_path / "work/exports", out, steps=[], final_step=2, fingerprint="fp")
    assert manifest["checkpoints"] == [] and (out / CHECKPOINT_MANIFEST).is_file()


def test_manifest_reader_refuses_a_listed_folder_that_is_missing(tmp_path):
    out = tmp_path / "checkpoints"
    out.mkdir()
    with pytest.raises(InputError, match="manifest not found"):
        read_checkpoint_manifest(out)
    write_json(out / CHECKPOINT_MANIFEST, {"checkpoints": [{"step": 3, "path": "step_3", "md5": "x"}]})
    with pytest.raises(InputError, match=r"\['step_3'\].*not in"):
        read_checkpoint_manifest(out)
    write_json(out / CHECKPOINT_MANIFEST, {"checkpoints": "step_3"})
    with pytest.raises(InputError, match="expected"):
        read_checkpoint_manifest(out)


# ----------------------------------------------------------------------------- real GRPO


@pytest.mark.slow
def test_kept_checkpoints_survive_rotation_and_a_kill_before_their_copy(tiny_random_policy, tmp_path):
    """save_total_limit 1 deletes every older resume point; the kept steps are still exported,
    loadable, and a run killed right after a kept checkpoint (its copy lost) ends with the same
    exported bytes as an uninterrupted run."""
    import shutil

    from transformers import AutoModelForCausalLM, TrainerCallback

    from reappreg.policy.train import latest_checkpoint, train_grpo

    class ByLength(StandinEnsemble):
        """Rewards longer answers: random completions differ in length, so advantages are not zero and
        the weights move every step (the standin's format gate scores them all the same)."""

        def gate(self, answers):
            return np.ones(len(answers), dtype=bool)

        def score(self, scenarios, answers):
            return np.array([len(a) / 100 for a in answers])

    prompts, vignettes = write_training_inputs(tmp_path, tiny_random_policy)
    hyper = PolicyTrainSettings(max_steps=4, num_generations=2, per_device_train_batch_size=2, max_completion_length=6,
                                save_steps=1, save_total_limit=1, learning_rate=1e-3, cpu_threads=1, checkpoint_steps=[1, 2])

    def spec(work):
        return GrpoSpec(base_model_dir=str(tiny_random_policy), prompts_path=str(prompts), vignettes_path=str(vignettes),
                        ensemble_path="unused", work_dir=str(work), train=hyper, show_progress=False)

    straight = spec(tmp_path / "straight")
    outcome = train_grpo(straight, ensemble=ByLength())
    assert outcome["checkpoint_steps"] == [1, 2]
    assert [p.name for p in straight.checkpoint_dir.iterdir() if p.name.startswith("checkpoint-")] == ["checkpoint-4"]
    for step in (1, 2):
        AutoModelForCausalLM.from_pretrained(straight.export_dir / f"step_{step}", local_files_only=True)
    weights = [dvc_md5(f) for f in (tiny_random_policy / "model.safetensors", straight.export_dir / "step_1/model.safetensors",
                                     straight.export_dir / "step_2/model.safetensors", straight.final_dir / "model.safetensors")]
    assert len(set(weights)) == 4, "the kept checkpoints must be the weights of their own steps"

    class Kill(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise KeyboardInterrupt("killed")

    killed = spec(tmp_path / "killed")
    with pytest.raises(KeyboardInterrupt):
        train_grpo(killed, ensemble=ByLength(), extra_callbacks=[Kill()])
    shutil.rmtree(killed.export_dir / "step_2")   # the kill landed before the copy finished
    assert latest_checkpoint(killed.checkpoint_dir).name == "checkpoint-2"
    train_grpo(killed, ensemble=ByLength())
    for step in (1, 2):
        name = f"step_{step}/model.safetensors"
        assert dvc_md5(killed.export_dir / name) == dvc_md5(straight.export_dir / name), step
