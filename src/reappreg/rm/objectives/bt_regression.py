"""Regression with a Bradley-Terry term: MSE on the standardised mean effectiveness plus
``rm.bt_regression.bt_weight`` x the BT loss over within-vignette preference pairs
(``rm.bt.pair_margin``), on the same single output. The MSE anchors the score to the rating
scale; the pairwise term spends the head's capacity on ordering texts of one vignette,
which is what GRPO compares. The score is the prediction mapped back to the rating scale."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.rm.dataset import preference_pairs
from reappreg.rm.objectives.base import Examples, ScoreMap, pairwise_loss
from reappreg.rm.objectives.regression import Regression


class BtRegression(Regression):
    """Regression's targets and score, plus the within-vignette pairs and the pairwise term."""

    name = "bt_regression"
    score_units = "predicted mean effectiveness rating (rating scale), trained with a pairwise term"

    def examples(self, targets: pd.DataFrame) -> tuple[Examples, ScoreMap]:
        examples, score_map = super().examples(targets)
        pairs = preference_pairs(targets, self.settings.bt.pair_margin)
        if len(pairs) == 0:
            raise InputError(f"rm: no training pairs at rm.bt.pair_margin={self.settings.bt.pair_margin}")
        return replace(examples, pairs=examples.rows[pairs]), score_map

    def epoch(self, trainer, head, optimizer, examples: Examples, epoch_seed: int) -> None:
        torch = trainer.torch
        order = trainer.order(len(examples.rows), epoch_seed)
        pair_order = trainer.order(len(examples.pairs), epoch_seed + 1)
        batch_size = self.settings.train.batch_size
        steps = max(1, -(-len(order) // batch_size))
        targets = torch.as_tensor(examples.targets, dtype=torch.float32, device=trainer.device)
        for step, pair_batch in zip(range(steps), np.array_split(pair_order, steps)):
            batch = order[step * batch_size : (step + 1) * batch_size]
            mse = torch.nn.functional.mse_loss(head(trainer.features_of(examples.rows[batch])), targets[batch])
            loss = mse + self.settings.bt_regression.bt_weight * pairwise_loss(trainer, head, examples.pairs[pair_batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
