"""Reward heads and resumable, deterministic training (the objectives: ``reappreg.rm.objectives``).

Training state is checkpointed after every epoch (head, fine-tuned encoder layers,
optimiser, epoch) under the stage's work folder; a restarted stage whose checkpoint has
the same fingerprint (data hashes + params) continues from the next epoch. Each epoch's
shuffling and dropout are seeded from (seed, run, epoch), so a resumed run gives the same
weights as an uninterrupted one.

Bit-for-bit reproducibility on CPU: :func:`deterministic_torch` fixes the intra-op thread
count (``rm.threads``; float reductions are summed in an order that depends on it) and
turns on torch's deterministic algorithms for the whole stage, and data order and dropout
are seeded as above; machine load then changes only how long a stage takes, not its bytes
(tests/rm/test_rm_determinism.py runs a stage twice in separate processes, once under load).
"""

from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from reappreg.io import atomic_path
from reappreg.rm.dataset import RatedPool, mean_targets
from reappreg.rm.objectives.base import Objective, ScoreMap


@contextlib.contextmanager
def deterministic_torch(threads: int):
    """Fixed intra-op threads and deterministic algorithms for the duration of a stage."""
    import torch

    previous = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(previous[0])
        torch.use_deterministic_algorithms(previous[1])


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
    """Trains one objective/seed on the pool; features are cached when the encoder is frozen,
    the frozen layers' outputs when its top layers are fine-tuned."""

    def __init__(self, *, pool: RatedPool, encoder, objective: Objective, seed: int, settings, progress=None,
                 cache_frozen_layers: bool = True):
        """``cache_frozen_layers`` (fine-tuning only; False exists for the equivalence test and
        the benchmark): run the frozen layers once per text and only the fine-tuned ones per
        epoch, instead of the whole encoder per batch."""
        import torch

        self.torch = torch
        self.pool = pool
        self.encoder = encoder
        self.device = encoder.device
        self.objective = objective
        self.seed = seed
        self.settings = settings
        self.train = settings.train
        self.encoder_batch_size = settings.encoder.batch_size
        self.progress = progress
        self.finetune = bool(encoder.trainable_names)
        self.base_delta = encoder.delta_state()
        self.features = None
        self.prefix = None  # fine-tuning: the frozen layers' output per text (TextEncoder.frozen_prefix)
        self.scenario_cosine = None  # the trivial scenario-answer ranker, when the cache pass gives it
        if self.finetune and cache_frozen_layers:
            self.prefix = encoder.frozen_prefix(pool.scenarios, pool.texts, self.encoder_batch_size, progress)
        if not self.finetune:
            # Frozen encoder: one forward pass over the pool, reused by every run of the stage.
            if encoder.pooling == "answer_mean":
                self.features, cosine = encoder.embed(pool.scenarios, pool.texts, self.encoder_batch_size, progress,
                                                      "encoding pool", with_cosine=True)
                self.scenario_cosine = cosine.numpy().astype(np.float64)
            else:
                self.features = encoder.embed(pool.scenarios, pool.texts, self.encoder_batch_size, progress,
                                              "encoding pool")

    # ------------------------------------------------------------------ features

    def features_of(self, rows: np.ndarray):
        """Features of pool rows on the training device (cached, or through the fine-tuned encoder)."""
        if self.features is not None:
            return self.features[self.torch.as_tensor(np.asarray(rows, dtype=np.int64).copy())].to(self.device)
        if self.prefix is not None:
            return self.encoder.features_from_prefix(self.prefix, rows)
        scenarios = [self.pool.scenarios[i] for i in rows]
        texts = [self.pool.texts[i] for i in rows]
        return self.encoder.features(scenarios, texts)

    def order(self, n: int, epoch_seed: int) -> np.ndarray:
        generator = self.torch.Generator().manual_seed(epoch_seed)
        return self.torch.randperm(n, generator=generator).numpy()

    # ------------------------------------------------------------------ training

    def fit(self, run: str, ratings: pd.DataFrame, checkpoint_dir: Path, fingerprint: str,
            checkpoint_every_epoch: bool = True) -> Fitted:
        """Train one run. ``checkpoint_every_epoch=False`` writes the training state once, when the
        run ends: a restarted stage still skips a finished run, and redoes an unfinished one whole
        (for the two-part cross-fitting's many short runs, writing the state every epoch costs
        about a fifth of their CPU time)."""
        torch = self.torch
        examples, score_map = self.objective.examples(mean_targets(self.pool, ratings))
        torch.manual_seed(run_seed(self.seed, run, -1))
        head = make_head(self.encoder.dim, self.train.hidden, self.objective.output_dim(), self.train.dropout)
        head.to(self.device)
        self.encoder.load_delta(self.base_delta)  # every run starts from the base encoder
        groups = [{"params": head.parameters(), "lr": self.train.learning_rate}]
        if self.finetune:
            groups.append({"params": self.encoder.trainable_parameters(), "lr": self.train.encoder_learning_rate})
        optimizer = torch.optim.AdamW(groups, weight_decay=self.train.weight_decay)

        checkpoint = Path(checkpoint_dir) / "checkpoint.pt"
        start_epoch, resumed = 0, None
        if checkpoint.exists():
            state = torch.load(checkpoint, map_location=self.device, weights_only=False)
            if state.get("fingerprint") == fingerprint:
                head.load_state_dict(state["head"])
                self.encoder.load_delta(state["delta"])
                optimizer.load_state_dict(state["optimizer"])
                start_epoch = resumed = int(state["epoch"]) + 1
            # A different fingerprint means other data or params: start over (overwritten below).

        epochs = self.train.epochs
        task = None
        if self.progress is not None:
            task = self.progress.add_task(f"{self.objective.name} seed {self.seed} · {run}", total=epochs,
                                          completed=start_epoch)
        for epoch in range(start_epoch, epochs):
            epoch_seed = run_seed(self.seed, run, epoch)
            torch.manual_seed(epoch_seed)  # dropout
            head.train()
            self.objective.epoch(self, head, optimizer, examples, epoch_seed)
            if checkpoint_every_epoch or epoch == epochs - 1:
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
            n_train_examples=examples.count,
            epochs=epochs,
            resumed_from_epoch=resumed,
        )

    # ------------------------------------------------------------------ prediction

    def predict_outputs(self, fitted: Fitted, rows: np.ndarray) -> np.ndarray:
        """Head outputs for pool rows under a fitted run (restores that run's encoder delta)."""
        torch = self.torch
        head = make_head(self.encoder.dim, self.train.hidden, self.objective.output_dim(), self.train.dropout)
        head.load_state_dict(fitted.head_state)
        head.to(self.device).eval()
        self.encoder.load_delta(fitted.delta_state)
        outputs = []
        with torch.no_grad():
            for start in range(0, len(rows), self.encoder_batch_size):
                outputs.append(head(self.features_of(rows[start : start + self.encoder_batch_size])).cpu().numpy())
        if not outputs:
            return np.zeros((0, self.objective.output_dim()))
        return np.concatenate(outputs).astype(np.float64)

    def predict_scores(self, fitted: Fitted, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(head outputs, scores) of pool rows under a fitted run."""
        outputs = self.predict_outputs(fitted, rows)
        return outputs, self.objective.score(outputs, fitted.score_map)
