"""Benchmark of the reward-model stages: every objective and the ensemble against every
trivial ranker, on the same pairs, with the CPU time of each stage; in one run.

On the seeded sample data (``reappreg.data.sample.generate_sample``, default 6 x 100 human
reappraisals, 3 raters each) it runs the library functions of the DVC stages exactly as
``dvc repro`` does, with the settings of a params file (default ``params.yaml``): one
``train_member`` per (objective, seed) of ``rm.trained()`` -- each encodes the pool itself,
as its stage does -- then ``build_ensemble`` + ``evaluate_ensemble``. It prints:

* per model: held-out and leave-one-vignette-out (LOVO) pairwise accuracy with the
  vignette-cluster interval, and (model - stronger length ranker) with its cluster interval;
* per trivial ranker (length chars/words, random, scenario-answer cosine, length regression)
  the same accuracies on the same pairs, and the length-controlled accuracy (pairs where
  the longer text is the worse one);
* per model, the gain over the length regression (least squares on length features,
  fitted on the training part) with its cluster interval;
* the CPU seconds of each stage (``time.process_time``: all threads of this process, so the
  figure does not depend on how busy the shared machine is) and their sum against the
  6-minute budget, plus the wall time for reference;
* fine-tuning the top encoder layers: seconds per epoch with the frozen layers' outputs
  cached once per text against the whole encoder run every epoch, and their ratio, both
  measured in this run on the same pool.

The sample is ``data.sample`` of the params file (``--seed`` and ``--per-vignette`` override
its seed and size).

    python benchmarks/rm_bench.py                       # the params.yaml recipe
    python benchmarks/rm_bench.py --set train.epochs=20 --set encoder.finetune_layers=1
    python benchmarks/rm_bench.py --per-vignette 30     # quicker
    python benchmarks/rm_bench.py --part finetune --finetune-layers 2   # the epoch timing only
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CPU_BUDGET_S = 360.0


def _override(settings_dict: dict, assignment: str) -> None:
    import yaml  # values as YAML: 20, 1.0e-3, [0, 1], true

    key, _, value = assignment.partition("=")
    node = settings_dict
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = yaml.safe_load(value)


def _fmt(value) -> str:
    return "  n/a" if value is None else f"{value:.3f}"


def _interval(fig: dict) -> str:
    return f"[{_fmt(fig.get('cluster_low'))}, {_fmt(fig.get('cluster_high'))}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override an rm.* setting (dotted, relative to rm), e.g. train.epochs=20")
    parser.add_argument("--per-vignette", type=int, default=None,
                        help="human reappraisals per vignette (default: data.sample of the params file)")
    parser.add_argument("--seed", type=int, default=None, help="sample-data seed (default: data.sample's)")
    parser.add_argument("--part", choices=("all", "models", "finetune"), default="all",
                        help="models: the reward models and rankers; finetune: the seconds-per-epoch comparison")
    parser.add_argument("--finetune-layers", type=int, default=None,
                        help="top layers fine-tuned in the epoch timing (default: rm.encoder.finetune_layers, or 1 if 0)")
    parser.add_argument("--finetune-epochs", type=int, default=2, help="epochs timed per mode (their mean is reported)")
    args = parser.parse_args()

    from reappreg.data.canonical import write_canonical
    from reappreg.guard.certified import CERTIFICATE_SCHEMA
    from reappreg.hashing import dvc_md5
    from reappreg.io import write_json
    from reappreg.rm.ensemble import build_ensemble, evaluate_ensemble
    from reappreg.rm.member import MemberPaths, train_member
    from reappreg.data.sample import generate_sample
    from reappreg.settings.data import SampleSettings
    from reappreg.settings.rm import RmSettings
    from reappreg.data.split import split

    import yaml

    # The rm and data.sample sections of the CPU profile (the top level of the params file),
    # validated by their schemas.
    params = yaml.safe_load(args.params.read_text(encoding="utf-8")) or {}
    rm = params.get("rm", {})
    for assignment in args.set:
        _override(rm, assignment)
    settings = RmSettings.model_validate(rm)
    sample = SampleSettings.model_validate((params.get("data") or {}).get("sample") or {})
    sample = sample.model_copy(update={k: v for k, v in (("seed", args.seed), ("reappraisals_per_vignette",
                                                                              args.per_vignette)) if v is not None})

    results: dict[str, dict] = {}
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train, _ = split(generate_sample(**sample.model_dump()), ["human"])
        write_canonical(train, root / "train")
        texts = {n: root / "train" / f"{n}.jsonl" for n in ("vignettes", "reappraisals")}
        md5s = {n: dvc_md5(p) for n, p in texts.items()}
        # The guard has nothing to check here (no held-out answers are involved): a passing
        # certificate for exactly these texts, in the form the training stages read.
        write_json(root / "certificate.json", {
            "schema": CERTIFICATE_SCHEMA, "result": "pass",
            "training": [{"path": str(p), "md5": md5s[n], "guarded_path": str(p), "guarded_md5": md5s[n]}
                         for n, p in texts.items()],
        })
        if args.part in ("all", "finetune"):
            epoch_table = _finetune_epochs(settings, texts, root / "train", args)
        if args.part == "finetune":
            _print_finetune(epoch_table, sample, args)
            return
        for objective, seed in settings.trained():
            stage = f"{objective}/seed_{seed}"
            c0, w0 = time.process_time(), time.perf_counter()
            result = train_member(objective=objective, seed=seed, settings=settings, paths=MemberPaths(
                vignettes=texts["vignettes"], reappraisals=texts["reappraisals"], ratings=root / "train" / "ratings.jsonl",
                certificate=root / "certificate.json", out_dir=root / "models" / objective / f"seed_{seed}",
                metrics_path=root / "metrics" / f"{objective}_seed_{seed}.json", plots_dir=root / "plots" / stage,
                work_dir=root / "work" / stage, meta=root / "train" / "meta.json",
            ))
            cpu[stage], wall[stage] = time.process_time() - c0, time.perf_counter() - w0
            results[stage] = result.metrics
            t = result.metrics["timing"]
            print(f"  {stage}: {cpu[stage]:.1f} s CPU (load {t['load_cpu_s']:.1f}, encode {t['encode_cpu_s']:.1f}, "
                  f"train+evaluate {t['cpu_s'] - t['load_cpu_s'] - t['encode_cpu_s']:.1f})", flush=True)
        objective = settings.ensemble.objective
        members = [root / "models" / objective / f"seed_{s}" for s in settings.seeds]
        c0, w0 = time.process_time(), time.perf_counter()
        build_ensemble(members, root / "ensemble", k=settings.ensemble.k, max_sentences=settings.ensemble.max_sentences,
                       format_penalty=settings.ensemble.format_penalty)
        ensemble, _ = evaluate_ensemble(members, k=settings.ensemble.k, pair_margin=settings.evaluation.pair_margin,
                                        bins=settings.evaluation.calibration_bins, plots_dir=root / "plots" / "ensemble",
                                        objective=objective, format_penalty=settings.ensemble.format_penalty)
        cpu["ensemble"], wall["ensemble"] = time.process_time() - c0, time.perf_counter() - w0
        results[f"{objective}/ensemble"] = {s: ensemble[s]["reward"] for s in ("holdout", "lovo") if s in ensemble}

    splits = [s for s in ("holdout", "lovo") if s in next(iter(results.values()))]
    print(f"\nreward models vs trivial rankers: sample seed {sample.seed}, {sample.reappraisals_per_vignette} texts "
          f"per vignette, length_tilt {sample.length_tilt:g}, "
          f"margin {settings.evaluation.pair_margin}, threads {settings.threads}, load average {os.getloadavg()[0]:.1f}")
    print("accuracy [vignette-cluster 95% CI]; diff = model - stronger length ranker on the same pairs\n")
    header = f"{'model':<24}" + "".join(f"  {s + ' acc':>9} {'CI':<16} {'diff':>6} {'diff CI':<16}" for s in splits)
    print(header)
    print("-" * len(header))
    for name, metrics in results.items():
        line = f"{name:<24}"
        for split in splits:
            m = metrics[split]
            vs = m["trivial_baselines"]["vs_length"]
            model = m["trivial_baselines"]["model"]
            line += f"  {_fmt(model['accuracy']):>9} {_interval(model):<16} {_fmt(vs['difference']):>6} {_interval(vs):<16}"
        print(line)
    reference = next(iter(results.values()))
    for name in reference[splits[0]]["trivial_baselines"]["rankers"]:
        line = f"{'baseline: ' + name:<24}"
        for split in splits:
            fig = reference[split]["trivial_baselines"]["rankers"][name]
            line += f"  {_fmt(fig['accuracy']):>9} {_interval(fig):<16} {'':>6} {'':<16}"
        print(line)

    print("\ngain over the length regression (model - length_regression on the same pairs) [vignette-cluster 95% CI]")
    for name, metrics in results.items():
        line = f"  {name:<24}"
        for split in splits:
            gain = metrics[split]["trivial_baselines"]["model_minus_ranker"]["length_regression"]
            line += f"  {split} {_fmt(gain['difference'])} {_interval(gain):<16}"
        print(line)

    print("\nlength-controlled (LOVO): accuracy on pairs where the longer text is the worse one")
    for name, metrics in results.items():
        lw = metrics[splits[-1]]["trivial_baselines"]["longer_is_worse"]
        print(f"  {name:<24} {_fmt(lw['model']['accuracy'])} {_interval(lw['model'])}  "
              f"(length_chars {_fmt(lw['length_chars']['accuracy'])}; {lw['model']['n_pairs']} pairs, "
              f"{lw['model']['n_vignettes']} vignettes)")
    gate = ensemble["beats_length_baseline"]
    print(f"\nbeats_length_baseline (ensemble, LOVO): {'PASS' if gate['passed'] else 'FAIL'} -- "
          f"diff {_fmt(gate.get('difference'))} vs {gate.get('ranker')}, cluster low {_fmt(gate.get('cluster_low'))}")
    total = sum(cpu.values())
    print(f"\nCPU seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
    print(f"all RM stages: {total:.1f} s CPU ({total / CPU_BUDGET_S:.2f} of the {CPU_BUDGET_S:.0f} s budget), "
          f"{sum(wall.values()):.1f} s wall")
    if args.part == "all":
        _print_finetune(epoch_table, sample, args)


def _finetune_epochs(settings, texts: dict[str, Path], train_dir: Path, args) -> list[dict]:
    """Seconds per fine-tuning epoch of the ensemble objective on the whole pool, with and
    without the frozen-layer cache (same pool, params and seed; the cache pass is timed apart)."""
    from reappreg.rm.dataset import load_pool
    from reappreg.rm.encoder import TextEncoder, resolve_encoder
    from reappreg.rm.model import MemberTrainer, deterministic_torch
    from reappreg.rm.objectives.classes import make_objective

    layers = args.finetune_layers or settings.encoder.finetune_layers or 1
    enc = settings.encoder
    timed = settings.model_copy(update={
        "encoder": enc.model_copy(update={"finetune_layers": layers}),
        "train": settings.train.model_copy(update={"epochs": args.finetune_epochs}),
    })
    pool = load_pool(texts["vignettes"], texts["reappraisals"], train_dir / "ratings.jsonl", train_dir / "meta.json")
    rows = []
    with deterministic_torch(settings.threads), tempfile.TemporaryDirectory() as work:
        for cached in (False, True):
            encoder = TextEncoder(resolve_encoder(enc.path), enc.pooling, enc.max_length, enc.device, layers, enc.dtype)
            objective = make_objective(settings.ensemble.objective, timed, pool.dimensions)
            c0, w0 = time.process_time(), time.perf_counter()
            trainer = MemberTrainer(pool=pool, encoder=encoder, objective=objective, seed=0, settings=timed,
                                    cache_frozen_layers=cached)
            setup_cpu, setup_wall = time.process_time() - c0, time.perf_counter() - w0
            c0, w0 = time.process_time(), time.perf_counter()
            trainer.fit("final", pool.ratings, Path(work) / str(cached), "timing")
            rows.append({"mode": "frozen layers cached" if cached else "whole encoder every epoch",
                         "setup_cpu": setup_cpu, "setup_wall": setup_wall,
                         "epoch_cpu": (time.process_time() - c0) / args.finetune_epochs,
                         "epoch_wall": (time.perf_counter() - w0) / args.finetune_epochs,
                         "layers": layers, "texts": len(pool.items)})
            print(f"  fine-tune timing ({rows[-1]['mode']}): {rows[-1]['epoch_cpu']:.1f} s CPU per epoch", flush=True)
    return rows


def _print_finetune(rows: list[dict], sample, args) -> None:
    uncached, cached = rows
    print(f"\nfine-tuning the top {cached['layers']} encoder layer(s): seconds per epoch on {cached['texts']} texts "
          f"(sample seed {sample.seed}), mean of {args.finetune_epochs} epochs, measured in this run")
    print(f"  {'mode':<28} {'setup CPU s':>11} {'epoch CPU s':>11} {'epoch wall s':>12}")
    for row in rows:
        print(f"  {row['mode']:<28} {row['setup_cpu']:>11.1f} {row['epoch_cpu']:>11.1f} {row['epoch_wall']:>12.1f}")
    print(f"  speed-up per epoch (uncached / cached): {uncached['epoch_cpu'] / cached['epoch_cpu']:.1f}x CPU, "
          f"{uncached['epoch_wall'] / cached['epoch_wall']:.1f}x wall; the cache pass costs "
          f"{cached['setup_cpu']:.1f} s CPU once per stage")


if __name__ == "__main__":
    main()
