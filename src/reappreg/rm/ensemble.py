"""The seed ensemble: reward = mean - k * std over the members, behind a format gate; with the
two-part recipe (``reappreg.rm.two_part``) also the ranking model, length prior + weight x that.

``models/rm/ensemble/`` is self-contained; everything is referenced by paths relative to
the folder:

- ``ensemble.json``: objective, k, gate settings, the encoder and the member folders, and
  (two-part) the length prior's coefficients and the residual part's weight and offset;
- ``encoder/``: a copy of the base encoder the members were trained on (one copy: all
  members must share it);
- ``members/seed_<s>/``: each member's head (and fine-tuned encoder layers, if any).

``std`` is the population standard deviation over members (ddof=0). An answer that
fails the format gate (empty, or more than ``max_sentences`` sentences) gets
``format_penalty`` instead of its reward. The reward (:meth:`RewardEnsemble.score`) is the
members' part alone -- for the two-part recipe the length-residual part, so a policy trained
on it is not paid for length; :meth:`RewardEnsemble.score_ranking` is the ranking model the
metrics and the registry gate describe, and :meth:`RewardEnsemble.parts` gives all of them.

The metrics (:func:`evaluate_ensemble`) name each score: ``ranking`` (what the accuracy
claims and ``beats_length_baseline`` are about), ``residual`` (mean - k * std of the members:
the reward, ungated), ``mean`` and ``members``; each outer fold's prior and weight come from
that fold's training ratings only.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.hashing import dvc_md5
from reappreg.io import atomic_dir, read_json, read_versioned, write_json
from reappreg.rm.encoder import EncoderLocation, TextEncoder
from reappreg.rm.dataset import preference_pairs
from reappreg.rm.evaluate import (
    calibration_error,
    calibration_table,
    calibration_title,
    disagreement_table,
    evaluate_scores,
    plot_calibration,
    plot_disagreement,
    within_vignette_rank_error,
    write_csv,
    write_per_vignette,
)
from reappreg.rm import two_part
from reappreg.rm.gate import format_gate_ok, rejected_share
from reappreg.rm.member import load_member, member_encoder_location, read_eval_predictions
from reappreg.rm.objectives.base import ScoreMap
from reappreg.rm.objectives.classes import objective_class
from reappreg.rm.trivial import (
    GATE_RULE,
    RANKERS,
    LengthRegression,
    beats_length_gate,
    compare_with_rankers,
    difference,
    figure,
    headline,
    outcomes,
    with_interval,
)

# /2: the optional two-part section (length prior, weight, offset) next to the members.
FORMAT = "reappreg-rm-ensemble/2"
PARTS = ("reward", "ranking", "length_prior", "residual")


def combine(member_scores: np.ndarray, k: float) -> np.ndarray:
    """mean - k * std across members; ``member_scores`` has shape (n_answers, n_members)."""
    member_scores = np.asarray(member_scores, dtype=np.float64)
    return member_scores.mean(axis=1) - k * member_scores.std(axis=1, ddof=0)


class RewardEnsemble:
    """Loaded ensemble. Scores are floats in the members' units (see ``score_units``)."""

    def __init__(self, folder: str | Path, device: str = "cpu"):
        folder = Path(folder)
        manifest_path = folder / "ensemble.json"
        if not manifest_path.exists():
            raise InputError(f"{folder}: not a reward ensemble folder (no ensemble.json)")
        manifest = read_versioned(manifest_path, FORMAT, what="a reward ensemble manifest", field="format")
        self.folder = folder
        self.manifest = manifest
        self.objective: str = manifest["objective"]
        self.k = float(manifest["k"])
        self.max_sentences = int(manifest["max_sentences"])
        self.format_penalty = float(manifest["format_penalty"])
        self.batch_size = int(manifest.get("batch_size", 64))
        self.score_units: str = manifest["score_units"]
        enc = manifest["encoder"]
        location = EncoderLocation(folder / enc["folder"], enc.get("gguf_file"))
        if not location.path.exists():
            raise InputError(f"{folder}: encoder copy {location.path.relative_to(folder)} is missing")
        self.members = [load_member(folder / m["path"], device) for m in manifest["members"]]
        parts = manifest.get("two_part")
        self.prior = LengthRegression.from_json(parts["length_prior"]) if parts else None
        self.weight = two_part.WeightFit.from_json(parts["weight"]) if parts else None
        self.seeds = [m.seed for m in self.members]
        self.encoder = TextEncoder(location, enc["pooling"], int(enc["max_length"]), device, dtype=enc.get("dtype", "float32"))
        # Members that fine-tuned encoder layers need their own forward pass.
        if any(m.delta_state for m in self.members):
            self.encoder_trainable = sorted({n for m in self.members for n in m.delta_state})
            self._base_delta = {n: p.detach().clone() for n, p in self.encoder.model.named_parameters() if n in self.encoder_trainable}

    def member_scores(self, scenarios: list[str], answers: list[str]) -> np.ndarray:
        """Raw member scores, shape (n_answers, n_members), columns in ``self.seeds`` order."""
        if len(scenarios) != len(answers):
            raise InputError(f"rm: {len(scenarios)} scenarios but {len(answers)} answers")
        out = np.zeros((len(answers), len(self.members)), dtype=np.float64)
        if not answers:
            return out
        frozen = [i for i, m in enumerate(self.members) if not m.delta_state]
        if frozen:
            if hasattr(self, "_base_delta"):
                self.encoder.load_delta(self._base_delta)
            features = self.encoder.embed(scenarios, answers, self.batch_size)
            for i in frozen:
                out[:, i] = self.members[i].scores_from_features(features)
        for i, member in enumerate(self.members):
            if member.delta_state:
                self.encoder.load_delta({**self._base_delta, **member.delta_state})
                out[:, i] = member.scores_from_features(self.encoder.embed(scenarios, answers, self.batch_size))
        return out

    def score_raw(self, scenarios: list[str], answers: list[str]) -> np.ndarray:
        """mean - k * std over members, without the format gate."""
        return combine(self.member_scores(scenarios, answers), self.k)

    def gate(self, answers: list[str]) -> np.ndarray:
        return np.array([format_gate_ok(a, self.max_sentences) for a in answers], dtype=bool)

    def score(self, scenarios: list[str], answers: list[str]) -> np.ndarray:
        """The reward: mean - k * std, or ``format_penalty`` where the format gate fails.

        Answers failing the gate are not run through the models at all (an empty answer
        has nothing to score)."""
        if len(scenarios) != len(answers):
            raise InputError(f"rm: {len(scenarios)} scenarios but {len(answers)} answers")
        ok = self.gate(answers)
        rewards = np.full(len(answers), self.format_penalty, dtype=np.float64)
        if ok.any():
            keep = np.flatnonzero(ok)
            rewards[keep] = self.score_raw([scenarios[i] for i in keep], [answers[i] for i in keep])
        return rewards

    @property
    def two_part(self) -> bool:
        return self.prior is not None

    def length_prior(self, answers: list[str]) -> np.ndarray:
        """The two-part model's length prior of each answer (reads its length only)."""
        if self.prior is None:
            raise InputError(f"{self.folder}: this reward model has no length prior (built without rm.two_part)")
        return self.prior.predict(list(answers))

    def score_ranking(self, scenarios: list[str], answers: list[str]) -> np.ndarray:
        """The ranking model, ungated: prior + weight * (mean - k * std) + offset for a two-part
        model, else the members' part (what the metrics' ``ranking`` figures describe)."""
        residual = self.score_raw(scenarios, answers)
        return two_part.ranking(self.length_prior(answers), residual, self.weight) if self.two_part else residual

    def parts(self, scenarios: list[str], answers: list[str]) -> pd.DataFrame:
        """Every score of each answer: ``reward`` (gated; what :meth:`score` gives), ``ranking``,
        ``length_prior`` (NaN without one) and ``residual`` (the members' part, ungated; NaN for an
        empty answer, which has nothing to encode)."""
        if len(scenarios) != len(answers):
            raise InputError(f"rm: {len(scenarios)} scenarios but {len(answers)} answers")
        residual = np.full(len(answers), np.nan)
        gate = self.gate(answers)
        # Scored in the batches `score` uses (gate-passing answers together), so `reward` is
        # exactly what `score` returns; the gated answers with text are scored apart.
        for chosen in (np.flatnonzero(gate), np.flatnonzero(~gate & np.array([bool(a.strip()) for a in answers], bool))):
            if len(chosen):
                residual[chosen] = self.score_raw([scenarios[i] for i in chosen], [answers[i] for i in chosen])
        prior = self.length_prior(answers) if self.two_part else np.full(len(answers), np.nan)
        ranking = two_part.ranking(prior, residual, self.weight) if self.two_part else residual
        return pd.DataFrame({"reward": np.where(gate, residual, self.format_penalty), "ranking": ranking,
                             "length_prior": prior, "residual": residual}, columns=list(PARTS))

    @staticmethod
    def _frame_columns(frame: pd.DataFrame) -> tuple[list[str], list[str]]:
        missing = [c for c in ("scenario", "answer") if c not in frame.columns]
        if missing:
            raise InputError(f"rm ensemble: input frame lacks column(s) {', '.join(missing)}")
        return frame["scenario"].astype(str).tolist(), frame["answer"].astype(str).tolist()

    def predict_frame(self, frame: pd.DataFrame) -> np.ndarray:
        return self.score(*self._frame_columns(frame))

    def predict_parts(self, frame: pd.DataFrame) -> pd.DataFrame:
        return self.parts(*self._frame_columns(frame))


