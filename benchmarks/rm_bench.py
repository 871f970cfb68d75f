"""Benchmark of the reward-model stages: the two-part model (the params recipe) against every
trivial rival, next to its residual part and every baseline objective, on the same pairs, with
the CPU time of each stage; on the sample data and on imported real ratings; in one run.

Each data set is prepared as the pipeline prepares it -- the seeded sample
(``reappreg.data.sample.generate_sample`` with the params file's ``data.sample``), or a real
export read by the project's own importer (``reappreg.data.ingest`` with the ``data`` and
``split`` params of a params file; ``--data expert`` is ``tests/fixtures/expert_ratings``) --
then split into the training pool, and the library functions of the DVC stages run on it
exactly as ``dvc repro`` does, with the ``rm`` settings of a params file (default
``params.yaml``): one ``train_member`` per (objective, seed) of ``rm.trained()`` -- each encodes
the pool itself, as its stage does -- then ``build_ensemble`` + ``evaluate_ensemble``. For each
data set it prints, on leave-one-vignette-out (LOVO) pairs (held-out pairs without LOVO):

* one row per model -- the two-part ranking model, its residual part (the GRPO reward), each
  baseline objective's seeds -- with its accuracy and both intervals (Wilson, vignette-cluster),
  its strongest trivial rival and the paired difference with its cluster interval, the gain
  over the length regression, the accuracy on the pairs where the longer text is the worse
  one, and the CPU seconds of the stages behind it;
* the two-part model minus each trivial ranker, one row each, with the cluster interval;
* the ``beats_length_baseline`` verdict, and the number of variants this run tried beside the
  best of them: the recipe was fixed in params before the run, so its row is a measurement;
  the best of N rows is a search, optimistic by the spread of N noisy figures;
* with ``--finetune-variant N``: the two-part recipe again with the top N encoder layers
  fine-tuned (frozen layers' outputs cached), its rows beside the frozen ones on the same
  pairs and its CPU time -- a benchmark row, never the default;
* the CPU seconds of each stage (``time.process_time``: all threads of this process, so the
  figure does not depend on how busy the shared machine is) and their sum against the
  6-minute budget, plus the wall time for reference;
* fine-tuning's cost per epoch: seconds per epoch with the frozen layers' outputs cached once
  per text against the whole encoder run every epoch, measured in this run on the same pool.

    python benchmarks/rm_bench.py                                  # sample data, the params.yaml recipe
    python benchmarks/rm_bench.py --data sample --data expert      # and the expert-rated fixture
    python benchmarks/rm_bench.py --data-params my_import.yaml     # a real export (its data/split params)
    python benchmarks/rm_bench.py --data expert --finetune-variant 1   # + the recipe with the top layer fine-tuned
    python benchmarks/rm_bench.py --set train.epochs=20 --per-vignette 30
    python benchmarks/rm_bench.py --part finetune --finetune-layers 2  # the epoch timing only
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CPU_BUDGET_S = 360.0
REPO = Path(__file__).resolve().parents[1]
EXPERT = REPO / "tests" / "fixtures" / "expert_ratings"
# The expert-rated fixture's data facts, as tests/data/test_split.py imports it (only params change).
EXPERT_PARAMS = {
    "data": {"source": "file", "path": str(EXPERT / "ratings.csv"), "dimensions": ["effectiveness", "empathy"],
             "rating_scale": {"min": 1, "max": 5, "kind": "continuous"},
             "rated_sources": ["human", "gpt-3.5-turbo", "llama-2-70b-chat"], "duplicate_ratings": "drop_identical"},
    "split": {"train_sources": ["human", "gpt-3.5-turbo", "llama-2-70b-chat"]},
}


def _override(settings_dict: dict, assignment: str) -> None:
    import yaml  # values as YAML: 20, 1.0e-3, [0, 1], true

    key, _, value = assignment.partition("=")
    node = settings_dict
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = yaml.safe_load(value)


def _fmt(value, width: int = 0) -> str:
    text = "n/a" if value is None else f"{value:.3f}"
    return f"{text:>{width}}" if width else text


def _interval(fig: dict, kind: str = "cluster") -> str:
    return f"[{_fmt(fig.get(f'{kind}_low'))}, {_fmt(fig.get(f'{kind}_high'))}]"


# ---------------------------------------------------------------------- data sets


def _certify(root: Path, train: Path) -> dict[str, Path]:
    """The guard has nothing to check here (no held-out answers are involved): a passing
    certificate for exactly these texts, in the form the training stages read."""
    from reappreg.guard.certified import CERTIFICATE_SCHEMA
    from reappreg.hashing import dvc_md5
    from reappreg.io import write_json

    texts = {n: train / f"{n}.jsonl" for n in ("vignettes", "reappraisals")}
    md5s = {n: dvc_md5(p) for n, p in texts.items()}
    write_json(root / "certificate.json", {
        "schema": CERTIFICATE_SCHEMA, "result": "pass",
        "training": [{"path": str(p), "md5": md5s[n], "guarded_path": str(p), "guarded_md5": md5s[n]}
                     for n, p in texts.items()],
    })
    return {**texts, "ratings": train / "ratings.jsonl", "meta": train / "meta.json", "certificate": root / "certificate.json"}


def prepare(dataset: str, params: dict, root: Path, args) -> tuple[str, dict[str, Path]]:
    """(label, training files) of one data set, as ingest and split leave it."""
    import yaml

    from reappreg.data.canonical import write_canonical
    from reappreg.data.ingest import ingest
    from reappreg.data.split import split
    from reappreg.settings.data import DataSettings, SampleSettings
    from reappreg.settings.split import SplitSettings

    if dataset == "sample":
        sample = SampleSettings.model_validate((params.get("data") or {}).get("sample") or {})
        sample = sample.model_copy(update={k: v for k, v in (("seed", args.seed), ("reappraisals_per_vignette",
                                                                                  args.per_vignette)) if v is not None})
        data = DataSettings.model_validate({**(params.get("data") or {}), "source": "sample", "path": None,
                                            "sample": sample.model_dump()})
        split_settings = SplitSettings.model_validate(params.get("split") or {})
        label = (f"sample data (seed {sample.seed}, {sample.reappraisals_per_vignette} texts per vignette, "
                 f"length_tilt {sample.length_tilt:g})")
    else:
        spec = EXPERT_PARAMS if dataset == "expert" else yaml.safe_load(Path(dataset).read_text(encoding="utf-8"))
        data = DataSettings.model_validate(spec["data"])
        split_settings = SplitSettings.model_validate(spec.get("split") or {})
        label = ("expert-rated fixture (tests/fixtures/expert_ratings, imported by the project's importer)"
                 if dataset == "expert" else f"imported ratings ({Path(data.path).name}, params {Path(dataset).name})")
    train, _ = split(ingest(data), split_settings.train_sources)
    write_canonical(train, root / "train")
    return label, _certify(root, root / "train")


# ---------------------------------------------------------------------- one recipe


def run_recipe(name: str, settings, files: dict[str, Path], root: Path) -> dict:
    """Every (objective, seed) of ``settings.trained()`` and the ensemble of ``rm.seeds``: the
    metrics of each model, and the CPU and wall seconds of each stage."""
    from reappreg.rm.ensemble import build_ensemble, evaluate_ensemble
    from reappreg.rm.member import MemberPaths, train_member

    out = {"name": name, "members": {}, "cpu": {}, "wall": {}}
    for objective, seed in settings.trained():
        stage = f"{objective}/seed_{seed}"
        c0, w0 = time.process_time(), time.perf_counter()
        result = train_member(objective=objective, seed=seed, settings=settings, paths=MemberPaths(
            vignettes=files["vignettes"], reappraisals=files["reappraisals"], ratings=files["ratings"],
            certificate=files["certificate"], out_dir=root / "models" / objective / f"seed_{seed}",
            metrics_path=root / "metrics" / f"{objective}_seed_{seed}.json", plots_dir=root / "plots" / stage,
            work_dir=root / "work" / stage, meta=files["meta"],
        ))
        out["cpu"][stage], out["wall"][stage] = time.process_time() - c0, time.perf_counter() - w0
        out["members"][stage] = result.metrics
        print(f"  [{name}] {stage}: {out['cpu'][stage]:.1f} s CPU", flush=True)
    objective = settings.ensemble.objective
    members = [root / "models" / objective / f"seed_{s}" for s in settings.seeds]
    c0, w0 = time.process_time(), time.perf_counter()
    e = settings.ensemble
    build_ensemble(members, root / "ensemble", k=e.k, max_sentences=e.max_sentences, format_penalty=e.format_penalty)
    out["ensemble"], _ = evaluate_ensemble(members, k=e.k, pair_margin=settings.evaluation.pair_margin,
                                           bins=settings.evaluation.calibration_bins, plots_dir=root / "plots" / "ensemble",
                                           objective=objective, format_penalty=e.format_penalty,
                                           min_pairs=settings.evaluation.min_pairs)
    out["cpu"]["ensemble"], out["wall"]["ensemble"] = time.process_time() - c0, time.perf_counter() - w0
    return out


def rows_of(run: dict, split: str, settings) -> list[dict]:
    """One row per model a reader could have shipped: the ranking model, its reward part (when it has
    one) and each baseline seed; CPU seconds of the stages behind each."""
    ensemble, objective = run["ensemble"], settings.ensemble.objective
    member_cpu = sum(v for k, v in run["cpu"].items() if k.startswith(f"{objective}/"))
    rows = []
    if split in ensemble:
        two = ensemble["two_part"]["enabled"]
        rows.append({"model": f"{run['name']}: {'two-part' if two else objective + ' ensemble'}",
                     "comparison": ensemble[split]["ranking"]["trivial_baselines"],
                     "cpu": member_cpu + run["cpu"]["ensemble"]})
        if two:
            rows.append({"model": f"{run['name']}: residual part (reward)",
                         "comparison": ensemble[split]["residual"]["trivial_baselines"],
                         "cpu": member_cpu + run["cpu"]["ensemble"]})
    for stage, metrics in run["members"].items():
        if not stage.startswith(f"{objective}/") and split in metrics:
            rows.append({"model": f"{run['name']}: {stage}", "comparison": metrics[split]["trivial_baselines"],
                         "cpu": run["cpu"][stage]})
    return rows


def report(label: str, runs: list[dict], settings) -> None:
    first = runs[0]
    split = "lovo" if "lovo" in first["ensemble"] else "holdout"
    where = "leave-one-vignette-out" if split == "lovo" else "held-out"
    rows = [row for run in runs for row in rows_of(run, split, settings)]
    width = max(40, *(len(row["model"]) for row in rows))
    print(f"\n=== {label}: {where} pairs, margin {settings.evaluation.pair_margin}, threads {settings.threads}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("accuracy [Wilson] [vignette-cluster 95% CI]; rival = the strongest trivial ranker on the same pairs; "
          "diff = model - rival [cluster CI]; vs regression = model - length_regression [cluster CI]; "
          "longer worse = accuracy where the longer text is the worse one [cluster CI]\n")
    header = (f"{'model':<{width}} {'acc':>6} {'Wilson':<16} {'cluster':<16} {'rival':<22} {'diff':>6} {'diff CI':<16} "
              f"{'vs regr.':>8} {'CI':<16} {'longer worse':>12} {'CI':<16} {'pairs':>6} {'vign.':>5} {'CPU s':>7}")
    print(header)
    print("-" * len(header))
    for row in rows:
        c = row["comparison"]
        vs, regression, lw = c["vs_rival"], c["model_minus_ranker"]["length_regression"], c["longer_is_worse"]["model"]
        print(f"{row['model']:<{width}} {_fmt(c['model']['accuracy'], 6)} {_interval(c['model'], 'wilson'):<16} "
              f"{_interval(c['model']):<16} {vs['ranker'] + ' ' + _fmt(vs['rival_accuracy']):<22} "
              f"{_fmt(vs['difference'], 6)} {_interval(vs):<16} {_fmt(regression['difference'], 8)} "
              f"{_interval(regression):<16} {_fmt(lw['accuracy'], 12)} {_interval(lw):<16} {c['model']['n_pairs']:>6} "
              f"{c['model']['n_vignettes']:>5} {row['cpu']:>7.1f}")
    for name, fig in first["ensemble"][split]["ranking"]["trivial_baselines"]["rankers"].items():
        print(f"{'baseline: ' + name:<{width}} {_fmt(fig['accuracy'], 6)} {_interval(fig, 'wilson'):<16} {_interval(fig):<16}")
    for run in runs:
        if not run["ensemble"]["two_part"]["enabled"] or split not in run["ensemble"]:
            continue
        ranking = run["ensemble"][split]["ranking"]["trivial_baselines"]
        print(f"\n{run['name']}: two-part model minus each trivial ranker on the same pairs [vignette-cluster 95% CI]")
        for name, diff in ranking["model_minus_ranker"].items():
            note = f" ({diff['too_few_pairs']})" if diff.get("too_few_pairs") else ""
            print(f"  - {name:<24} {_fmt(diff['difference'], 7)} {_interval(diff)}{note}")
        weights = run["ensemble"][split].get("weights", {})
        if weights:
            values = [w["weight"] for w in weights.values()]
            print(f"  weight of the residual part per {where} fold (fitted inside each training fold): "
                  f"{min(values):.3f} to {max(values):.3f} over {len(values)} folds; shipped "
                  f"{_fmt(run['ensemble']['two_part']['weight'])}")
        gate = run["ensemble"]["beats_length_baseline"]
        reward = gate.get("reward_longer_is_worse") or {}
        print(f"  beats_length_baseline: {'PASS' if gate['passed'] else 'FAIL'} -- diff {_fmt(gate.get('difference'))} vs "
              f"{gate.get('rival')} (cluster low {_fmt(gate.get('cluster_low'))}); reward part where the longer text is "
              f"worse {_fmt(reward.get('accuracy'))} (lower bound {_fmt(reward.get('low'))} vs chance 0.5)"
              + (f"; {gate['checked']}" if gate.get("too_few_pairs") or reward.get("too_few_pairs") else ""))
    best = max(rows, key=lambda r: -1.0 if r["comparison"]["model"]["accuracy"] is None else r["comparison"]["model"]["accuracy"])
    print(f"\nvariants tried in this run: {len(rows)}; best of them: {best['model']} "
          f"({_fmt(best['comparison']['model']['accuracy'])}). The recipe's model ({rows[0]['model']}) was fixed in "
          "params before this run: its row is a measurement; the best of the variants is a search, optimistic by the "
          f"spread of {len(rows)} noisy figures.")


# ---------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override an rm.* setting (dotted, relative to rm), e.g. train.epochs=20")
    parser.add_argument("--data", action="append", choices=("sample", "expert"), default=None,
                        help="data sets to run (repeatable; default: sample); expert: tests/fixtures/expert_ratings")
    parser.add_argument("--data-params", action="append", type=Path, default=[], metavar="FILE",
                        help="a real export to import: a YAML file with the `data` and `split` params of the import")
    parser.add_argument("--per-vignette", type=int, default=None,
                        help="sample: human reappraisals per vignette (default: data.sample of the params file)")
    parser.add_argument("--seed", type=int, default=None, help="sample-data seed (default: data.sample's)")
    parser.add_argument("--finetune-variant", type=int, default=0, metavar="LAYERS",
                        help="also run the recipe's ensemble objective with the top LAYERS encoder layers fine-tuned")
    parser.add_argument("--part", choices=("all", "models", "finetune"), default="models",
                        help="models: the reward models and rankers; finetune: the seconds-per-epoch comparison; all: both")
    parser.add_argument("--finetune-layers", type=int, default=None,
                        help="top layers fine-tuned in the epoch timing (default: rm.encoder.finetune_layers, or 1 if 0)")
    parser.add_argument("--finetune-epochs", type=int, default=2, help="epochs timed per mode (their mean is reported)")
    args = parser.parse_args()

    import yaml

    from reappreg.settings.rm import RmSettings

    # The rm section of the CPU profile (the top level of the params file), validated by its schema.
    params = yaml.safe_load(args.params.read_text(encoding="utf-8")) or {}
    rm = params.get("rm", {})
    for assignment in args.set:
        _override(rm, assignment)
    settings = RmSettings.model_validate(rm)
    datasets = [*(args.data or ([] if args.data_params else ["sample"])), *map(str, args.data_params)]
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}
    for dataset in datasets:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            label, files = prepare(dataset, params, root, args)
            if args.part in ("all", "finetune"):
                _print_finetune(_finetune_epochs(settings, files, args), label, args)
            if args.part == "finetune":
                continue
            runs = [run_recipe("recipe", settings, files, root / "recipe")]
            if args.finetune_variant:
                tuned = settings.model_copy(update={
                    "baselines": [],
                    "encoder": settings.encoder.model_copy(update={"finetune_layers": args.finetune_variant}),
                })
                runs.append(run_recipe(f"top {args.finetune_variant} layer(s) fine-tuned", tuned, files, root / "tuned"))
            report(label, runs, settings)
            for run in runs:
                cpu.update({f"{dataset} {run['name']} {k}": v for k, v in run["cpu"].items()})
                wall.update({f"{dataset} {run['name']} {k}": v for k, v in run["wall"].items()})
    if cpu:
        print("\nCPU seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
        for dataset in datasets:
            for name in ("recipe", f"top {args.finetune_variant} layer(s) fine-tuned"):
                stages = {k: v for k, v in cpu.items() if k.startswith(f"{dataset} {name} ")}
                if stages:
                    total = sum(stages.values())
                    print(f"{dataset}, {name}: all RM stages {total:.1f} s CPU ({total / CPU_BUDGET_S:.2f} of the "
                          f"{CPU_BUDGET_S:.0f} s budget), {sum(wall[k] for k in stages):.1f} s wall")


def _finetune_epochs(settings, files: dict[str, Path], args) -> list[dict]:
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
    pool = load_pool(files["vignettes"], files["reappraisals"], files["ratings"], files["meta"])
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


def _print_finetune(rows: list[dict], label: str, args) -> None:
    uncached, cached = rows
    print(f"\nfine-tuning the top {cached['layers']} encoder layer(s): seconds per epoch on {cached['texts']} texts "
          f"({label}), mean of {args.finetune_epochs} epochs, measured in this run")
    print(f"  {'mode':<28} {'setup CPU s':>11} {'epoch CPU s':>11} {'epoch wall s':>12}")
    for row in rows:
        print(f"  {row['mode']:<28} {row['setup_cpu']:>11.1f} {row['epoch_cpu']:>11.1f} {row['epoch_wall']:>12.1f}")
    print(f"  speed-up per epoch (uncached / cached): {uncached['epoch_cpu'] / cached['epoch_cpu']:.1f}x CPU, "
          f"{uncached['epoch_wall'] / cached['epoch_wall']:.1f}x wall; the cache pass costs "
          f"{cached['setup_cpu']:.1f} s CPU once per stage")


if __name__ == "__main__":
    main()
