"""The registration statement: plain in-toto Statement v1 / SLSA provenance v1 JSON, checked field by field."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest

from reappreg.errors import InputError
from reappreg.registry.provenance import (
    AttestedVersion,
    Provenance,
    material,
    statement,
)
from reappreg.registry.slsa import check_statement

VERSION = AttestedVersion(name="m", version="3", run_id="r" * 32, source="mlflow-artifacts:/x",
                          subjects={"MLmodel": "a" * 64, "data/grpo/model.safetensors": "b" * 64}, tags={"t": "v"})
PROVENANCE = Provenance(
    registration={"registration_key": "k", "gates": [{"name": "g"}]},
    materials=[material("data/train/ratings.jsonl", "c" * 32), material("models/rm/ensemble", "d" * 32 + ".dir")],
    flat_evidence={"judge.n_pairs": 240, "eval.win_rate": 0.61}, gate_results=[{"gate": "g", "ok": True}],
    builder={"id": "reappreg registry register (ci)", "version": {"reappreg": "0.1"}}, started="2026-12-04T00:00:00Z")


def _statement(**overrides) -> dict:
    return statement(VERSION, dataclasses.replace(PROVENANCE, **overrides))


def test_a_statement_is_plain_json_with_its_types_kept():
    stmt = _statement()
    check_statement(stmt)
    assert stmt["_type"] == "https://in-toto.io/Statement/v1" and stmt["predicateType"] == "https://slsa.dev/provenance/v1"
    assert [s["name"] for s in stmt["subject"]] == ["MLmodel", "data/grpo/model.safetensors"]
    evidence = stmt["predicate"]["runDetails"]["byproducts"][0]["annotations"]
    assert evidence["judge.n_pairs"] == 240 and isinstance(evidence["judge.n_pairs"], int)  # not a protobuf double
    deps = stmt["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps[1] == {"name": "models/rm/ensemble", "digest": {"md5": "d" * 32}, "annotations": {"dvc_dir_hash": True}}


@pytest.mark.parametrize("edit, said", [
    (lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"), "_type"),
    (lambda s: s.update(subject=[]), "subject"),
    (lambda s: s["subject"][0].pop("digest"), "subject.0"),
    (lambda s: s["subject"][0].update(digest={}), "subject.0"),
    (lambda s: s.update(extra="field"), "extra"),
    (lambda s: s["predicate"]["buildDefinition"].update(buildtype="typo"), "buildDefinition.buildtype"),
    (lambda s: s["predicate"]["runDetails"].pop("builder"), "runDetails.builder"),
    (lambda s: s["predicate"]["runDetails"]["builder"].update(id=3), "builder.id"),
    (lambda s: s["predicate"]["buildDefinition"]["resolvedDependencies"].append({"name": "no digest"}), "resolvedDependencies.2"),
    (lambda s: s["predicate"].update(materials=[]), "materials"),
])
def test_a_field_either_spec_does_not_define_or_requires_is_named(edit, said):
    stmt = copy.deepcopy(_statement())
    edit(stmt)
    with pytest.raises(InputError, match="not an in-toto Statement v1") as err:
        check_statement(stmt)
    assert said in str(err.value)


def test_a_value_canonical_json_cannot_carry_is_refused_when_the_statement_is_built():
    with pytest.raises(ValueError, match="not JSON compliant"):
        _statement(flat_evidence={"eval.win_rate": math.nan})
