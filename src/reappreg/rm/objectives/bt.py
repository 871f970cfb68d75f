"""Bradley-Terry: -log sigmoid(s_w - s_l) over within-vignette pairs ordered by mean human
effectiveness (pairs closer than ``rm.bt.pair_margin`` are not used). The score is the
logit s (unit-free; only differences matter)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.rm.dataset import preference_pairs
from reappreg.rm.objectives.base import Examples, Objective, ScoreMap, pairwise_loss


class BradleyTerry(Objective):
    name = "bt"
    score_units = "Bradley-Terry logit (unit-free; only differences matter)"
    rating_scale = False

    def examples(self, targets: pd.DataFrame) -> tuple[Examples, ScoreMap]:
        margin = self.settings.bt.pair_margin
        rows = targets["row"].to_numpy()
        pairs = preference_pairs(targets, margin)
        if len(pairs) == 0:
            raise InputError(f"rm: no training pairs at rm.bt.pair_margin={margin} (all mean ratings too close)")
        return Examples(rows, None, rows[pairs], len(pairs)), ScoreMap(self.name)

    def epoch(self, trainer, head, optimizer, examples: Examples, epoch_seed: int) -> None:
        order = trainer.order(len(examples.pairs), epoch_seed)
        batch_size = self.settings.bt.pair_batch_size
        for start in range(0, len(order), batch_size):
            loss = pairwise_loss(trainer, head, examples.pairs[order[start : start + batch_size]])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    @classmethod
    def score(cls, outputs: np.ndarray, score_map: ScoreMap) -> np.ndarray:
        return np.asarray(outputs, dtype=np.float64)[:, 0]
