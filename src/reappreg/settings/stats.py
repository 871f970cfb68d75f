from typing import Literal

from pydantic import Field

from reappreg.settings.base import Section


class StatsSettings(Section):
    """Knobs for the stats stage; owned by the stats module (see reappreg.stats)."""

    # Two-sided confidence level of every interval (iid Wilson and vignette-cluster).
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    # The bar to beat (the seeds' reference win-rate) and the opponent it is measured against.
    bar: float = Field(0.608, gt=0.0, lt=1.0)
    bar_opponent: str = "gpt-4-0314"
    # "Beats opponent X" claims need the cluster lower bound above this win-rate.
    parity: float = Field(0.5, gt=0.0, lt=1.0)
    # A claim is only tested with at least this many scored (parseable) judgments.
    min_n_confirm: int = Field(240, ge=1)
    # Which vignette-cluster lower bound the claims use: the smaller of the two
    # (conservative), the cluster bootstrap's, or the cluster-robust SE's (t, G-1 df).
    claim_interval: Literal["min_of_both", "bootstrap", "cluster_se"] = "min_of_both"
    bootstrap_iterations: int = Field(4000, ge=100)
    bootstrap_method: Literal["percentile", "basic", "BCa"] = "percentile"
    seed: int = 0
