"""The reference bar: the win-rate a claim must beat, pinned with its source.

It lives in ``registry/models.yaml`` under ``reference_bar:`` (beside the promotion gates it
feeds), not in params.yaml: a params change cannot move it. A bar or opponent set in
``stats.bar`` / ``stats.bar_opponent`` that differs from it is a *custom* bar: its claims are
labelled ``custom_bar`` and never satisfy the ``cluster_ci_low_above_bar`` gate.

The settings that decide a claim against the bar are pinned beside it (``decision:``): the
confidence, the minimum number of contests, the judge's agreement floor and minimum
calibration pairs, the position-bias and unparseable ceilings. params.yaml may make them
stricter, never looser: :func:`check_decision_settings` fails the stats stages at load,
naming every loosened key, before anything is computed.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reappreg.errors import InputError


class DecisionFloors(BaseModel):
    """The loosest decision settings a claim against the bar may use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    confidence: float = Field(gt=0.5, lt=1.0)              # params stats.confidence >= this
    min_n_confirm: int = Field(ge=1)                      # params stats.min_n_confirm >= this
    min_agreement: float = Field(gt=0.5, le=1.0)          # params judge.min_agreement >= this
    calibration_min_pairs: int = Field(ge=1)              # params judge.calibration_min_pairs >= this
    max_position_bias: float = Field(ge=0.0, le=1.0)      # params stats.max_position_bias <= this
    max_unparseable_rate: float = Field(ge=0.0, le=1.0)   # params stats.max_unparseable_rate <= this


# floor key -> (params key, True when a larger params value is stricter)
DECISION_KEYS = {
    "confidence": ("stats.confidence", True),
    "min_n_confirm": ("stats.min_n_confirm", True),
    "min_agreement": ("judge.min_agreement", True),
    "calibration_min_pairs": ("judge.calibration_min_pairs", True),
    "max_position_bias": ("stats.max_position_bias", False),
    "max_unparseable_rate": ("stats.max_unparseable_rate", False),
}


class ReferenceBar(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bar: float = Field(gt=0.0, lt=1.0)
    opponent: str = Field(min_length=1)
    # The judge the bar was measured with: a win-rate is on one judge's scale (a weak judge pulls
    # it towards 0.5), so a claim decided by another judge is `judge_mismatch` and never supported.
    judge: str = Field(min_length=1)
    source: str = Field(min_length=1)
    decision: DecisionFloors | None = None


def judge_key(model: str) -> str:
    """A judge model's name for comparison: its last path component (a served model id, a hub id
    ``org/name`` or a local folder all end in the model's name), NFKC-normalised and case-folded.
    Names are what a judge's records carry; a different model served under the bar judge's name
    is not detected here (README, statistics)."""
    import unicodedata

    return unicodedata.normalize("NFKC", model).strip().rstrip("/").rsplit("/", 1)[-1].casefold()


def decision_values(stats, judge) -> dict[str, float]:
    """The decision settings in force, by params key, from the validated ``stats`` and ``judge`` sections."""
    sections = {"stats": stats, "judge": judge}
    return {params_key: getattr(sections[params_key.split(".")[0]], params_key.split(".")[1])
            for params_key, _ in DECISION_KEYS.values()}


def check_decision_settings(reference: ReferenceBar, values: dict[str, float], where: str) -> dict[str, float]:
    """``values``: params key (``stats.confidence``, ...) -> the value in force. Raises InputError
    naming every key that is looser than the pinned floor; returns the values checked."""
    if reference.decision is None:
        raise InputError(f"{where}: reference_bar has no 'decision:' floors (confidence, min_n_confirm, min_agreement, "
                         "calibration_min_pairs, max_position_bias, max_unparseable_rate); a claim needs them pinned")
    loose = []
    for floor_key, (params_key, larger_is_stricter) in DECISION_KEYS.items():
        floor, value = getattr(reference.decision, floor_key), values[params_key]
        if (value < floor) if larger_is_stricter else (value > floor):
            loose.append(f"{params_key} = {value} is looser than the pinned {floor} "
                         f"(reference_bar.decision.{floor_key}: {'at least' if larger_is_stricter else 'at most'} that)")
    if loose:
        raise InputError(f"params loosen the decision settings pinned beside the bar in {where}: " + "; ".join(loose))
    return {key: values[key] for key, _ in DECISION_KEYS.values()}


def load_reference_bar(path: str | Path) -> ReferenceBar:
    """``reference_bar:`` of the registry declarations file; an error names what is wrong."""
    from reappreg.io import read_yaml

    raw = read_yaml(path)
    if not isinstance(raw, dict) or "reference_bar" not in raw:
        raise InputError(f"{path}: no 'reference_bar:' entry (bar, opponent, source); the claims need it")
    try:
        return ReferenceBar.model_validate(raw["reference_bar"])
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'reference_bar'}: {e['msg']}"
                             for e in exc.errors())
        raise InputError(f"{path}: invalid reference_bar: {problems}") from exc
