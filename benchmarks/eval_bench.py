"""Eval speed: policy generation (sequences/s, tokens/s) and judge throughput (prompts/s).

    python benchmarks/eval_bench.py                          # models/policy/base on CPU
    python benchmarks/eval_bench.py --model PATH --device cuda

Generation runs the transformers backend exactly as the generate stage does (per-row
seeded sampling) at two batch sizes, on the GRPO prompt for the sample vignettes; the
judge runs the transformers judge (no cache) on both orders of synthetic contests. Model
loading is timed separately. Prints a table; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO / "models" / "policy" / "base"))
    parser.add_argument("--prompt-file", default=str(REPO / "pipelines" / "prompts" / "grpo_prompt.yaml"))
    parser.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    parser.add_argument("--sequences", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--batch-sizes", default="1,12")
    parser.add_argument("--judge-prompts", type=int, default=16)
    parser.add_argument("--judge-max-new-tokens", type=int, default=16)
    args = parser.parse_args()

    import torch

    from reappreg import vignettes as bank
    from reappreg.generate import GenerationConfig, TransformersGenerator, generate_evaluations
    from reappreg.judge import JudgeSampling, TransformersJudge, build_judge_messages

    if not (Path(args.model) / "config.json").exists():
        sys.exit(f"{args.model}: no model folder; run `dvc repro policy_base` or pass --model")
    vignettes = [{"vignette_id": v["vignette_id"], "scenario": v["scenario"]} for v in bank.VIGNETTES]
    per_vignette = max(1, args.sequences // len(vignettes))
    config = GenerationConfig(evals=1, samples_per_vignette=per_vignette, max_new_tokens=args.max_new_tokens)
    rows_out = []
    print(f"torch threads: {torch.get_num_threads()}, device: {args.device or 'auto'}, model: {args.model}")

    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        gen = TransformersGenerator(args.model, config, batch_size=batch_size, device=args.device)
        started = time.perf_counter()
        gen._load_model()
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        rows = generate_evaluations(vignettes, gen, config, template=args.prompt_file)
        seconds = time.perf_counter() - started
        tokens = sum(r["n_tokens"] for r in rows)
        rows_out.append((f"generate batch={batch_size}", len(rows), seconds, len(rows) / seconds,
                         tokens / seconds, load_s))

    judge = TransformersJudge(args.model, JudgeSampling(max_new_tokens=args.judge_max_new_tokens),
                              batch_size=8, device=args.device)
    started = time.perf_counter()
    judge._load()
    load_s = time.perf_counter() - started
    prompts = []
    for i in range(args.judge_prompts):
        v = bank.VIGNETTES[i % len(bank.VIGNETTES)]
        a, b = v["alternatives"][0], v["heldout_alternatives"][1]
        prompts.append(build_judge_messages(v["scenario"], *((a, b) if i % 2 else (b, a))))
    started = time.perf_counter()
    judge.complete(prompts)
    seconds = time.perf_counter() - started
    rows_out.append(("judge batch=8", len(prompts), seconds, len(prompts) / seconds, float("nan"), load_s))

    print(f"{'what':<22}{'items':>7}{'seconds':>10}{'items/s':>10}{'tokens/s':>10}{'load s':>9}")
    for name, n, seconds, rate, tps, load_s in rows_out:
        print(f"{name:<22}{n:>7}{seconds:>10.1f}{rate:>10.2f}{tps:>10.1f}{load_s:>9.1f}")


if __name__ == "__main__":
    main()
