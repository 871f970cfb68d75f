"""The per-model facts a card shows besides the evidence (``CardInputs``): its own module, so
the card's front matter (``card.meta``) and its builder (``card.build``) both read it and
neither imports the other's types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reappreg.evidence.health import TrainingHealth


@dataclass
class CardInputs:
    """The per-model facts a card shows besides the evidence."""

    name: str
    kind: str
    description: str
    front_matter: dict[str, Any]
    gates: dict[str, Any]
    training_inputs: dict[str, str]     # path -> md5
    other_inputs: dict[str, str]        # path -> md5
    hyperparameters: dict[str, Any]     # flattened params shown in the card
    method: dict[str, Any]              # base model, method, rm used (strings from params/declarations)
    metrics: list[tuple[str, Any]]      # metrics shown (key, value)
    revision: dict[str, Any]            # commit, dirty ("true"/"false"), dirty_paths, dirty_allowed, commands
    health: TrainingHealth | None       # policies only
    paths: dict[str, str]               # evidence source name -> path as shown on the card
    min_n_confirm: int
    decimals: int = 3
    # The reference bar (registry/models.yaml `reference_bar:`): {"bar", "opponent"}; None when not declared.
    # A policy card's model-index leads with its win-rate against this opponent.
    reference_bar: dict[str, Any] | None = None
    confidence: float | None = None     # stats.confidence: the level of every interval the card states
    # The results table rows (metrics/results.json) of the condition this version is: `policy` for
    # the final policy, `policy-step-<n>` for a kept checkpoint. The card links to them by row_id.
    results_rows: list[dict[str, Any]] = field(default_factory=list)
    # A kept checkpoint: {step, final_step, folder, model_md5, training_run_id, condition}; None otherwise.
    checkpoint: dict[str, Any] | None = None
    # Evaluation rows the card shows instead of eval.json's (a checkpoint: its own results rows).
    comparisons: list[dict[str, Any]] | None = None


__all__ = ["CardInputs"]
