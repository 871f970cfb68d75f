"""Multidimensional: joint MSE on the standardised mean ratings of every rating dimension
the data has; the score is their weighted mean on the rating scale (``rm.multidim.weights``,
renormalised over the dimensions present: an absent dimension is neither a target nor in
the score)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.rm.objectives.base import Examples, Objective, ScoreMap, pointwise_epoch


class Multidim(Objective):
    name = "multidim"
    score_units = "weighted mean of the predicted ratings of the dimensions present (rating scale)"
    rating_scale = True

    def columns(self) -> list[str]:
        weights = self.settings.multidim.weights
        columns = [d for d in self.dimensions if weights.get(d, 0.0) > 0]
        if not columns:
            raise InputError(
                f"rm.multidim.weights: no positive weight on a dimension the data has ({', '.join(self.dimensions)})"
            )
        return columns

    def weights(self) -> list[float]:
        raw = np.array([self.settings.multidim.weights[d] for d in self.columns()], dtype=np.float64)
        return (raw / raw.sum()).tolist()

    def examples(self, targets: pd.DataFrame) -> tuple[Examples, ScoreMap]:
        standardised, score_map = self.standardised(targets)
        rows = targets["row"].to_numpy()
        return Examples(rows, standardised, None, len(rows)), score_map

    def epoch(self, trainer, head, optimizer, examples: Examples, epoch_seed: int) -> None:
        pointwise_epoch(trainer, head, optimizer, examples.rows, examples.targets, epoch_seed)

    def observed(self, targets: pd.DataFrame, score_map: ScoreMap) -> tuple[np.ndarray, str]:
        values = targets[score_map.columns].to_numpy(dtype=np.float64)
        weights = np.asarray(score_map.weights, dtype=np.float64)
        return values @ weights / weights.sum(), "observed weighted mean rating (multidim weights)"
