"""One reward model (objective x seed): train, evaluate, save, load.

A member folder (``models/rm/<objective>/seed_<s>/``) holds:

- ``rm_config.json``: objective, seed, encoder reference (spec, pooling, max length and
  the DVC md5 of the encoder files), head shape, how outputs map to the score;
- ``head.safetensors``: the reward head;
- ``encoder_delta.safetensors``: only when top encoder layers were fine-tuned (the
  fine-tuned parameters; the rest is the unchanged base encoder);
- ``eval_predictions.jsonl``: the scores that models trained on the evaluation split
  (and on each leave-one-vignette-out fold) gave to the texts they did not see, which the
  ensemble stage combines into ensemble metrics. A quality part of the two-part recipe
  (``reappreg.rm.two_part``) also records each fold's length prior and its inner
  cross-fitting rows (``inner:<fold>:<group>``: scores of members trained on part of that
  fold's training vignettes only), from which the ensemble stage fits the fold's weight.

Evaluation: one model is trained on the training part of the ``holdout`` split and
scored on its test part; with ``leave_one_vignette_out`` one model per vignette is trained
on the other vignettes and scored on it. The shipped head is then retrained on the whole
pool with the same recipe (``refit_on_all``), or is the split model.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.hashing import dvc_md5
from reappreg.io import atomic_dir, read_jsonl, read_versioned, write_json, write_jsonl
from reappreg.rm.dataset import holdout_split, load_pool, mean_targets
from reappreg.rm.encoder import EncoderLocation, TextEncoder, resolve_encoder
from reappreg.rm.evaluate import (
    calibration_error,
    calibration_table,
    calibration_title,
    dimension_spearman,
    evaluate_scores,
    plot_calibration,
    write_csv,
)
from reappreg.rm.gate import format_gate_ok, rejected_share
from reappreg.rm.model import MemberTrainer, deterministic_torch, make_head
from reappreg.rm.objectives.base import ScoreMap
from reappreg.rm.objectives.classes import make_objective, objective_class
from reappreg.rm import two_part
from reappreg.rm.trivial import compare_with_rankers, cosine, headline, ranker_scores, with_interval
from reappreg.settings.rm import RmSettings

# /2: score maps name their rating columns; models may lack absent rating dimensions.
FORMAT = "reappreg-rm-member/2"


def check_certificate(certificate_path: str | Path, text_inputs: dict[str, str | Path]) -> dict:
    """Refuse to train unless the guard passed and certified these exact text files."""
    from reappreg.guard.certified import require_certified

    return require_certified(certificate_path, text_inputs)


def _safetensors_save(state: dict, path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, str(path))


def _safetensors_load(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


@dataclass
class MemberResult:
    metrics: dict[str, Any]
    plot_files: list[Path] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # run name -> epoch it resumed from (runs continued from a checkpoint of an interrupted stage)
    resumed: dict[str, int] = field(default_factory=dict)


def _fingerprint(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class MemberPaths:
    """The files one member stage reads and writes: the guarded vignettes and reappraisals
    (which ``certificate`` must certify), the ratings and their ``meta`` (meta.json: dimensions,
    rating scale; None: no declared scale), and where the member folder, its metrics, its plots
    and its resumable checkpoints go. One object because every caller (the stage, the benchmark,
    the fixtures) derives all of them from one (objective, seed) at once."""

    vignettes: str | Path
    reappraisals: str | Path
    ratings: str | Path
    certificate: str | Path
    out_dir: str | Path
    metrics_path: str | Path
    plots_dir: str | Path
    work_dir: str | Path
    meta: str | Path | None = None


def train_member(*, objective: str, seed: int, settings: RmSettings, paths: MemberPaths, progress=None) -> MemberResult:
    """Train, evaluate (held out, leave one vignette out, against the trivial rankers) and
    save one objective x seed."""
    if (objective, seed) not in settings.trained():
        raise InputError(
            f"rm: {objective} seed {seed} is neither an ensemble member (rm.ensemble.objective, rm.seeds) "
            "nor a baseline (rm.baselines, rm.baseline_seeds)"
        )
    with deterministic_torch(settings.threads):
        return _train_member(objective, seed, settings, paths, progress)


def _train_member(objective_name, seed, settings, paths: MemberPaths, progress) -> MemberResult:
    vignettes, reappraisals, ratings = paths.vignettes, paths.reappraisals, paths.ratings
    started, cpu_started = time.perf_counter(), time.process_time()
    check_certificate(paths.certificate, {"vignettes": vignettes, "reappraisals": reappraisals})
    pool = load_pool(vignettes, reappraisals, ratings, paths.meta)
    objective = make_objective(objective_name, settings, pool.dimensions)
    enc = settings.encoder
    location = resolve_encoder(enc.path)
    encoder = TextEncoder(location, enc.pooling, enc.max_length, enc.device, enc.finetune_layers, enc.dtype)
    encoder_md5 = dvc_md5(location.path)
    input_md5 = {"vignettes": dvc_md5(vignettes), "reappraisals": dvc_md5(reappraisals), "ratings": dvc_md5(ratings)}
    base_fingerprint = {
        "format": FORMAT,
        "objective": objective.name,
        "seed": seed,
        "inputs": input_md5,
        "encoder_md5": encoder_md5,
        "settings": settings.model_dump(exclude={"seeds", "baselines", "baseline_seeds", "ensemble"}),
    }
    t0, cpu_t0 = time.perf_counter(), time.process_time()
    timings_cpu_load = cpu_t0 - cpu_started
    truncation = encoder.truncation_counts(pool.scenarios, pool.texts)
    trainer = MemberTrainer(pool=pool, encoder=encoder, objective=objective, seed=seed, settings=settings,
                            progress=progress)
    # The trivial rankers' inputs: scenario-answer cosine of the base encoder (from the cache
    # pass when it gives it, else from separate scenario and answer embeddings), the format gate.
    if trainer.scenario_cosine is not None:
        pool_cosine = trainer.scenario_cosine
    else:
        scenario_ids = sorted(set(pool.scenarios))
        scenario_features = dict(zip(scenario_ids, encoder.embed_texts(scenario_ids, enc.batch_size).numpy()))
        pool_cosine = cosine(np.stack([scenario_features[s] for s in pool.scenarios]),
                             encoder.embed_texts(pool.texts, enc.batch_size).numpy())
    gate_ok = np.array([format_gate_ok(t, settings.ensemble.max_sentences) for t in pool.texts], dtype=bool)
    timings = {"load_s": t0 - started, "encode_s": time.perf_counter() - t0, "encode_cpu_s": time.process_time() - cpu_t0}
    work_dir = Path(paths.work_dir)
    evaluation = settings.evaluation
    texts = pool.texts

    resumed: dict[str, int] = {}

    def fit(run: str, train_ratings, checkpoint_every_epoch: bool = True):
        fitted = trainer.fit(run, train_ratings, work_dir / run, _fingerprint({**base_fingerprint, "run": run}),
                             checkpoint_every_epoch)
        if fitted.resumed_from_epoch is not None:
            resumed[run] = fitted.resumed_from_epoch
        return fitted

    prediction_rows: list[dict] = []
    quality_part = two_part.applies(objective.name, settings)
    priors: dict[str, dict] = {}

    def evaluate_fold(fold: str, fitted, train_ratings, test_ratings):
        """Scores of the fold's unseen texts, its rankers' scores (length regression fitted on
        the fold's training part), recorded for the ensemble stage."""
        targets = mean_targets(pool, test_ratings)
        rows = targets["row"].to_numpy()
        outputs, scores = trainer.predict_scores(fitted, rows)
        # The length regression rival and the two-part model's prior are one fit on the fold's training part.
        regression = two_part.fit_prior(pool, train_ratings)
        priors[fold] = regression.to_json()
        rankers = ranker_scores([texts[r] for r in rows], pool_cosine[rows], regression, fold)
        prior = regression.predict([texts[r] for r in rows])
        for i, row in enumerate(targets.itertuples(index=False)):
            r = int(row.row)
            prediction_rows.append({
                "fold": fold,
                "reappraisal_id": pool.items["reappraisal_id"].iloc[r],
                "vignette_id": row.vignette_id,
                "source": pool.items["source"].iloc[r],
                "score": float(scores[i]),
                "n_raters": int(row.n_raters),
                "format_gate_ok": bool(gate_ok[r]),
                **{dim: float(getattr(row, dim)) for dim in pool.dimensions},
                **{f"ranker.{name}": float(values[i]) for name, values in rankers.items()},
                "length_prior": float(prior[i]),
            })
        return targets, outputs, scores, rankers

    def cross_fit(fold: str, run: str, train_ratings) -> None:
        """A quality part's inner cross-fitting of one fold, from its training ratings only
        (reappreg.rm.two_part): the rows the ensemble stage fits the fold's weight on."""
        if not quality_part:
            return

        def fit_and_score(group, inner_train, held_back):
            # Many short runs: their state is written once each, when they end.
            fitted = fit(f"{run}~{group}", inner_train, checkpoint_every_epoch=False)
            return trainer.predict_scores(fitted, mean_targets(pool, held_back)["row"].to_numpy())[1]

        prediction_rows.extend(two_part.cross_fit(pool, fold, train_ratings, settings.two_part.inner_folds,
                                                  fit_and_score))

    def evaluation_metrics(scores, targets, rankers) -> dict:
        metrics = evaluate_scores(scores, targets, evaluation.pair_margin)
        metrics["trivial_baselines"] = compare_with_rankers(scores, targets, rankers, evaluation.pair_margin,
                                                             evaluation.min_pairs)
        return with_interval(metrics)

    t1 = time.perf_counter()
    train_ratings, test_ratings = holdout_split(pool, evaluation.holdout, evaluation.holdout_fraction, evaluation.split_seed)
    holdout_fit = fit("holdout", train_ratings)
    targets, outputs, scores, rankers = evaluate_fold("holdout", holdout_fit, train_ratings, test_ratings)
    cross_fit("holdout", "holdout", train_ratings)
    holdout = evaluation_metrics(scores, targets, rankers)
    holdout["mode"] = evaluation.holdout
    holdout["n_train_examples"] = holdout_fit.n_train_examples
    predicted_ratings = holdout_fit.score_map.ratings(outputs)
    if predicted_ratings:
        holdout["dimension_spearman"] = dimension_spearman(predicted_ratings, targets)
    observed, observed_label = objective.observed(targets, holdout_fit.score_map)
    table = calibration_table(scores, observed, evaluation.calibration_bins)
    if objective.rating_scale:
        holdout["calibration_error"] = calibration_error(table)
    timings["holdout_s"] = time.perf_counter() - t1

    lovo = None
    if evaluation.leave_one_vignette_out:
        t2 = time.perf_counter()
        folds = []
        for vid in sorted(pool.items["vignette_id"].unique()):
            fold_train = pool.ratings[pool.ratings["vignette_id"] != vid]
            fold_fit = fit(f"lovo_{vid}", fold_train)
            folds.append(evaluate_fold(f"lovo:{vid}", fold_fit, fold_train, pool.ratings[pool.ratings["vignette_id"] == vid]))
            cross_fit(f"lovo:{vid}", f"lovo_{vid}", fold_train)
        lovo_rankers = {name: np.concatenate([f[3][name] for f in folds]) for name in folds[0][3]}
        lovo = evaluation_metrics(np.concatenate([f[2] for f in folds]),
                                  pd.concat([f[0] for f in folds], ignore_index=True), lovo_rankers)
        timings["lovo_s"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    final = fit("final", pool.ratings) if evaluation.refit_on_all else holdout_fit
    shipped_fold = "final" if evaluation.refit_on_all else "holdout"
    if evaluation.refit_on_all:
        priors["final"] = two_part.fit_prior(pool, pool.ratings).to_json()
        cross_fit("final", "final", pool.ratings)
    timings["final_s"] = time.perf_counter() - t3
    timings["train_total_s"] = time.perf_counter() - t1

    config = {
        "format": FORMAT,
        "objective": objective.name,
        "seed": seed,
        "score_units": objective.score_units,
        "dimensions": pool.dimensions,
        "rating_scale": pool.rating_scale,
        "encoder": {
            "spec": enc.path,
            "pooling": enc.pooling,
            "max_length": enc.max_length,
            "md5": encoder_md5,
            "finetune_layers": enc.finetune_layers,
            "dtype": enc.dtype,
            "dim": encoder.dim,
        },
        "head": {"hidden": settings.train.hidden, "dropout": settings.train.dropout, "out": objective.output_dim()},
        "score_map": final.score_map.to_json(),
        "trained_on": {
            "inputs_md5": input_md5,
            "examples": final.n_train_examples,
            "refit_on_all": evaluation.refit_on_all,
            "epochs": final.epochs,
            "threads": settings.threads,
        },
    }
    if quality_part:
        # The shipped model's length prior (fitted on what the shipped head was trained on) and
        # which fold's cross-fitting rows the ensemble stage fits the shipped weight on.
        config["two_part"] = {"shipped_fold": shipped_fold, "length_prior": priors[shipped_fold],
                              "inner_folds": settings.two_part.inner_folds, "target": two_part.TARGET}
    with atomic_dir(paths.out_dir) as tmp:
        write_json(tmp / "rm_config.json", config)
        _safetensors_save(final.head_state, tmp / "head.safetensors")
        if final.delta_state:
            _safetensors_save(final.delta_state, tmp / "encoder_delta.safetensors")
        write_jsonl(tmp / "eval_predictions.jsonl", prediction_rows)

    metrics = {
        "objective": objective.name,
        "seed": seed,
        "recipe": (
            f"{enc.path} features ({enc.pooling} pooling), "
            + ("frozen encoder (features computed once per stage) + trained head"
               if not enc.finetune_layers else f"top {enc.finetune_layers} encoder layer(s) fine-tuned with the head")
        ),
        "shipped_model": "refit on the whole pool after evaluation" if evaluation.refit_on_all else "the holdout-split model",
        "encoder": {"finetune_layers": enc.finetune_layers, "pooling": enc.pooling},
        "dimensions": {"present": pool.dimensions, "targets": objective.columns(),
                       "weights": dict(zip(objective.columns(), objective.weights()))},
        "pool": {
            "reappraisals": int(len(pool.items)),
            "ratings": int(len(pool.ratings)),
            "dropped_ratings_not_in_guarded_pool": pool.dropped_ratings,
            "unrated_reappraisals": pool.unrated_reappraisals,
            # Human training texts are not held to the policy's format: this is how many of
            # them the ensemble's gate would penalise (informational; RM metrics are ungated).
            "format_gate_fail_rate": rejected_share(gate_ok),
            # (scenario, answer) pairs longer than rm.encoder.max_length: the scenario is cut
            # first, then the answer.
            "truncation": truncation,
        },
        "holdout": holdout,
    }
    if lovo is not None:
        metrics["lovo"] = lovo
    if quality_part:
        metrics["two_part"] = {
            "role": "the residual part of the two-part ranking model (its accuracies here are the part's alone)",
            "inner_folds": settings.two_part.inner_folds,
            "inner_rows": sum(1 for r in prediction_rows if r["fold"].startswith(f"{two_part.INNER}:")),
        }
    metrics["baselines"] = headline({s: metrics[s]["trivial_baselines"] for s in ("holdout", "lovo") if s in metrics})
    timings["total_s"] = time.perf_counter() - started
    timings["cpu_s"] = time.process_time() - cpu_started
    timings["load_cpu_s"] = timings_cpu_load
    metrics["timing"] = {k: round(v, 3) for k, v in timings.items()}
    write_json(paths.metrics_path, metrics)

    plots_dir = Path(paths.plots_dir)
    with atomic_dir(plots_dir) as tmp:
        write_csv(table, tmp / "calibration.csv")
        plot_calibration(table, tmp / "calibration.png",
                         calibration_title(f"{objective.name} seed {seed}", objective.rating_scale, observed_label),
                         objective.rating_scale, observed_label)
    return MemberResult(metrics, [plots_dir / "calibration.png", plots_dir / "calibration.csv"], timings, resumed)


# ---------------------------------------------------------------------- loading


@dataclass
class Member:
    folder: Path
    config: dict
    score_map: ScoreMap
    head: Any  # torch.nn.Module
    delta_state: dict

    @property
    def seed(self) -> int:
        return int(self.config["seed"])

    @property
    def objective(self) -> str:
        return str(self.config["objective"])

    def scores_from_features(self, features) -> np.ndarray:
        import torch

        with torch.no_grad():
            outputs = self.head(features.to(next(self.head.parameters()).device)).cpu().numpy()
        return objective_class(self.objective).score(outputs, self.score_map)


def load_member(folder: str | Path, device: str = "cpu") -> Member:
    folder = Path(folder)
    config_path = folder / "rm_config.json"
    if not config_path.exists():
        raise InputError(f"{folder}: not a reward-model folder (no rm_config.json)")
    config = read_versioned(config_path, FORMAT, what="a reward-model config", field="format")
    head_cfg = config["head"]
    head = make_head(int(config["encoder"]["dim"]), int(head_cfg["hidden"]), int(head_cfg["out"]), float(head_cfg["dropout"]))
    head_file = folder / "head.safetensors"
    if not head_file.exists():
        raise InputError(f"{folder}: head.safetensors is missing")
    head.load_state_dict(_safetensors_load(head_file))
    head.to(device).eval()
    delta_file = folder / "encoder_delta.safetensors"
    delta = _safetensors_load(delta_file) if delta_file.exists() else {}
    return Member(folder, config, ScoreMap.from_json(config["score_map"]), head, delta)


def member_encoder_location(member: Member) -> EncoderLocation:
    return resolve_encoder(member.config["encoder"]["spec"])


def read_eval_predictions(folder: str | Path) -> list[dict]:
    return read_jsonl(Path(folder) / "eval_predictions.jsonl")
