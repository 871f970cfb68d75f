"""Params of the pipeline report (``report`` section of params.yaml)."""

from pydantic import Field

from reappreg.settings.base import Section


class ReportSettings(Section):
    # "The policy's own words": this many generations per vignette and model condition
    # (the final policy, the base model, each kept checkpoint), the first ones by sample
    # index, each with its RM reward, format-gate result and the judge's verdicts.
    samples_per_vignette: int = Field(2, ge=1, le=20)
