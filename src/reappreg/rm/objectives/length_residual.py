"""Length-controlled multidim: what the ratings say beyond length.

Each target column of ``multidim`` (the rating dimensions the data has, weighted by
``rm.multidim.weights``) is replaced by its residual from a least-squares fit on length
features alone (``reappreg.rm.trivial.LengthRegression``: characters, words, log
characters), fitted on the run's training texts only; the head learns the standardised
residuals with MSE. A score that tracks length can then only come from what length and
content share in the features, not from the targets: on ratings where longer texts tend
to be better, a plain objective learns "longer is better" as a shortcut a policy can
game; this one is trained not to.

The score is the weighted mean of the predicted residuals plus the training mean of each
rating: the predicted rating of this content at the pool's average length (rating units).
Its calibration is against the observed ratings, length effect included, so it is
expected to look flatter than multidim's by the part of the ratings length explains.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.rm.objectives.base import Examples, ScoreMap
from reappreg.rm.objectives.multidim import Multidim
from reappreg.rm.trivial import LengthRegression


class LengthResidual(Multidim):
    """Multidim's columns, weights and score, on targets with the length fit taken out."""

    name = "length_residual"
    score_units = ("weighted mean of the predicted ratings beyond what length predicts, at the pool's average "
                   "length (rating units)")

    def examples(self, targets: pd.DataFrame) -> tuple[Examples, ScoreMap]:
        if "text" not in targets.columns:
            raise InputError("rm objective length_residual: the training targets carry no texts to measure length on")
        columns = self.columns()
        texts = targets["text"].tolist()
        values = targets[columns].to_numpy(dtype=np.float64)
        residuals = np.column_stack([values[:, i] - LengthRegression(texts, values[:, i]).predict(texts)
                                     for i in range(len(columns))])
        stds = np.maximum(residuals.std(axis=0), 1e-6)
        # OLS with an intercept leaves residuals of mean 0: the score's offset is the rating mean.
        standardised = (residuals - residuals.mean(axis=0)) / stds
        score_map = ScoreMap(self.name, columns, values.mean(axis=0).tolist(), stds.tolist(), self.weights())
        rows = targets["row"].to_numpy()
        return Examples(rows, standardised, None, len(rows)), score_map

    def observed(self, targets: pd.DataFrame, score_map: ScoreMap) -> tuple[np.ndarray, str]:
        observed, _ = super().observed(targets, score_map)
        return observed, "observed weighted mean rating, length effect included (multidim weights)"
