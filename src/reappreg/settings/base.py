"""Shared base for params sections: unknown keys are errors, so a typo is named, not ignored."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())
