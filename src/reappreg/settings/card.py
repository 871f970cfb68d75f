"""Params of the model cards (``card`` section of params.yaml)."""

from pydantic import Field

from reappreg.settings.base import Section


class CardHealthSettings(Section):
    # The card calls a policy's training healthy only if the training monitor did AND, over the
    # recorded completions, at most this share hit the format gate (penalised for breaking the
    # prompt's format) ...
    max_format_gate_hit_rate: float = Field(0.25, ge=0, le=1)
    # ... and at most this share was cut off at policy.train.max_completion_length.
    max_truncation_rate: float = Field(0.25, ge=0, le=1)


class CardSettings(Section):
    health: CardHealthSettings = CardHealthSettings()
