"""Eval generation: fresh seeds per eval, the training prompt, </think> split, best-of-N pools."""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from reappreg.errors import InputError
from reappreg.eval.generate import (
    Completion,
    build_generator,
    generate_evaluations,
    plan_samples,
    sampling_seed,
    select_vignettes,
    summarise_generations,
)
from reappreg.io import read_json, read_jsonl
from reappreg.settings.generate import GenerateSettings

REPO = Path(__file__).resolve().parents[2]
PROMPT_FILE = REPO / "pipelines" / "prompts" / "grpo_prompt.yaml"
JUDGE_PROMPT_FILE = REPO / "pipelines" / "prompts" / "judge_prompt.yaml"
VIGNETTES = [{"vignette_id": f"v{i}", "scenario": f"Scenario number {i}: something upsetting happened."}
             for i in range(1, 4)]
GENERATION_FIELDS = {
    "generation_id", "vignette_id", "scenario", "eval_k", "sample_index", "candidate_index", "seed", "sampling_seed", "raw_text", "thinking", "answer", "has_close_tag", "n_tokens",
    "hit_max_new_tokens", "selection", "selected", "best_of_n", "pool_id", "selection_pool", "rm_score",
    "backend", "model", "model_md5", "prompt_sha256", "max_new_tokens", "temperature", "top_p",
}


class FakeTokenizer:
    chat_template = "fake"
    name_or_path = "fake"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kwargs):
        return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"


class FakeGenerator:
    """Deterministic in (prompt, seed); odd samples think first, even ones have no close tag."""

    backend = "fake"
    model = "fake-policy"
    model_md5 = "md5:0000000000000000000000000000000f.dir"

    def __init__(self):
        self.tokenizer = FakeTokenizer()
        self.calls: list[tuple[str, int]] = []

    def generate(self, prompts, samples, progress=None):
        out = []
        for prompt, sample in zip(prompts, samples):
            self.calls.append((prompt, sample.seed))
            rng = np.random.default_rng(sample.seed)
            words = " ".join(f"w{x}" for x in rng.integers(0, 1000, size=int(rng.integers(2, 9))))
            j = sample.sample_index + sample.candidate_index
            text = f"<think>mull {j}</think> You could see it as {words}." if j % 2 else f"You might {words}."
            out.append(Completion(text=text, n_tokens=len(text.split()), hit_max_new_tokens=False))
        if progress:
            progress(len(samples))
        return out


class LengthScorer:
    """A stand-in RM: longer answers score higher (deterministic, easy to check by hand)."""

    def __init__(self):
        self.calls = 0

    def score(self, scenarios, answers):
        self.calls += 1
        assert len(scenarios) == len(answers)
        return np.array([float(len(a)) for a in answers])


def test_seeds_are_fresh_per_eval_pool_vignette_and_sample_and_reproducible():
    seeds = {sampling_seed(7, pool, k, vid, s) for pool in ("none", "best_of_n_selection_pool", "best_of_n_fresh")
             for k in range(3) for vid in ("v1", "v2") for s in range(4)}
    assert len(seeds) == 3 * 3 * 2 * 4
    assert sampling_seed(7, "none", 1, "v1", 0) == sampling_seed(7, "none", 1, "v1", 0)
    assert sampling_seed(7, "none", 1, "v1", 0) != sampling_seed(8, "none", 1, "v1", 0)
    assert all(0 <= s < 2**31 for s in seeds)


def test_plan_has_plain_samples_plus_two_pools_of_n_for_best_of_n():
    plain = plan_samples(["v1", "v2"], GenerateSettings(evals=3, samples_per_vignette=4))
    assert len(plain) == 3 * 2 * 4 and all(x.selection == "none" and x.pool_id == x.generation_id for x in plain)
    bon = plan_samples(["v1", "v2"], GenerateSettings(evals=3, samples_per_vignette=4, best_of_n=5))
    pools = [x for x in bon if x.selection != "none"]
    assert len(pools) == 2 * 3 * 2 * 4 * 5
    assert {x.selection for x in pools} == {"best_of_n_selection_pool", "best_of_n_fresh"}
    assert len({x.pool_id for x in pools}) == 2 * 3 * 2 * 4
    assert len({x.seed for x in bon}) == len(bon) and len({x.generation_id for x in bon}) == len(bon)


