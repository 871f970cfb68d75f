from typing import Literal

from pydantic import Field

from reappreg.settings.base import Section


class StatsSettings(Section):
    """Knobs for the stats stage; owned by the stats package (see reappreg.stats)."""

    # Two-sided confidence level of every interval (iid Wilson and the cluster ones).
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    # A CUSTOM bar. The reference bar (win-rate and opponent) is pinned in
    # registry/models.yaml (`reference_bar:`) and always tested; set these only to test
    # another bar or opponent as well: such claims are labelled `custom_bar` and never
    # satisfy the promotion gate. null = the reference value for that half.
    bar: float | None = Field(None, gt=0.0, lt=1.0)
    bar_opponent: str | None = None
    # "Beats opponent X" claims need the cluster lower bound above this win-rate.
    parity: float = Field(0.5, gt=0.0, lt=1.0)
    # A claim is only tested with at least this many distinct CONTESTS (both orders each).
    min_n_confirm: int = Field(240, ge=1)
    # Unparseable + missing orders over all orders a group should have: above this
    # share nothing in the group is tested (the worst-case bound covers anything below).
    max_unparseable_rate: float = Field(0.05, ge=0.0, le=1.0)
    # Share of contests (or calibration pairs) where the judge named the same position in
    # both orders (A,A) or (B,B), per direction: above this the judge is position-biased.
    max_position_bias: float = Field(0.2, ge=0.0, le=1.0)
    bootstrap_iterations: int = Field(4000, ge=100)
    bootstrap_method: Literal["percentile", "basic", "BCa"] = "percentile"
    # Vignette-cluster bootstrap of the length-controlled win-rate (one GLM fit each).
    lc_bootstrap_iterations: int = Field(400, ge=50)
    seed: int = 0
