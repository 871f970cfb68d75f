"""Regression: MSE on the standardised mean effectiveness rating; the score is the
prediction mapped back to the rating scale."""

from __future__ import annotations

import pandas as pd

from reappreg.rm.objectives.base import Examples, Objective, ScoreMap, pointwise_epoch


class Regression(Objective):
    name = "regression"
    score_units = "predicted mean effectiveness rating (rating scale)"
    rating_scale = True

    def columns(self) -> list[str]:
        return ["effectiveness"]

    def examples(self, targets: pd.DataFrame) -> tuple[Examples, ScoreMap]:
        standardised, score_map = self.standardised(targets)
        rows = targets["row"].to_numpy()
        return Examples(rows, standardised, None, len(rows)), score_map

    def epoch(self, trainer, head, optimizer, examples: Examples, epoch_seed: int) -> None:
        pointwise_epoch(trainer, head, optimizer, examples.rows, examples.targets, epoch_seed)