def load_ensemble(path: str | Path, device: str = "cpu") -> RewardEnsemble:
    return RewardEnsemble(path, device)


# ---------------------------------------------------------------------- building


def build_ensemble(
    member_dirs: list[str | Path], out_dir: str | Path, *, k: float, max_sentences: int, format_penalty: float,
    batch_size: int = 64,
) -> dict:
    """Copy the members and their shared encoder into a self-contained ensemble folder."""
    if not member_dirs:
        raise InputError("rm ensemble: no member folders given")
    members = [load_member(d) for d in member_dirs]
    objectives = {m.objective for m in members}
    if len(objectives) != 1:
        raise InputError(f"rm ensemble: members mix objectives {sorted(objectives)}; an ensemble has one objective")
    seeds = [m.seed for m in members]
    if len(set(seeds)) != len(seeds):
        raise InputError(f"rm ensemble: duplicate seeds {seeds}")
    keys = {(m.config["encoder"]["md5"], m.config["encoder"]["pooling"], m.config["encoder"]["max_length"],
             m.config["encoder"].get("dtype", "float32")) for m in members}
    if len(keys) != 1:
        raise InputError("rm ensemble: members were trained on different encoders or encoder settings")
    location = member_encoder_location(members[0])
    if dvc_md5(location.path) != members[0].config["encoder"]["md5"]:
        raise InputError(
            f"rm ensemble: the encoder at {members[0].config['encoder']['spec']} changed since the members were trained"
        )
    enc = members[0].config["encoder"]
    parts = _two_part_config([m.config for m in members], [m.folder for m in members])
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "objective": members[0].objective,
        "score_units": members[0].config["score_units"],
        "k": k,
        "max_sentences": max_sentences,
        "format_penalty": format_penalty,
        "batch_size": batch_size,
        "reward": "mean - k * std over members (population std), format_penalty where the format gate fails",
        "encoder": {
            "folder": "encoder",
            "gguf_file": location.gguf_file,
            "pooling": enc["pooling"],
            "max_length": enc["max_length"],
            "dtype": enc.get("dtype", "float32"),
            "md5": enc["md5"],
            "source_spec": enc["spec"],
        },
        "members": [{"seed": m.seed, "path": f"members/seed_{m.seed}"} for m in members],
    }
    if parts is not None:
        # The shipped ranking model: the prior fitted on what the shipped heads were trained on,
        # and the weight fitted on the cross-fitting rows of that same fold (never on anything else).
        inner = _inner_frame([m.folder for m in members], k)
        shipped = parts["shipped_fold"]
        fits = two_part.fold_weights(inner[inner["fold"].map(two_part.outer_of) == shipped]) if inner is not None else {}
        if shipped not in fits:
            raise InputError(f"rm ensemble: the members hold no cross-fitting rows of fold '{shipped}' to fit the weight on")
        manifest["two_part"] = {"ranking": two_part.RANKING, "length_prior": parts["length_prior"],
                                "weight": fits[shipped].to_json(), "shipped_fold": shipped,
                                "weight_method": two_part.WEIGHT_METHOD, "target": parts["target"]}
        manifest["reward"] += "; the members are the residual part of the two-part ranking model (reward without the prior)"
    with atomic_dir(out_dir) as tmp:
        if location.gguf_file:
            (tmp / "encoder").mkdir()
            shutil.copy2(location.path, tmp / "encoder" / location.gguf_file)
        else:
            shutil.copytree(location.folder, tmp / "encoder", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for member in members:
            target = tmp / "members" / f"seed_{member.seed}"
            target.mkdir(parents=True)
            for name in ("rm_config.json", "head.safetensors", "encoder_delta.safetensors"):
                if (member.folder / name).exists():
                    shutil.copy2(member.folder / name, target / name)
        write_json(tmp / "ensemble.json", manifest)
    return manifest


# ---------------------------------------------------------------------- evaluation


def _fold_matrix(member_dirs: list[Path], fold_filter) -> tuple[pd.DataFrame, np.ndarray]:
    """Targets and the (n, n_members) score matrix of the members' out-of-sample predictions."""
    frames = []
    for i, folder in enumerate(member_dirs):
        rows = [r for r in read_eval_predictions(folder) if fold_filter(r["fold"])]
        frame = pd.DataFrame(rows).set_index(["fold", "reappraisal_id"]).sort_index()
        frames.append(frame)
    base = frames[0]
    for folder, frame in zip(member_dirs[1:], frames[1:]):
        if not frame.index.equals(base.index):
            raise InputError(f"{folder}: evaluated on other texts than {member_dirs[0]}; members must share the evaluation split")
        if "length_prior" in base.columns and not np.allclose(frame["length_prior"], base["length_prior"], atol=1e-9):
            raise InputError(f"{folder}: its length prior differs from {member_dirs[0]}'s on the same texts; "
                             "members must be trained on the same ratings")
    matrix = np.stack([f["score"].to_numpy(dtype=np.float64) for f in frames], axis=1)
    return base.drop(columns=["score"]).reset_index(), matrix


def _rankers(targets: pd.DataFrame) -> dict[str, np.ndarray]:
    return {name: targets[f"ranker.{name}"].to_numpy(dtype=np.float64) for name in RANKERS}


def _two_part_config(configs: list[dict], folders: list) -> dict | None:
    """The members' two-part section (all have the same one, or none has one)."""
    sections = [c.get("two_part") for c in configs]
    if all(s is None for s in sections):
        return None
    if any(s is None for s in sections) or any(s != sections[0] for s in sections[1:]):
        raise InputError(f"rm ensemble: members {', '.join(map(str, folders))} disagree about the two-part recipe "
                         "(its length prior, shipped fold or cross-fitting); retrain them with the same rm.two_part")
    return sections[0]


def _inner_frame(member_dirs: list[Path], k: float) -> pd.DataFrame | None:
    """The cross-fitting rows of every fold, with the residual part (mean - k * std over members)."""
    try:
        targets, matrix = _fold_matrix(member_dirs, lambda f: f.startswith(f"{two_part.INNER}:"))
    except KeyError:
        return None  # no cross-fitting rows at all
    targets["residual"] = combine(matrix, k)
    return targets


def format_gate_effect(reward: np.ndarray, targets: pd.DataFrame, penalty: float, margin: float) -> dict[str, Any]:
    """What the format gate does, kept apart from the (ungated) RM metrics: the share of the
    evaluated texts it rejects (all of them: ``rejected_share``; leave-one-vignette-out
    evaluates every training text once) and per source, and the pairwise accuracy with and
    without it."""
    ok = targets["format_gate_ok"].to_numpy(dtype=bool)
    gated = np.where(ok, reward, penalty)
    pairs = preference_pairs(targets, margin)
    clusters = targets["vignette_id"].to_numpy()[pairs[:, 0]] if len(pairs) else np.array([])
    ungated_outcomes = outcomes(reward, pairs) if len(pairs) else np.zeros(0)
    gated_outcomes = outcomes(gated, pairs) if len(pairs) else np.zeros(0)
    touched = ~(ok[pairs[:, 0]] & ok[pairs[:, 1]]) if len(pairs) else np.zeros(0, dtype=bool)
    return {
        "rejected_share": rejected_share(ok),
        "gated_fraction_by_source": {str(src): rejected_share(ok[idx])
                                     for src, idx in sorted(targets.groupby("source").indices.items())},
        "ungated": figure(ungated_outcomes, clusters),
        "gated": figure(gated_outcomes, clusters),
        "gated_minus_ungated": difference(gated_outcomes, ungated_outcomes, clusters),
        "pairs_with_a_gated_text": int(touched.sum()),
        "note": "RM metrics use the ungated score; the policy's reward is gated (format_penalty where the gate fails)",
    }


def evaluate_ensemble(member_dirs: list[str | Path], *, k: float, pair_margin: float, bins: int, plots_dir: str | Path,
                      objective: str, format_penalty: float, min_pairs: int = 1) -> tuple[dict, pd.DataFrame]:
    """Ensemble metrics from the members' held-out predictions (ungated): the ranking model (the
    two-part model when the members are its residual part, else the members' mean - k * std),
    the residual part, the trivial rankers on the same pairs, the ``beats_length_baseline`` gate,
    the format gate's effect, and the per-seed table.

    A two-part fold's prior is the one its members fitted on the fold's training ratings (their
    ``length_prior``), its weight the one fitted on its own cross-fitting rows
    (:func:`reappreg.rm.two_part.fold_weights`): no held-out rating enters either."""
    member_dirs = [Path(d) for d in member_dirs]
    configs = [read_json(d / "rm_config.json") for d in member_dirs]
    seeds = [int(c["seed"]) for c in configs]
    score_map = ScoreMap.from_json(configs[0]["score_map"])
    scorer = objective_class(objective)(None, configs[0]["dimensions"])
    parts = _two_part_config(configs, member_dirs)
    fits: dict[str, two_part.WeightFit] = {}
    if parts is not None:
        inner = _inner_frame(member_dirs, k)
        fits = two_part.fold_weights(inner) if inner is not None else {}
    metrics: dict[str, Any] = {"objective": objective, "k": k, "seeds": seeds}
    residual_label = f"residual_k{k:g}" if parts else f"ensemble_reward_k{k:g}"
    table_rows: dict[str, dict] = {}  # model -> one row with <split>_<measure> columns
    plots_dir = Path(plots_dir)
    per_vignette_fold: tuple[str, dict] | None = None
    with atomic_dir(plots_dir) as tmp:
        for fold_name, fold_filter in (("holdout", lambda f: f == "holdout"), ("lovo", lambda f: f.startswith("lovo:"))):
            try:
                targets, matrix = _fold_matrix(member_dirs, fold_filter)
            except KeyError:
                continue  # no predictions of this kind (leave_one_vignette_out disabled)
            if targets.empty:
                continue
            mean = matrix.mean(axis=1)
            std = matrix.std(axis=1, ddof=0)
            residual = mean - k * std
            rankers = _rankers(targets)

            def versus_rankers(scores, full: bool = False):
                out = evaluate_scores(scores, targets, pair_margin)
                comparison = compare_with_rankers(scores, targets, rankers, pair_margin, min_pairs)
                if full:
                    out["trivial_baselines"] = comparison
                    return with_interval(out)
                out["vs_rival"] = comparison["vs_rival"]
                return out

            fold_metrics: dict[str, Any] = {}
            if parts is not None:
                folds = targets["fold"].to_numpy()
                unfitted = sorted(set(folds) - set(fits))
                if unfitted:
                    raise InputError(f"rm ensemble: no cross-fitting rows for fold(s) {', '.join(unfitted)}: "
                                     "the members were trained without the two-part recipe's inner folds")
                by_row = [fits[f] for f in folds]
                ranking = (targets["length_prior"].to_numpy(dtype=np.float64)
                           + np.array([f.weight for f in by_row]) * residual + np.array([f.offset for f in by_row]))
                fold_metrics["ranking"] = versus_rankers(ranking, full=True)
                fold_metrics["residual"] = versus_rankers(residual, full=True)
                fold_metrics["weights"] = {f: fits[f].to_json() for f in sorted(set(folds))}
            else:
                ranking = residual
                fold_metrics["ranking"] = versus_rankers(ranking, full=True)
            fold_metrics.update({
                "mean": versus_rankers(mean),
                "members": {f"seed_{s}": versus_rankers(matrix[:, i]) for i, s in enumerate(seeds)},
                "std_mean": float(std.mean()),
                # The reward is the members' part behind the gate: its effect is measured on that.
                "format_gate": format_gate_effect(residual, targets, format_penalty, pair_margin),
            })
            error = within_vignette_rank_error(mean, targets["effectiveness"].to_numpy(float), targets["vignette_id"].to_numpy())
            from scipy.stats import spearmanr

            rho = spearmanr(std, error) if np.ptp(std) > 0 else None
            fold_metrics["disagreement_vs_error"] = {
                "spearman": float(rho.statistic) if rho is not None else None,
                "p_value": float(rho.pvalue) if rho is not None else None,
            }
            metrics[fold_name] = fold_metrics
            labels = [*(f"seed_{s}" for s in seeds), "ensemble_mean", residual_label]
            results = [*(fold_metrics["members"][f"seed_{s}"] for s in seeds), fold_metrics["mean"],
                       fold_metrics.get("residual", fold_metrics["ranking"])]
            if parts is not None:
                labels.append("two_part")
                results.append(fold_metrics["ranking"])
            for label, m in zip(labels, results):
                row = table_rows.setdefault(label, {"model": label})
                for measure in ("pairwise_accuracy", "spearman_within_vignette", "spearman", "n_pairs"):
                    row[f"{fold_name}_{measure}"] = m[measure]
            ranking_baselines = fold_metrics["ranking"]["trivial_baselines"]
            for name, ranker in ranking_baselines["rankers"].items():
                row = table_rows.setdefault(f"baseline:{name}", {"model": f"baseline:{name}"})
                row[f"{fold_name}_pairwise_accuracy"] = ranker["accuracy"]
                row[f"{fold_name}_n_pairs"] = ranker["n_pairs"]
            # Unseen vignettes are the figure that matters; without leave-one-vignette-out the
            # per-vignette plot shows the held-out split and says so.
            if fold_name == "lovo" or per_vignette_fold is None:
                per_vignette_fold = (fold_name, ranking_baselines)
            if fold_name == "holdout":
                if parts is not None:
                    # The ranking model predicts the mean effectiveness rating (prior's target, weight's fit).
                    observed, observed_label, rating_scale = (targets["effectiveness"].to_numpy(float),
                                                              "mean human effectiveness rating", True)
                    title = f"two-part ranking model (length prior + {objective} ensemble, k={k:g})"
                else:
                    (observed, observed_label), rating_scale = scorer.observed(targets, score_map), scorer.rating_scale
                    title = f"{objective} ensemble (k={k:g})"
                cal = calibration_table(ranking, observed, bins)
                if rating_scale:
                    fold_metrics["ranking"]["calibration_error"] = calibration_error(cal)
                write_csv(cal, tmp / "calibration.csv")
                plot_calibration(cal, tmp / "calibration.png", calibration_title(title, rating_scale, observed_label),
                                 rating_scale, observed_label)
                dis = disagreement_table(std, error, bins)
                write_csv(dis, tmp / "disagreement.csv")
                plot_disagreement(dis, tmp / "disagreement.png", f"{objective} ensemble: disagreement vs error (held out)")
        table = pd.DataFrame(list(table_rows.values()))
        write_csv(table, tmp / "members.csv")
        if per_vignette_fold is not None:
            fold_name, comparison = per_vignette_fold
            name = "two-part model" if parts is not None else f"{objective} ensemble (k={k:g})"
            write_per_vignette(comparison, tmp, name, unseen_vignettes=fold_name == "lovo")
    metrics["recipe"] = _recipe(parts, objective)
    if parts is not None:
        shipped = parts["shipped_fold"]
        metrics["two_part"] = {
            "enabled": True, "ranking": two_part.RANKING, "weight_method": two_part.WEIGHT_METHOD,
            "inner_folds": parts["inner_folds"], "target": parts["target"], "shipped_fold": shipped,
            # The shipped model's weight (its cross-fitting on the whole pool), what the folder holds.
            "weight": fits[shipped].weight if shipped in fits else None,
            "offset": fits[shipped].offset if shipped in fits else None,
            "length_prior": parts["length_prior"],
        }
    else:
        metrics["two_part"] = {"enabled": False}
    metrics["baselines"] = headline({s: metrics[s]["ranking"]["trivial_baselines"] for s in ("holdout", "lovo")
                                     if s in metrics})
    if "lovo" in metrics:
        reward_part = metrics["lovo"]["residual"]["trivial_baselines"] if parts is not None else None
        metrics["beats_length_baseline"] = beats_length_gate(metrics["lovo"]["ranking"]["trivial_baselines"], reward_part)
    else:
        metrics["beats_length_baseline"] = {
            "passed": False, "cluster_low": None, "rival": None, "rule": GATE_RULE,
            "checked": "nothing: rm.evaluation.leave_one_vignette_out is off, so there are no unseen-vignette pairs",
        }
    return metrics, table


def _recipe(parts: dict | None, objective: str) -> dict[str, Any]:
    """Which score is which, in words (no numbers: k is beside it in the metrics, and a reader
    quoting these strings quotes no figure without its source): the one the accuracies and the
    gate describe, and the reward."""
    members = f"mean - k * std over the {objective} members"
    if parts is None:
        return {"ranking": members, "reward": f"{members}, behind the format gate", "pays_for_length": None}
    return {"ranking": two_part.RANKING.replace("residual ensemble", f"({members})"),
            "reward": f"the residual part alone ({members}), behind the format gate; the length prior is not in it "
                      "(policy.reward.length_prior_weight may add it, and the policy's metrics say so)",
            "pays_for_length": False}
