"""The two specs a registration statement follows, as strict pydantic models.

in-toto Statement v1 (https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md)
with a SLSA provenance v1 predicate (https://slsa.dev/spec/v1.0/provenance): every field
either spec defines, and nothing else (``extra="forbid"``), so a statement this project
signs is one any in-toto / SLSA consumer parses. Plain JSON in, plain JSON out: no
generated protobuf classes between the statement and its signature.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reappreg.errors import InputError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResourceDescriptor(_Strict):
    """in-toto ResourceDescriptor v1: at least one of uri, digest, content."""

    name: str | None = None
    uri: str | None = None
    digest: dict[str, str] | None = None
    content: str | None = None          # base64
    downloadLocation: str | None = None
    mediaType: str | None = None
    annotations: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _identified(self) -> "ResourceDescriptor":
        if not (self.uri or self.digest or self.content):
            raise ValueError("a resource descriptor needs a uri, a digest or content")
        if self.digest is not None and (not self.digest or any(not v for v in self.digest.values())):
            raise ValueError("a digest names at least one algorithm, each with a value")
        return self


class BuildDefinition(_Strict):
    buildType: str
    externalParameters: dict[str, Any]
    internalParameters: dict[str, Any] | None = None
    resolvedDependencies: list[ResourceDescriptor] | None = None


class Builder(_Strict):
    id: str
    builderDependencies: list[ResourceDescriptor] | None = None
    version: dict[str, str] | None = None


class BuildMetadata(_Strict):
    invocationId: str | None = None
    startedOn: str | None = None         # RFC 3339
    finishedOn: str | None = None


class RunDetails(_Strict):
    builder: Builder
    metadata: BuildMetadata | None = None
    byproducts: list[ResourceDescriptor] | None = None


class Provenance(_Strict):
    buildDefinition: BuildDefinition
    runDetails: RunDetails


class Subject(ResourceDescriptor):
    @model_validator(mode="after")
    def _digested(self) -> "Subject":
        if not self.digest:
            raise ValueError("a subject carries a digest")
        return self


class Statement(_Strict):
    type_: Literal["https://in-toto.io/Statement/v1"] = Field(alias="_type")
    subject: list[Subject] = Field(min_length=1)
    predicateType: str
    predicate: dict[str, Any] | None = None


def check_statement(statement: dict[str, Any]) -> None:
    """Raise InputError naming the field when ``statement`` is not a Statement v1 (with a
    SLSA provenance v1 predicate when its predicateType says so)."""
    try:
        Statement.model_validate(statement)
        if statement.get("predicateType") == SLSA_PROVENANCE_V1:
            Provenance.model_validate(statement.get("predicate"))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:5])
        raise InputError(f"not an in-toto Statement v1 / SLSA provenance v1: {problems}") from None