def test_a_fresh_pool_plans_new_ids_with_its_own_seeds():
    """A fresh confirmation pool (generate run --seed N) is its own plan: ids under
    fresh-s<N>- (never the selection pool's) and seeds from N, every id and pool prefixed."""
    from reappreg.eval.plan import fresh_pool_prefix

    config = GenerateSettings(evals=2, samples_per_vignette=2, best_of_n=3, seed=5)
    main = plan_samples(["v1", "v2"], config)
    fresh = plan_samples(["v1", "v2"], config.model_copy(update={"seed": 77}), fresh_pool_prefix(77))
    assert all(x.generation_id.startswith("fresh-s77-") and x.pool_id.startswith("fresh-s77-") for x in fresh)
    assert not {x.generation_id for x in main} & {x.generation_id for x in fresh}
    assert not {x.seed for x in main} & {x.seed for x in fresh}
    rows = generate_evaluations(VIGNETTES[:2], FakeGenerator(), GenerateSettings(evals=1, samples_per_vignette=1, seed=77),
                                template=PROMPT_FILE, id_prefix=fresh_pool_prefix(77))
    assert all(r["generation_id"].startswith("fresh-s77-none-e0-") for r in rows)


def test_generations_use_the_training_prompt_and_split_think():
    from reappreg.policy import render_prompt

    gen = FakeGenerator()
    config = GenerateSettings(evals=3, samples_per_vignette=2, seed=5, max_new_tokens=20)
    rows = generate_evaluations(VIGNETTES, gen, config, template=PROMPT_FILE)
    assert len(rows) == 3 * 3 * 2
    assert all(set(r) == GENERATION_FIELDS for r in rows)
    assert len({r["generation_id"] for r in rows}) == len(rows)
    for vig in VIGNETTES:
        expected = render_prompt(FakeTokenizer(), vig["scenario"], PROMPT_FILE)
        prompts = {p for p, _ in gen.calls if vig["scenario"] in p}
        assert prompts == {expected}
        assert {r["prompt_sha256"] for r in rows if r["vignette_id"] == vig["vignette_id"]} == {
            hashlib.sha256(expected.encode()).hexdigest()}
    # every sequence of every eval has its own seed, and the texts differ across evals
    assert len({r["seed"] for r in rows}) == len(rows)
    for vid in ("v1", "v2", "v3"):
        per_eval = {k: [r for r in rows if r["vignette_id"] == vid and r["eval_k"] == k] for k in range(3)}
        assert len({tuple(r["raw_text"] for r in rs) for rs in per_eval.values()}) == 3
    closed = [r for r in rows if r["has_close_tag"]]
    assert closed and all(r["thinking"].startswith("mull") and r["answer"].startswith("You could") for r in closed)
    assert all(r["thinking"] == "" and r["answer"] == r["raw_text"] for r in rows if not r["has_close_tag"])
    assert all(r["selected"] and r["selection"] == "none" and r["best_of_n"] == 1 for r in rows)
    assert all(r["rm_score"] is None for r in rows)
    # same config, same rows: every row is reproducible from its seed
    assert generate_evaluations(VIGNETTES, FakeGenerator(), config, template=PROMPT_FILE) == rows


def test_thinking_model_without_close_tag_gets_no_answer_under_penalize():
    rows = generate_evaluations(VIGNETTES[:1], FakeGenerator(), GenerateSettings(evals=1, samples_per_vignette=4),
                                template=PROMPT_FILE, thinking=True, missing_close_tag="penalize")
    unclosed = [r for r in rows if not r["has_close_tag"]]
    assert unclosed and all(r["answer"] == "" and r["raw_text"] for r in unclosed)
    whole = generate_evaluations(VIGNETTES[:1], FakeGenerator(), GenerateSettings(evals=1, samples_per_vignette=4),
                                 template=PROMPT_FILE, thinking=True, missing_close_tag="score_whole")
    assert all(r["answer"] == r["raw_text"] for r in whole if not r["has_close_tag"])
    assert summarise_generations(rows)["empty_answer_rate"] == pytest.approx(0.5)


