"""What every reward-model objective provides (one objective = one class in one module here).

An objective decides which rating columns it learns from, how training examples are built
from the mean ratings, the loss of one epoch, and how head outputs become a score. The
trainer (``reappreg.rm.model``) owns the head, optimiser, seeding and checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd


@dataclass
class ScoreMap:
    """How head outputs become a score: de-standardise ``columns``, then weight them."""

    objective: str
    columns: list[str] = field(default_factory=list)
    means: list[float] = field(default_factory=list)
    stds: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def ratings(self, outputs: np.ndarray) -> dict[str, np.ndarray]:
        """Predicted mean ratings per column (empty for unit-free objectives)."""
        if not self.columns:
            return {}
        ratings = np.asarray(outputs, dtype=np.float64) * np.asarray(self.stds) + np.asarray(self.means)
        return {column: ratings[:, i] for i, column in enumerate(self.columns)}

    def to_json(self) -> dict:
        return {"objective": self.objective, "columns": self.columns, "means": self.means, "stds": self.stds,
                "weights": self.weights}

    @classmethod
    def from_json(cls, obj: dict) -> "ScoreMap":
        return cls(obj["objective"], list(obj["columns"]), list(obj["means"]), list(obj["stds"]), list(obj["weights"]))


@dataclass
class Examples:
    """Training examples of one run: pool rows with standardised targets, and/or pairs of rows."""

    rows: np.ndarray
    targets: np.ndarray | None  # (len(rows), n columns), standardised
    pairs: np.ndarray | None  # (n pairs, 2) pool rows, preferred first
    count: int  # what the objective trains on (texts or pairs), for the metrics


class Objective:
    """Base class; subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    score_units: ClassVar[str]
    # True when the score is on the rating scale (calibration error is meaningful).
    rating_scale: ClassVar[bool]

    def __init__(self, settings: Any, dimensions: list[str]):
        """``settings``: the validated ``RmSettings``; ``dimensions``: the rating
        dimensions present in the data (``effectiveness`` always among them)."""
        self.settings = settings
        self.dimensions = list(dimensions)

    # ---------------------------------------------------------------- targets

    def columns(self) -> list[str]:
        """Rating columns the head predicts (none for a unit-free pairwise score)."""
        return []

    def weights(self) -> list[float]:
        """Weight of each of ``columns()`` in the score (they sum to 1)."""
        return [1.0] * len(self.columns())

    def output_dim(self) -> int:
        return max(1, len(self.columns()))

    def standardised(self, targets: pd.DataFrame) -> tuple[np.ndarray, ScoreMap]:
        columns = self.columns()
        values = targets[columns].to_numpy(dtype=np.float64)
        means = values.mean(axis=0)
        stds = np.maximum(values.std(axis=0), 1e-6)
        return (values - means) / stds, ScoreMap(self.name, columns, means.tolist(), stds.tolist(), self.weights())

    def examples(self, targets: pd.DataFrame) -> tuple[Examples, ScoreMap]:
        raise NotImplementedError

    # ---------------------------------------------------------------- training

    def epoch(self, trainer, head, optimizer, examples: Examples, epoch_seed: int) -> None:
        raise NotImplementedError

    # ---------------------------------------------------------------- scoring

    @classmethod
    def score(cls, outputs: np.ndarray, score_map: ScoreMap) -> np.ndarray:
        """Weighted mean of the de-standardised predicted ratings (rating-scale objectives)."""
        ratings = score_map.ratings(outputs)
        weights = np.asarray(score_map.weights, dtype=np.float64)
        stacked = np.stack([ratings[c] for c in score_map.columns], axis=1)
        return stacked @ weights / weights.sum()

    def observed(self, targets: pd.DataFrame, score_map: ScoreMap) -> tuple[np.ndarray, str]:
        """What a score should match on the rating scale, and its label (calibration)."""
        return targets["effectiveness"].to_numpy(dtype=np.float64), "mean human effectiveness rating"


# ---------------------------------------------------------------------- shared epoch bodies


def pointwise_epoch(trainer, head, optimizer, rows: np.ndarray, targets: np.ndarray, epoch_seed: int) -> None:
    """One pass of MSE over the rows in a seeded order."""
    torch = trainer.torch
    order = trainer.order(len(rows), epoch_seed)
    target_tensor = torch.as_tensor(targets, dtype=torch.float32, device=trainer.device)
    batch_size = trainer.settings.train.batch_size
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        outputs = head(trainer.features_of(rows[batch]))
        loss = torch.nn.functional.mse_loss(outputs, target_tensor[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def pairwise_loss(trainer, head, pairs: np.ndarray):
    """Bradley-Terry loss -log sigmoid(s_w - s_l) of one batch of (preferred, other) rows,
    on the first head output."""
    torch = trainer.torch
    unique, inverse = np.unique(pairs.reshape(-1), return_inverse=True)
    scores = head(trainer.features_of(unique))[:, 0]
    inverse = torch.as_tensor(inverse.reshape(-1, 2), device=scores.device)
    return -torch.nn.functional.logsigmoid(scores[inverse[:, 0]] - scores[inverse[:, 1]]).mean()
