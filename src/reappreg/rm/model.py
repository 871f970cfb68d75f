"""Reward heads, the three objectives, and resumable training.

Objectives (all read the same (scenario, answer) features):

- ``bt``: Bradley-Terry, -log sigmoid(s_w - s_l) over within-vignette pairs ordered by
  mean human effectiveness (pairs closer than ``bt.pair_margin`` are not used). The score
  is the logit s (unit-free).
- ``regression``: MSE on the standardised mean effectiveness rating; the score is the
  prediction mapped back to the 1-7 scale.
- ``multidim``: joint MSE on the four standardised mean ratings; the score is the
  weighted mean of the four predictions on the 1-7 scale (``multidim.weights``).

Training state is checkpointed after every epoch (head, fine-tuned encoder layers,
optimiser, epoch) under the stage's work folder; a restarted stage whose checkpoint has
the same fingerprint (data hashes + params) continues from the next epoch. Each epoch's
shuffling and dropout are seeded from (seed, run, epoch), so a resumed run gives the same
weights as an uninterrupted one.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.io import atomic_path
from reappreg.rm.dataset import RatedPool, mean_targets, preference_pairs
from reappreg.settings.rm import RATING_DIMENSIONS

OBJECTIVES = ("bt", "regression", "multidim")
TARGET_COLUMNS = {"bt": [], "regression": ["effectiveness"], "multidim": list(RATING_DIMENSIONS)}


def output_dim(objective: str) -> int:
    return 1 if objective == "bt" else len(TARGET_COLUMNS[objective])


def make_head(dim: int, hidden: int, out: int, dropout: float):
    import torch

    if hidden == 0:
        return torch.nn.Sequential(torch.nn.Dropout(dropout), torch.nn.Linear(dim, out))
    return torch.nn.Sequential(
        torch.nn.Dropout(dropout),
        torch.nn.Linear(dim, hidden),
        torch.nn.GELU(),
        torch.nn.Dropout(dropout),
        torch.nn.Linear(hidden, out),
    )


@dataclass
class ScoreMap:
    """How head outputs become a score: de-standardise, then weight (see module doc)."""

    objective: str
    means: list[float] = field(default_factory=list)
    stds: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def score(self, outputs: np.ndarray) -> np.ndarray:
        outputs = np.asarray(outputs, dtype=np.float64)
        if self.objective == "bt":
            return outputs[:, 0]
        ratings = outputs * np.asarray(self.stds) + np.asarray(self.means)
        weights = np.asarray(self.weights, dtype=np.float64)
        return ratings @ weights / weights.sum()

    def ratings(self, outputs: np.ndarray) -> dict[str, np.ndarray]:
        """Predicted mean ratings per dimension (regression/multidim only)."""
        if self.objective == "bt":
            return {}
        ratings = np.asarray(outputs, dtype=np.float64) * np.asarray(self.stds) + np.asarray(self.means)
        return {dim: ratings[:, i] for i, dim in enumerate(TARGET_COLUMNS[self.objective])}

    def to_json(self) -> dict:
        return {"objective": self.objective, "means": self.means, "stds": self.stds, "weights": self.weights}

    @classmethod
    def from_json(cls, obj: dict) -> "ScoreMap":
        return cls(obj["objective"], list(obj["means"]), list(obj["stds"]), list(obj["weights"]))


@dataclass
class Fitted:
    head_state: dict
    delta_state: dict
    score_map: ScoreMap
    n_train_examples: int
    epochs: int
    resumed_from_epoch: int | None = None


def run_seed(seed: int, run: str, epoch: int) -> int:
    return (seed * 1_000_003 + zlib.crc32(run.encode()) + epoch * 7919) % (2**31 - 1)


class MemberTrainer:
    """Trains one objective/seed on the pool; features are cached when the encoder is frozen."""

    def __init__(self, *, pool: RatedPool, encoder, objective: str, seed: int, train, encoder_batch_size: int,
                 bt_margin: float, bt_batch_size: int, weights: dict[str, float], progress=None):
        import torch

        if objective not in OBJECTIVES:
            raise InputError(f"rm: unknown objective '{objective}' ({', '.join(OBJECTIVES)})")
        self.torch = torch
        self.pool = pool
        self.encoder = encoder
        self.objective = objective
        self.seed = seed
        self.train = train
        self.encoder_batch_size = encoder_batch_size
        self.bt_margin = bt_margin
        self.bt_batch_size = bt_batch_size
        self.weights = [float(weights[d]) for d in TARGET_COLUMNS[objective]] if objective != "bt" else []
        self.progress = progress
        self.finetune = bool(encoder.trainable_names)
        self.base_delta = encoder.delta_state()
        self.features = None
        if not self.finetune:
            # Frozen encoder: one forward pass over the pool, reused by every run of the stage.
            self.features = encoder.embed(pool.scenarios, pool.texts, encoder_batch_size, progress, "encoding pool")

    # ------------------------------------------------------------------ features

    def _features(self, rows: np.ndarray):
        if self.features is not None:
            return self.features[self.torch.as_tensor(np.asarray(rows, dtype=np.int64).copy())]
        scenarios = [self.pool.scenarios[i] for i in rows]
        texts = [self.pool.texts[i] for i in rows]
        return self.encoder.features(scenarios, texts)

    # ------------------------------------------------------------------ examples

    def _examples(self, ratings: pd.DataFrame):
        targets = mean_targets(self.pool, ratings)
        rows = targets["row"].to_numpy()
        if self.objective == "bt":
            pairs = preference_pairs(targets, self.bt_margin)
            if len(pairs) == 0:
                raise InputError(f"rm: no training pairs at bt.pair_margin={self.bt_margin} (all mean ratings too close)")
            return {"pairs": rows[pairs]}, ScoreMap("bt"), len(pairs)
        columns = TARGET_COLUMNS[self.objective]
        values = targets[columns].to_numpy(dtype=np.float64)
        means = values.mean(axis=0)
        stds = np.maximum(values.std(axis=0), 1e-6)
        standardised = (values - means) / stds
        score_map = ScoreMap(self.objective, means.tolist(), stds.tolist(), self.weights)
        return {"rows": rows, "targets": standardised}, score_map, len(rows)

    # ------------------------------------------------------------------ training

    def fit(self, run: str, ratings: pd.DataFrame, checkpoint_dir: Path, fingerprint: str) -> Fitted:
        torch = self.torch
        examples, score_map, n_examples = self._examples(ratings)
        torch.manual_seed(run_seed(self.seed, run, -1))
        head = make_head(self.encoder.dim, self.train.hidden, output_dim(self.objective), self.train.dropout)
        head.to(self.encoder.device)
        self.encoder.load_delta(self.base_delta)  # every run starts from the base encoder
        groups = [{"params": head.parameters(), "lr": self.train.learning_rate}]
        if self.finetune:
            groups.append({"params": self.encoder.trainable_parameters(), "lr": self.train.encoder_learning_rate})
        optimizer = torch.optim.AdamW(groups, weight_decay=self.train.weight_decay)

        checkpoint = Path(checkpoint_dir) / "checkpoint.pt"
        start_epoch, resumed = 0, None
        if checkpoint.exists():
            state = torch.load(checkpoint, map_location=self.encoder.device, weights_only=False)
            if state.get("fingerprint") == fingerprint:
                head.load_state_dict(state["head"])
                self.encoder.load_delta(state["delta"])
                optimizer.load_state_dict(state["optimizer"])
                start_epoch = resumed = int(state["epoch"]) + 1
            # A different fingerprint means other data or params: start over (overwritten below).

        # A head on cached features is a handful of tiny matmuls per step: intra-op threads
        # only add synchronisation (10x slower on a busy 2-core machine), so use one.
        threads = torch.get_num_threads()
        if not self.finetune:
            torch.set_num_threads(1)
        try:
            return self._train_epochs(run, head, optimizer, examples, score_map, n_examples, checkpoint, fingerprint,
                                      start_epoch, resumed)
        finally:
            torch.set_num_threads(threads)

    def _train_epochs(self, run, head, optimizer, examples, score_map, n_examples, checkpoint, fingerprint,
                      start_epoch, resumed) -> Fitted:
        torch = self.torch
        epochs = self.train.epochs
        task = None
        if self.progress is not None:
            task = self.progress.add_task(f"{self.objective} seed {self.seed} · {run}", total=epochs, completed=start_epoch)
        for epoch in range(start_epoch, epochs):
            epoch_seed = run_seed(self.seed, run, epoch)
            torch.manual_seed(epoch_seed)  # dropout
            head.train()
            if "pairs" in examples:
                self._bt_epoch(head, optimizer, examples["pairs"], epoch_seed)
            else:
                self._pointwise_epoch(head, optimizer, examples["rows"], examples["targets"], epoch_seed)
            state = {
                "fingerprint": fingerprint,
                "epoch": epoch,
                "head": head.state_dict(),
                "delta": self.encoder.delta_state(),
                "optimizer": optimizer.state_dict(),
            }
            with atomic_path(checkpoint) as tmp:
                torch.save(state, tmp)
            if task is not None:
                self.progress.advance(task)
        head.eval()
        return Fitted(
            head_state={k: v.detach().cpu().clone() for k, v in head.state_dict().items()},
            delta_state=self.encoder.delta_state(),
            score_map=score_map,
            n_train_examples=n_examples,
            epochs=epochs,
            resumed_from_epoch=resumed,
        )

    def _order(self, n: int, epoch_seed: int) -> np.ndarray:
        generator = self.torch.Generator().manual_seed(epoch_seed)
        return self.torch.randperm(n, generator=generator).numpy()

    def _pointwise_epoch(self, head, optimizer, rows: np.ndarray, targets: np.ndarray, epoch_seed: int) -> None:
        torch = self.torch
        order = self._order(len(rows), epoch_seed)
        target_tensor = torch.as_tensor(targets, dtype=torch.float32, device=self.encoder.device)
        for start in range(0, len(order), self.train.batch_size):
            batch = order[start : start + self.train.batch_size]
            outputs = head(self._features(rows[batch]).to(self.encoder.device))
            loss = torch.nn.functional.mse_loss(outputs, target_tensor[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    def _bt_epoch(self, head, optimizer, pairs: np.ndarray, epoch_seed: int) -> None:
        torch = self.torch
        order = self._order(len(pairs), epoch_seed)
        for start in range(0, len(order), self.bt_batch_size):
            batch = pairs[order[start : start + self.bt_batch_size]]
            unique, inverse = np.unique(batch.reshape(-1), return_inverse=True)
            scores = head(self._features(unique).to(self.encoder.device))[:, 0]
            inverse = torch.as_tensor(inverse.reshape(-1, 2), device=scores.device)
            loss = -torch.nn.functional.logsigmoid(scores[inverse[:, 0]] - scores[inverse[:, 1]]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    # ------------------------------------------------------------------ prediction

    def predict_outputs(self, fitted: Fitted, rows: np.ndarray) -> np.ndarray:
        """Head outputs for pool rows under a fitted run (restores that run's encoder delta)."""
        torch = self.torch
        head = make_head(self.encoder.dim, self.train.hidden, output_dim(self.objective), self.train.dropout)
        head.load_state_dict(fitted.head_state)
        head.to(self.encoder.device).eval()
        self.encoder.load_delta(fitted.delta_state)
        outputs = []
        with torch.no_grad():
            for start in range(0, len(rows), self.encoder_batch_size):
                chunk = rows[start : start + self.encoder_batch_size]
                outputs.append(head(self._features(chunk).to(self.encoder.device)).cpu().numpy())
        if not outputs:
            return np.zeros((0, output_dim(self.objective)))
        return np.concatenate(outputs).astype(np.float64)
