"""``registry/models.yaml``: the registered models, their artifacts and inputs, and their gates.

A gate is one declaration -- a name, the key of the signed evidence it reads, a comparison
and either a fixed value or another evidence key -- so adding one is one line of YAML and
no code (see :mod:`reappreg.registry.gates` for how it is evaluated).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reappreg.errors import InputError
from reappreg.evidence.reference import ReferenceBar


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Gate(_Strict):
    """``evidence <op> value`` or ``evidence <op> evidence[than]``, read from the signed evidence only."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    evidence: str = Field(min_length=1)
    op: Literal["==", "!=", ">=", ">", "<=", "<"]
    value: bool | int | float | str | None = None
    than: str | None = None       # another evidence key instead of a fixed value
    source: str | None = None     # where a pinned number comes from (paper, table, run)

    @model_validator(mode="after")
    def _one_reference(self) -> Gate:
        if (self.value is None) == (self.than is None):
            raise ValueError(f"gate '{self.name}': give exactly one of 'value' and 'than'")
        if self.op not in ("==", "!=") and isinstance(self.value, (bool, str)):
            raise ValueError(f"gate '{self.name}': '{self.op}' needs a number, got {self.value!r}")
        return self


class FrontMatter(_Strict):
    license: str
    language: list[str]
    pipeline_tag: str
    library_name: str
    tags: list[str] = []


class ModelDecl(_Strict):
    kind: str = Field(pattern="^(reward-model|policy)$")
    description: str
    artifact: str
    # Text the model was trained on: each must be hashed in a passing guard certificate.
    training_inputs: list[str] = Field(min_length=1)
    # Other inputs recorded as provenance (ratings, the RM a policy was trained against).
    other_inputs: list[str] = []
    card: FrontMatter
    # Card facts: the params key naming the base model, the method in words, the
    # registered RM a policy was trained against, the params shown as hyperparameters
    # (dotted prefixes) and the metrics shown (fnmatch patterns on "<file stem>.<key>").
    base_model_param: str
    method: str
    # Flattened metrics key ("<file stem>.<key>") holding the md5 of the artifact the
    # model's training metrics were computed on (checked at registration).
    artifact_md5_metric: str | None = None
    # A policy's kept checkpoints (``reappreg policy train --checkpoints-out``): a folder of
    # step_<n>/ model folders + manifest.json. Each is registered as its own version of this
    # model, before the final artifact, tagged with its step and training run, its md5 checked
    # against ``<artifact_md5_metric's file>.checkpoints.step_<n>.model_md5``.
    checkpoints: str | None = None
    reward_model: str | None = None
    hyperparameters: list[str] = []
    card_metrics: list[str] = ["*"]
    gates: list[Gate] = []

    @model_validator(mode="after")
    def _unique_gates(self) -> ModelDecl:
        names = [g.name for g in self.gates]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"gate name(s) declared twice: {', '.join(dupes)}")
        return self


# What an alias set in the MLflow UI (a promotion request) may do (README "Promote in the MLflow UI"):
# ``never``: restored (the alias is set by the registry only, e.g. ``candidate`` by registration);
# ``forward``: accepted only onto a version newer than the one the alias's signed state names, whose
# gates pass (a rollback needs ``registry promote --reason``); ``gated``: accepted onto any version
# whose gates pass. Removing an alias in the UI is always restored.
UiPolicy = Literal["never", "forward", "gated"]


class RegistryDecl(_Strict):
    ungated_aliases: list[str] = ["candidate"]
    # alias -> what a UI request may do; ``default`` for every alias not listed.
    ui_requests: dict[str, UiPolicy] = {"candidate": "never", "default": "gated"}
    models: dict[str, ModelDecl] = Field(min_length=1)
    # Hub names of models shipped inside Python packages (``pkg:...`` params values).
    known_models: dict[str, str] = {}
    # The bar claims are tested against, with its source (read by the stats stage).
    reference_bar: ReferenceBar | None = None


def load_declarations(path: str | os.PathLike) -> RegistryDecl:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: registry declarations not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {exc}") from exc
    try:
        decl = RegistryDecl.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"'{'.'.join(str(p) for p in e['loc'])}': {e['msg']}" for e in exc.errors())
        raise InputError(f"{path}: invalid registry declarations: {problems}") from exc
    for name in decl.models:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise InputError(f"{path}: model name '{name}' may only use letters, digits, '.', '_' and '-'")
        rm = decl.models[name].reward_model
        if rm is not None and rm not in decl.models:
            raise InputError(f"{path}: models.{name}.reward_model '{rm}' is not a declared model")
    return decl


class NotDeclared(InputError):
    exit_code = 1


def ui_policy(decl: RegistryDecl, alias: str) -> UiPolicy:
    """What a UI request on ``alias`` may do (its own entry, else ``default``, else ``gated``)."""
    return decl.ui_requests.get(alias, decl.ui_requests.get("default", "gated"))


def declared(decl: RegistryDecl, name: str) -> ModelDecl:
    if name not in decl.models:
        raise NotDeclared(f"model '{name}' is not declared in the registry (declared: {', '.join(sorted(decl.models))})")
    return decl.models[name]


def parse_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``NAME@ALIAS`` -> (name, None, alias); ``NAME/VERSION`` -> (name, version, None).

    MLflow's own ``models:/NAME@ALIAS`` and ``models:/NAME/VERSION`` are accepted too.
    """
    text = spec.removeprefix("models:/")
    if "@" in text:
        name, alias = text.split("@", 1)
        if name and alias and "/" not in name:
            return name, None, alias
    elif "/" in text:
        name, version = text.rsplit("/", 1)
        if name and version.isdigit() and "/" not in name:
            return name, version, None
    raise InputError(f"'{spec}': expected NAME@ALIAS or NAME/VERSION, optionally as models:/… "
                     "(e.g. reappraisal-policy-grpo@champion, models:/reappraisal-policy-grpo/3)")


def gate_table(gates: list[Gate]) -> list[dict[str, Any]]:
    """The declarations as recorded in a signed statement (what was required at the time)."""
    return [g.model_dump(exclude_none=True) for g in gates]
