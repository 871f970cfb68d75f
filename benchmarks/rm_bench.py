"""Benchmark of the reward models: examples/s for encoding, training and scoring.

On the seeded sample data (``reappreg.sample.generate_sample``, default 6 x 100 human
reappraisals, 3 raters each) with the default ``RmSettings`` (= params.yaml), it measures:

* encoding: (scenario, answer) pairs/s through the frozen encoder (the per-stage cache);
* head training per objective: examples x epochs / s on the cached features (one run of
  the stage; a stage does 1 holdout + 6 leave-one-vignette-out + 1 final run);
* fine-tuning the top ``--finetune-layers`` encoder layers: examples/s of one epoch on a
  ``--finetune-examples`` subset (the optional, slow path);
* ensemble scoring: answers/s of ``RewardEnsemble.score`` (encoder + 3 heads + format gate),
  which is what GRPO calls on every batch of completions.

    python benchmarks/rm_bench.py
    python benchmarks/rm_bench.py --per-vignette 30 --finetune-layers 0   # quicker
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-vignette", type=int, default=100, help="human reappraisals per vignette")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--finetune-layers", type=int, default=1, help="0 skips the fine-tuning measurement")
    parser.add_argument("--finetune-examples", type=int, default=96)
    parser.add_argument("--score-answers", type=int, default=256)
    args = parser.parse_args()

    import numpy as np
    import torch

    from reappreg.sample import generate_sample
    from reappreg.rm.dataset import load_pool
    from reappreg.rm.encoder import TextEncoder, resolve_encoder
    from reappreg.rm.ensemble import build_ensemble, load_ensemble
    from reappreg.rm.model import MemberTrainer, make_head, output_dim
    from reappreg.settings.rm import RmSettings
    from reappreg.split import split, write_split

    settings = RmSettings()
    rows: list[tuple[str, str, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train, answers = split(generate_sample(seed=args.seed, reappraisals_per_vignette=args.per_vignette), ["human"])
        write_split(train, answers, root / "train", root / "heldout.jsonl")
        pool = load_pool(root / "train" / "vignettes.jsonl", root / "train" / "reappraisals.jsonl", root / "train" / "ratings.jsonl")
        n = len(pool.items)
        enc = settings.encoder
        t0 = time.perf_counter()
        encoder = TextEncoder(resolve_encoder(enc.path), enc.pooling, enc.max_length, enc.device)
        rows.append(("load encoder", "-", time.perf_counter() - t0, "s"))

        t0 = time.perf_counter()
        features = encoder.embed(pool.scenarios, pool.texts, enc.batch_size)
        elapsed = time.perf_counter() - t0
        rows.append(("encode pool (frozen)", f"{n} pairs", n / elapsed, f"pairs/s ({elapsed:.1f} s)"))

        class Cached:  # the trainer's frozen-encoder path with the features computed above
            trainable_names: list = []
            dim = encoder.dim
            device = encoder.device

            def delta_state(self):
                return {}

            def load_delta(self, state):
                pass

            def embed(self, *a, **k):
                return features

        members = []
        for objective in ("bt", "regression", "multidim"):
            trainer = MemberTrainer(pool=pool, encoder=Cached(), objective=objective, seed=0, train=settings.train,
                                    encoder_batch_size=enc.batch_size, bt_margin=settings.bt.pair_margin,
                                    bt_batch_size=settings.bt.pair_batch_size, weights=settings.multidim.weights)
            t0 = time.perf_counter()
            fitted = trainer.fit("bench", pool.ratings, root / "work" / objective, "bench")
            elapsed = time.perf_counter() - t0
            total = fitted.n_train_examples * fitted.epochs
            unit = "pairs" if objective == "bt" else "texts"
            rows.append((f"train head: {objective}", f"{fitted.n_train_examples} {unit} x {fitted.epochs} ep",
                         total / elapsed, f"{unit}/s ({elapsed:.1f} s per run)"))

        # Three multidim members for the ensemble (heads only; same encoder).
        from reappreg.io import write_json
        from reappreg.hashing import dvc_md5
        from safetensors.torch import save_file

        for seed in (0, 1, 2):
            trainer = MemberTrainer(pool=pool, encoder=Cached(), objective="multidim", seed=seed, train=settings.train,
                                    encoder_batch_size=enc.batch_size, bt_margin=settings.bt.pair_margin,
                                    bt_batch_size=settings.bt.pair_batch_size, weights=settings.multidim.weights)
            fitted = trainer.fit("bench", pool.ratings, root / "work" / f"m{seed}", "bench")
            folder = root / "members" / f"seed_{seed}"
            folder.mkdir(parents=True)
            save_file(fitted.head_state, str(folder / "head.safetensors"))
            write_json(folder / "rm_config.json", {
                "format": "reappreg-rm-member/1", "objective": "multidim", "seed": seed, "score_units": "bench",
                "encoder": {"spec": enc.path, "pooling": enc.pooling, "max_length": enc.max_length,
                            "md5": dvc_md5(resolve_encoder(enc.path).path), "dim": encoder.dim, "dtype": enc.dtype},
                "head": {"hidden": settings.train.hidden, "dropout": settings.train.dropout, "out": output_dim("multidim")},
                "score_map": fitted.score_map.to_json(),
            })
            members.append(folder)
        build_ensemble(members, root / "ensemble", k=0.5, max_sentences=2, format_penalty=-1.0)
        ensemble = load_ensemble(root / "ensemble")
        take = np.resize(np.arange(n), args.score_answers)
        scenarios = [pool.scenarios[i] for i in take]
        # Policy answers are one or two sentences: score the first two sentences of each text.
        texts = [" ".join(pool.texts[i].split(". ")[:2]) for i in take]
        ensemble.score(scenarios[:8], texts[:8])  # warm-up
        t0 = time.perf_counter()
        ensemble.score(scenarios, texts)
        elapsed = time.perf_counter() - t0
        rows.append(("ensemble.score (3 seeds + gate)", f"{len(texts)} answers", len(texts) / elapsed,
                     f"answers/s ({elapsed:.1f} s)"))

        if args.finetune_layers:
            tuned = TextEncoder(resolve_encoder(enc.path), enc.pooling, enc.max_length, enc.device,
                                finetune_layers=args.finetune_layers)
            head = make_head(tuned.dim, settings.train.hidden, 4, settings.train.dropout)
            optimizer = torch.optim.AdamW([*head.parameters(), *tuned.trainable_parameters()], lr=1e-5)
            subset = list(range(min(args.finetune_examples, n)))
            t0 = time.perf_counter()
            for start in range(0, len(subset), settings.train.batch_size):
                batch = subset[start : start + settings.train.batch_size]
                out = head(tuned.features([pool.scenarios[i] for i in batch], [pool.texts[i] for i in batch]))
                loss = out.pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            elapsed = time.perf_counter() - t0
            per_epoch = n * 0.8 / (len(subset) / elapsed)
            rows.append((f"fine-tune top {args.finetune_layers} layer(s)", f"{len(subset)} texts", len(subset) / elapsed,
                         f"texts/s (~{per_epoch:.0f} s per epoch of the holdout run)"))

    print(f"\nreward-model benchmark: {n} rated reappraisals, torch threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'size':<26}  {'rate':>10}  unit")
    print(f"{'-' * width}  {'-' * 26}  {'-' * 10}  {'-' * 30}")
    for name, size, rate, unit in rows:
        print(f"{name:<{width}}  {size:<26}  {rate:>10.1f}  {unit}")


if __name__ == "__main__":
    main()
