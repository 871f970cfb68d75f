"""The reference bar: the win-rate a claim must beat, pinned with its source.

It lives in ``registry/models.yaml`` under ``reference_bar:`` (beside the promotion gates it
feeds), not in params.yaml: a params change cannot move it. A bar or opponent set in
``stats.bar`` / ``stats.bar_opponent`` that differs from it is a *custom* bar: its claims are
labelled ``custom_bar`` and never satisfy the ``cluster_ci_low_above_bar`` gate.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reappreg.errors import InputError


class ReferenceBar(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bar: float = Field(gt=0.0, lt=1.0)
    opponent: str = Field(min_length=1)
    source: str = Field(min_length=1)


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