def test_best_of_n_picks_the_rm_argmax_in_two_independent_pools():
    scorer = LengthScorer()
    config = GenerateSettings(evals=2, samples_per_vignette=2, best_of_n=4, seed=11)
    rows = generate_evaluations(VIGNETTES[:2], FakeGenerator(), config, template=PROMPT_FILE, scorer=scorer)
    assert scorer.calls == 1 and all(r["rm_score"] == float(len(r["answer"])) for r in rows)
    plain = [r for r in rows if r["selection"] == "none"]
    assert len(plain) == 2 * 2 * 2 and all(r["selected"] for r in plain)
    for selection in ("best_of_n_selection_pool", "best_of_n_fresh"):
        pool_rows = [r for r in rows if r["selection"] == selection]
        assert len(pool_rows) == 2 * 2 * 2 * 4
        pools: dict[str, list[dict]] = {}
        for r in pool_rows:
            pools.setdefault(r["pool_id"], []).append(r)
        assert len(pools) == 8
        for members in pools.values():
            winners = [m for m in members if m["selected"]]
            assert len(winners) == 1 and len(members) == 4 and all(m["best_of_n"] == 4 for m in members)
            assert winners[0]["rm_score"] == max(m["rm_score"] for m in members)
            assert sorted(winners[0]["selection_pool"]) == sorted(m["generation_id"] for m in members)
    sel_seeds = {r["seed"] for r in rows if r["selection"] == "best_of_n_selection_pool"}
    fresh_seeds = {r["seed"] for r in rows if r["selection"] == "best_of_n_fresh"}
    assert sel_seeds.isdisjoint(fresh_seeds)  # the fresh pool is not the selection pool resampled
    summary = summarise_generations(rows)
    assert summary["rm_score_mean.best_of_n_fresh"] > summary["rm_score_mean.none"]


def test_best_of_n_without_an_rm_and_bad_settings_are_refused():
    with pytest.raises(InputError, match="needs the RM ensemble"):
        generate_evaluations(VIGNETTES, FakeGenerator(), GenerateSettings(best_of_n=3), template=PROMPT_FILE)
    with pytest.raises(ValidationError, match="temperature > 0"):
        GenerateSettings(best_of_n=3, temperature=0.0)
    with pytest.raises(ValidationError, match="evals\n.*greater than or equal to 1"):
        GenerateSettings(evals=0)
    with pytest.raises(InputError, match="v9 not found"):
        select_vignettes(VIGNETTES, ["v9"])
    with pytest.raises(InputError, match="row 2 repeats vignette_id"):
        select_vignettes([VIGNETTES[0], VIGNETTES[0]], None)
    with pytest.raises(InputError, match="'/nonexistent/policy' not found"):
        build_generator(GenerateSettings(), "/nonexistent/policy")


def test_vllm_backend_is_lazy_and_returns_the_same_schema(monkeypatch, tmp_path):
    seen = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            seen["init"] = kwargs

        def get_tokenizer(self):
            return FakeTokenizer()

        def generate(self, prompts, params, use_tqdm=False):
            seen["params"] = params
            return [types.SimpleNamespace(outputs=[
                types.SimpleNamespace(text=f"<think>x</think>answer {p['seed']}", token_ids=[1, 2, 3],
                                      finish_reason="length" if i == 0 else "stop")]) for i, p in enumerate(params)]

    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kw: kw
    folder = tmp_path / "policy"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    config = GenerateSettings(backend="vllm", evals=2, samples_per_vignette=3, seed=3)
    generator = build_generator(config, folder)
    assert "init" not in seen
    monkeypatch.setitem(sys.modules, "vllm", fake)
    rows = generate_evaluations(VIGNETTES[:2], generator, config, template=PROMPT_FILE)
    assert len(rows) == 2 * 2 * 3 and all(set(r) == GENERATION_FIELDS for r in rows)
    assert all(r["backend"] == "vllm" and r["answer"] == f"answer {r['seed']}" for r in rows)
    # every row names the policy by its weights: the md5 of the folder it was loaded from
    from reappreg.hashing import dvc_md5

    assert {r["model_md5"] for r in rows} == {f"md5:{dvc_md5(folder)}"}
    assert [r["hit_max_new_tokens"] for r in rows[:3]] == [True, False, False]
    assert all(p["max_tokens"] == config.max_new_tokens and p["n"] == 1 for p in seen["params"])
    assert [p["seed"] for p in seen["params"]] == [r["seed"] for r in rows]




