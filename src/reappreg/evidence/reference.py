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

The judge the bar was measured with is pinned by IDENTITY, not by name (``judge_identity:``):
a win-rate is on one judge's scale, and a name is a label anyone can give any weights (a
local folder named like the bar's judge, rows that say so). A local judge is its weights'
fingerprint (``reappreg.lm.model_fingerprint``: DVC's md5 of the folder or GGUF file, what
the judge stage records as ``judge_fingerprint``); an API judge is the provider and model id
its server reports (``reappreg.judge.http``). A bar claim whose judgments' fingerprint is not
the pinned identity is ``judge_mismatch``, whatever ``judge_model`` says (:func:`judge_matches`).
"""

from __future__ import annotations

from pathlib import Path

import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

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


# A local judge's fingerprint: DVC's md5 of its GGUF file or of its whole folder (``.dir``).
WEIGHTS_FINGERPRINT = re.compile(r"md5:[0-9a-f]{32}(\.dir)?")
# An API judge's fingerprint (reappreg.judge.http): ``served:<model id>:<provider>:<digest>``,
# the digest over everything else the server reports about the model (16 hex characters).
SERVED_FINGERPRINT = re.compile(r"served:(?P<model_id>.+):(?P<provider>[^:]+):(?P<digest>[0-9a-f]{16})")


class JudgeIdentity(BaseModel):
    """Who a judge is, beyond its name: exactly one of

    * ``weights_md5``: a local judge (transformers or vLLM backend), the fingerprint of its
      weights; a folder named like the bar's judge with other weights has another md5;
    * ``provider`` + ``model_id``: an API judge, as its server reports the model (the
      ``owned_by`` and ``id`` of its ``GET /models`` entry). Only as strong as the provider's word:
      whoever serves other weights under the pinned id and provider is not detected here.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights_md5: str | None = Field(None, pattern=WEIGHTS_FINGERPRINT.pattern)
    provider: str | None = Field(None, min_length=1, pattern=r"^[^:]+$")
    model_id: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_kind(self) -> "JudgeIdentity":
        api = (self.provider is not None, self.model_id is not None)
        if self.weights_md5 is not None and any(api):
            raise ValueError("give weights_md5 (a local judge) or provider + model_id (an API judge), not both")
        if self.weights_md5 is None and api != (True, True):
            raise ValueError("a judge identity needs weights_md5 (a local judge) or both provider and model_id "
                             "(an API judge)")
        return self

    @classmethod
    def of_fingerprint(cls, fingerprint: str | None) -> "JudgeIdentity | None":
        """The identity a judge stage's ``judge_fingerprint`` records; None when it records none
        (an unknown format, or a served fingerprint written before providers were recorded)."""
        if not isinstance(fingerprint, str):
            return None
        if WEIGHTS_FINGERPRINT.fullmatch(fingerprint):
            return cls(weights_md5=fingerprint)
        served = SERVED_FINGERPRINT.fullmatch(fingerprint)
        if served:
            return cls(provider=served["provider"], model_id=served["model_id"])
        return None

    def describe(self) -> str:
        if self.weights_md5 is not None:
            return f"local weights {self.weights_md5}"
        return f"API model {self.model_id!r} of provider {self.provider!r}"


class ReferenceBar(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bar: float = Field(gt=0.0, lt=1.0)
    opponent: str = Field(min_length=1)
    # The judge the bar was measured with, by name (what the card prints) and by identity (what a
    # bar claim is matched on): a win-rate is on one judge's scale (a weak judge pulls it towards
    # 0.5), so a claim decided by another judge is `judge_mismatch` and never supported.
    judge: str = Field(min_length=1)
    judge_identity: JudgeIdentity
    source: str = Field(min_length=1)
    decision: DecisionFloors | None = None


def judge_matches(reference: ReferenceBar, fingerprint: str | None) -> tuple[bool, str]:
    """(whether judgments with this ``judge_fingerprint`` were judged by the bar's pinned judge, why).

    Only the identity counts: the judgments' ``judge_model`` is a label (a folder name, a served
    name) and is not consulted, so rows naming the bar's judge, or a local folder named like it,
    match only with the pinned weights (or the pinned provider and model id)."""
    pinned = reference.judge_identity
    found = JudgeIdentity.of_fingerprint(fingerprint)
    if found is None:
        return False, (f"the judgments' fingerprint {fingerprint!r} names no judge identity (local weights md5 or "
                       f"served provider and model id); the bar's judge is {pinned.describe()}")
    if found == pinned:
        return True, f"the judgments' judge is the bar's: {pinned.describe()}"
    return False, f"the bar's judge is {pinned.describe()}; these judgments come from {found.describe()}"


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
