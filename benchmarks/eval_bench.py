"""Eval speed: policy generation (sequences/s, tokens/s) and judge throughput (prompts/s).

    python benchmarks/eval_bench.py                          # models/policy/base on CPU
    python benchmarks/eval_bench.py --model PATH --device cuda
    python benchmarks/eval_bench.py --stats-only             # statistics only (no model)

Generation runs the transformers backend exactly as the generate stage does (per-row
seeded sampling) at two batch sizes, on the GRPO prompt for the sample vignettes; the
judge runs the transformers judge (no cache) on both orders of synthetic contests. Model
loading is timed separately. The judge's logprob verdict (one forward pass) is timed against
free-text generation of --judge-max-new-tokens with the same model and prompts; the ratio
comes from the one run. The statistics part times ``reappreg.stats.analyze`` on planted
judgments of growing size and the claim rule's vectorised simulation against a per-dataset
loop (the ratio is what keeps the >= 500-dataset calibration test fast). Prints tables;
nothing is asserted.
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
    parser.add_argument("--stats-only", action="store_true", help="only the statistics benchmark")
    parser.add_argument("--stats-sizes", default="240,720,2160", help="contests per planted judgments file")
    parser.add_argument("--stats-datasets", type=int, default=2000, help="simulated datasets for the claim rule")
    args = parser.parse_args()
    if args.stats_only:
        stats_bench(args)
        return

    import torch

    from reappreg.data import vignettes as bank
    from reappreg.eval.generate import (
        TransformersGenerator,
        generate_evaluations,
    )
    from reappreg.judge import TransformersJudge, load_judge_prompt, verdict_labels
    from reappreg.lm import resolve_model
    from reappreg.settings.generate import GenerateSettings

    resolve_model(args.model, "--model")  # a folder, .gguf or pkg:<package>/<file>.gguf
    vignettes = [{"vignette_id": v["vignette_id"], "scenario": v["scenario"]} for v in bank.VIGNETTES]
    per_vignette = max(1, args.sequences // len(vignettes))
    config = GenerateSettings(evals=1, samples_per_vignette=per_vignette, max_new_tokens=args.max_new_tokens)
    rows_out = []
    print(f"torch threads: {torch.get_num_threads()}, device: {args.device or 'auto'}, model: {args.model}")

    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        gen = TransformersGenerator(args.model, config.model_copy(update={"batch_size": batch_size}),
                                    device=args.device)
        started = time.perf_counter()
        gen._load_model()
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        rows = generate_evaluations(vignettes, gen, config, template=args.prompt_file)
        seconds = time.perf_counter() - started
        tokens = sum(r["n_tokens"] for r in rows)
        rows_out.append((f"generate batch={batch_size}", len(rows), seconds, len(rows) / seconds,
                         tokens / seconds, load_s))

    # The judge: a logprob verdict (one forward pass, the stage's method) against free-text
    # generation of judge_max_new_tokens with the same loaded model, on the same prompts.
    from reappreg.judge.parse import parse_verdict
    from reappreg.settings.judge import JudgeSettings

    prompt = load_judge_prompt(REPO / "pipelines" / "prompts" / "judge_prompt.yaml")
    judge = TransformersJudge(JudgeSettings(model=args.model, batch_size=8, cache_dir=None), args.model,
                              verdict_labels(True), device=args.device)
    started = time.perf_counter()
    tokenizer, model, device, _ = judge._load()
    load_s = time.perf_counter() - started
    prompts = []
    for i in range(args.judge_prompts):
        v = bank.VIGNETTES[i % len(bank.VIGNETTES)]
        a, b = v["alternatives"][0], v["heldout_alternatives"][1]
        prompts.append(prompt.messages(v["scenario"], *((a, b) if i % 2 else (b, a)), judge.labels))
    started = time.perf_counter()
    results = judge.complete(prompts)
    logprob_s = time.perf_counter() - started
    unparseable = sum(r.verdict == "unparseable" for r in results)
    rows_out.append((f"judge logprob (unp {unparseable})", len(prompts), logprob_s, len(prompts) / logprob_s,
                     float("nan"), load_s))
    started = time.perf_counter()
    texts = []
    for start in range(0, len(prompts), 8):
        enc = tokenizer.apply_chat_template(prompts[start : start + 8], add_generation_prompt=True,
                                            return_tensors="pt", padding=True, return_dict=True).to(device)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=args.judge_max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        texts += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    free_s = time.perf_counter() - started
    unparseable = sum(parse_verdict(t) == "unparseable" for t in texts)
    rows_out.append((f"judge free text (unp {unparseable})", len(prompts), free_s, len(prompts) / free_s,
                     float("nan"), load_s))
    print(f"judge: free-text / logprob time ratio {free_s / logprob_s:.2f} (measured in this run)")

    print(f"{'what':<22}{'items':>7}{'seconds':>10}{'items/s':>10}{'tokens/s':>10}{'load s':>9}")
    for name, n, seconds, rate, tps, load_s in rows_out:
        print(f"{name:<22}{n:>7}{seconds:>10.1f}{rate:>10.2f}{tps:>10.1f}{load_s:>9.1f}")


def _planted(n_contests: int, rng) -> list[dict]:
    """Both orders of n_contests contests over 6 vignettes, 2 opponent answers per generation."""
    rows = []
    lengths = rng.integers(80, 300, size=n_contests)
    for c in range(n_contests):
        v, g = c % 6, c // 12     # each generation meets 2 opponent answers
        won = rng.random() < 0.75
        for order in ("policy_first", "policy_second"):
            mine = "A" if order == "policy_first" else "B"
            verdict = mine if won else ("B" if mine == "A" else "A")
            p_mine = 0.8 if won else 0.2
            p_a = p_mine if mine == "A" else 1 - p_mine
            rows.append({
                "contest_id": f"c{c}", "generation_id": f"v{v}-g{g}", "vignette_id": f"v{v}", "eval_k": g % 3,
                "opponent_source": "gpt-4-0314", "opponent_answer_id": f"a{v}-{c % 12 // 6}-{g}", "order": order,
                "verdict": verdict, "policy_score": float(won), "judge_model": "bench", "selection": "none",
                "p_a": p_a, "p_b": 1 - p_a, "p_tie": 0.0, "verdict_method": "logprob", "judge_fingerprint": "bench",
                "sampling_seed": 10 * g + v, "policy_chars": int(lengths[g]), "opponent_chars": 200,
            })
    return rows


def stats_bench(args) -> None:
    import numpy as np

    from reappreg.settings.stats import StatsSettings
    from reappreg.stats import (
        Design,
        ReferenceBar,
        TrustPolicy,
        analyze,
        design_bounds,
        validate_judgments,
    )

    settings = StatsSettings()
    reference = ReferenceBar(bar=0.608, opponent="gpt-4-0314", source="benchmark")
    policy = TrustPolicy(max_position_bias=0.2, max_unparseable_rate=0.05, min_agreement_floor=0.65,
                         min_pairs_floor=16)
    calibration = {"judge_model": "bench", "judge_fingerprint": "bench", "n_pairs": 240, "agreement": 0.9,
                   "agreement_low": 0.86, "agreement_high": 0.93, "position_bias_A": 0.03, "position_bias_B": 0.03,
                   "order_consistency": 0.94, "unparseable_rate": 0.0, "min_agreement": 0.65, "min_pairs": 16,
                   "trusted": True}
    rng = np.random.default_rng(0)
    print(f"stats.analyze (bootstrap {settings.bootstrap_iterations}, LC bootstrap {settings.lc_bootstrap_iterations})")
    print(f"{'contests':>9}{'orders':>8}{'validate s':>12}{'analyze s':>11}{'contests/s':>12}")
    for n in (int(x) for x in args.stats_sizes.split(",")):
        rows = _planted(n, rng)
        started = time.perf_counter()
        frame = validate_judgments(rows)
        validate_s = time.perf_counter() - started
        started = time.perf_counter()
        analyze(frame, calibration, settings=settings, reference=reference, trust_policy=policy)
        seconds = time.perf_counter() - started
        print(f"{n:>9}{2 * n:>8}{validate_s:>12.2f}{seconds:>11.2f}{n / seconds:>12.0f}")

    d = args.stats_datasets
    vig = np.repeat(np.arange(6), 40)
    gen = np.repeat(np.arange(120), 2)
    design = Design.of(vig, gen)
    y = (rng.random((d, len(vig))) < 0.608).astype(float)
    started = time.perf_counter()
    design_bounds(y, design, 0.95)
    vectorised = time.perf_counter() - started
    loop_n = min(d, 200)
    started = time.perf_counter()
    for row in y[:loop_n]:
        design_bounds(row[None, :], design, 0.95)
    loop = (time.perf_counter() - started) * d / loop_n
    print(f"\nclaim rule on {d} simulated datasets of 240 contests")
    print(f"{'how':<26}{'seconds':>10}{'datasets/s':>12}{'ratio':>8}")
    print(f"{'per-dataset loop (est.)':<26}{loop:>10.2f}{d / loop:>12.0f}{1.0:>8.1f}")
    print(f"{'vectorised':<26}{vectorised:>10.2f}{d / vectorised:>12.0f}{loop / vectorised:>8.1f}")


if __name__ == "__main__":
    main()