def test_transformers_backend_samples_reproducibly_whatever_the_batch(tiny_lm):
    config = GenerateSettings(evals=2, samples_per_vignette=2, seed=21, max_new_tokens=6, temperature=1.0)
    first = generate_evaluations(VIGNETTES[:2], build_generator(config.model_copy(update={"batch_size": 8}), tiny_lm),
                                 config, template=PROMPT_FILE)
    # other batch boundaries (and batch-mates) give every row the same text: per-row seeds
    again = generate_evaluations(VIGNETTES[:2], build_generator(config.model_copy(update={"batch_size": 3}), tiny_lm),
                                 config, template=PROMPT_FILE)
    assert [r["raw_text"] for r in first] == [r["raw_text"] for r in again]
    assert len({r["raw_text"] for r in first}) == len(first)  # evals and samples really differ
    assert all(1 <= r["n_tokens"] <= 6 for r in first)
    assert all(r["hit_max_new_tokens"] == (r["n_tokens"] == 6) for r in first)


@pytest.mark.slow
def test_generate_and_judge_cli_end_to_end(tiny_lm, split_data, tmp_path, tracking_uri):
    """`reappreg generate run` -> `judge calibrate` -> `judge run` with real (tiny) local models."""
    from typer.testing import CliRunner

    from reappreg.cli import app

    train_dir, heldout = split_data
    params = tmp_path / "params.yaml"
    params.write_text(
        "generate:\n  evals: 2\n  samples_per_vignette: 1\n  max_new_tokens: 8\n  vignettes: [v1, v2]\n"
        f"judge:\n  model: {tiny_lm}\n  opponents: [gpt-4-0314, claude-3-opus]\n  max_new_tokens: 4\n"
        f"  calibration_pairs: 4\n  calibration_min_pairs: 4\n  cache_dir: {tmp_path / 'cache'}\n",
        encoding="utf-8",
    )
    gens, judgments = tmp_path / "generations.jsonl", tmp_path / "judgments.jsonl"
    calib, calib_rows = tmp_path / "judge_calibration.json", tmp_path / "judge_calibration.jsonl"
    runner = CliRunner()
    result = runner.invoke(app, ["generate", "run", "--vignettes", str(train_dir / "vignettes.jsonl"), "--model",
                                 str(tiny_lm), "--prompt-file", str(PROMPT_FILE), "--out", str(gens),
                                 "--params", str(params)])
    assert result.exit_code == 0, result.output
    rows = read_jsonl(gens)
    assert len(rows) == 2 * 2 and {r["eval_k"] for r in rows} == {0, 1}
    assert all(isinstance(r["sampling_seed"], int) and r["sampling_seed"] == r["seed"] for r in rows)
    result = runner.invoke(app, ["judge", "calibrate", "--train", str(train_dir), "--out", str(calib),
                                 "--rows", str(calib_rows), "--prompt-file", str(JUDGE_PROMPT_FILE),
                                 "--params", str(params)])
    assert result.exit_code == 0, result.output
    calibration = read_json(calib)
    assert calibration["n_pairs"] == 4 and calibration["unparseable_rate"] == 0.0
    assert calibration["judge_fingerprint"].startswith("md5:")
    result = runner.invoke(app, ["judge", "run", "--generations", str(gens), "--answers", str(heldout), "--out",
                                 str(judgments), "--calibration", str(calib), "--prompt-file",
                                 str(JUDGE_PROMPT_FILE), "--params", str(params)])
    assert result.exit_code == 0, result.output
    judged = read_jsonl(judgments)
    assert len(judged) == 4 * 2 * 2  # 4 generations x 2 opponents x 2 orders
    assert {r["opponent_source"] for r in judged} == {"gpt-4-0314", "claude-3-opus"}
    assert all(r["verdict"] != "unparseable" and r["verdict_method"] == "logprob" for r in judged)
    assert {r["judge_fingerprint"] for r in judged} == {calibration["judge_fingerprint"]}
    seeds = {r["generation_id"]: r["sampling_seed"] for r in rows}
    assert all(r["sampling_seed"] == seeds[r["generation_id"]] for r in judged)
