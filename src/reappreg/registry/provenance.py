"""What registration asserts about a version: an in-toto Statement v1 with a SLSA provenance v1 predicate.

* ``subject``: every file of the registered MLflow Model folder with its sha256.
* ``predicate.buildDefinition.resolvedDependencies`` (the SLSA "materials"): every input
  with its DVC md5 -- training text, ratings, base models, the RM a policy was trained
  against, the metrics, claims and calibration files -- and the guard certificate with
  its digest and result.
* ``predicate.buildDefinition.externalParameters``: model name, version, registration key,
  the artifact folder's DVC md5, the params hash, the git commit, the gate declarations.
* ``predicate.runDetails``: the builder (who, with which reappreg/mlflow), the MLflow run,
  and two byproducts: the flat evidence dict every gate reads, and the readable tag copy.

Reading the evidence from the card's file contracts (``reports/claims.json``,
``metrics/*.json``, the calibration) flattens whatever keys they hold, so keys added by
other stages become evidence a gate can name without a code change here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reappreg.evidence.flat import flatten
from reappreg.hashing import dvc_md5
from reappreg.registry.slsa import SLSA_PROVENANCE_V1 as PREDICATE_TYPE
from reappreg.registry.slsa import STATEMENT_TYPE

BUILD_TYPE = "https://github.com/reappreg/reappreg/registry-register/v1"
EVIDENCE_BYPRODUCT = "reappreg.evidence"
TAGS_BYPRODUCT = "reappreg.tags"
GATES_BYPRODUCT = "reappreg.gates_at_registration"
# The card: its artifact path in the registration run, its sha256 and the sha256 of the version's
# description (the card as the UI shows it). ``pull`` prints only this card.
CARD_BYPRODUCT = "reappreg.card"


def evidence_of(kind: str, evidence: Any, *, health: Any, max_completion_length: int | None) -> dict[str, Any]:
    """The flat evidence a gate may read (``evidence`` is a ``reappreg.card.build.Evidence``).

    Keys: ``guard.*`` (result, certificate md5, its summary), ``judge.*`` (the calibration
    file, flattened; ``judge.trusted`` is recomputed from its numbers, never its cached flag),
    ``eval.<metric key>`` (every key of metrics/eval.json), ``eval.bar.*`` (the bar claim and
    the metrics of its opponent), ``claims.<id>.*``, ``rm.<file>.<key>`` and
    ``policy.<file>.<key>`` (metrics folders), ``results.<key>`` (metrics/results.json,
    flattened), ``training.healthy`` and ``training.verdict``: the card's verdict (training
    monitor AND format-gate AND truncation gates, ``health``: CardHealthSettings), so a run
    the card calls unhealthy or not established can never pass ``healthy_training``.
    """
    cert = evidence.certificate
    out: dict[str, Any] = {"model.kind": kind, "guard.result": cert.result, "guard.certificate_md5": cert.md5}
    out.update({f"guard.{k}": v for k, v in cert.summary.items()})
    out.update(flatten(evidence.calibration, "judge"))
    out["judge.trusted"] = evidence.judge_trusted
    out["judge.model"] = evidence.judge_model
    out.update({f"eval.{k}": v for k, v in evidence.eval_metrics.items() if not isinstance(v, (dict, list))})
    claim = evidence.bar_claim("policy")
    if claim is not None:
        prefix = f"policy/{claim.get('opponent')}"
        out.update({f"eval.bar.claim.{k}": v for k, v in claim.items() if isinstance(v, (str, int, float, bool)) or v is None})
        out["eval.bar.reference"] = claim.get("opponent")
        out["eval.bar.threshold"] = claim.get("threshold")
        for col in ("n", "win_rate", "iid_low", "cluster_low", "n_eff"):
            out[f"eval.bar.{col}"] = evidence.eval_metrics.get(f"{prefix}/{col}")
    for c in evidence.claims:
        cid = c.get("claim_id")
        if cid is not None:
            out.update({f"claims.{cid}.{k}": v for k, v in c.items() if isinstance(v, (str, int, float, bool)) or v is None})
    out["claims.supported"] = sorted(str(c["claim_id"]) for c in evidence.claims if c.get("supported") and "claim_id" in c)
    out.update({f"rm.{k}": v for k, v in evidence.rm_metrics.items()})
    out.update({f"policy.{k}": v for k, v in evidence.policy_metrics.items()})
    out.update({f"results.{k}": v for k, v in evidence.results.items()})
    verdict = evidence.training_health(health, max_completion_length)
    out["training.verdict"] = verdict.verdict
    out["training.healthy"] = verdict.verdict == "healthy"
    out["training.monitor_healthy"] = evidence.training_healthy
    return {k: v for k, v in sorted(out.items()) if _jsonable(v)}


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


def _tag_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def readable_tags(model: Any, flat_evidence: Mapping[str, Any], evidence: Any, *,
                  input_md5s: Mapping[str, str], git: Mapping[str, str]) -> dict[str, str]:
    """Version tags for the MLflow UI -- a copy of the signed statement, never read by a gate."""
    tags: dict[str, str] = {"git.commit": git.get("git.commit", "none"), "git.dirty": git.get("git.dirty", "unknown"),
                            "model.kind": model.kind}
    for path, md5 in sorted(input_md5s.items()):
        tags[f"md5.{path}"] = md5
    for path in sorted(str(p) for p in evidence.sources.values()):
        tags[f"md5.{path}"] = dvc_md5(path)
    tags["guard.result"] = str(flat_evidence["guard.result"])
    tags["guard.certificate_md5"] = str(flat_evidence["guard.certificate_md5"])
    if model.kind == "policy":
        if "eval.bar.reference" in flat_evidence:
            tags.update({
                "eval.reference": _tag_value(flat_evidence["eval.bar.reference"]),
                "eval.bar": _tag_value(flat_evidence["eval.bar.threshold"]),
                "eval.bar_claim_status": _tag_value(flat_evidence.get("eval.bar.claim.status")),
                "eval.n": _tag_value(flat_evidence["eval.bar.n"]),
                "eval.win_rate": _tag_value(flat_evidence["eval.bar.win_rate"]),
                "eval.iid_ci_low": _tag_value(flat_evidence["eval.bar.iid_low"]),
                "eval.cluster_ci_low": _tag_value(flat_evidence["eval.bar.cluster_low"]),
                "eval.n_eff": _tag_value(flat_evidence["eval.bar.n_eff"]),
            })
        summary = {f"{r['condition']}/{r['opponent']}": {k: r[k] for k in ("win_rate", "n", "cluster_low", "n_eff")}
                   for r in evidence.comparisons()}
        tags["eval.summary"] = json.dumps(summary, sort_keys=True, separators=(",", ":"))
        tags["eval.supported_claims"] = ", ".join(flat_evidence["claims.supported"]) or "none"
        tags["judge.trusted"] = _tag_value(flat_evidence["judge.trusted"])
        tags["judge.model"] = _tag_value(flat_evidence["judge.model"])
        healthy = flat_evidence["training.healthy"]
        tags["training.healthy"] = "unknown" if healthy is None else _tag_value(healthy)
    return tags


def params_md5(params: Mapping[str, Any]) -> str:
    return hashlib.md5(json.dumps(params, sort_keys=True, default=str).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class AttestedVersion:
    """The registered version a statement is about: the model ``name`` and ``version`` number, the
    MLflow run (``run_id``) and artifact URI (``source``) its folder was logged to, every file of that
    folder with its sha256 (``subjects``) and the readable ``tags`` the version carries. One object
    because registration knows them only once the version exists, all at that moment, and hands
    them together to the caller's ``attest`` hook."""

    name: str
    version: str
    run_id: str
    source: str
    subjects: Mapping[str, str]
    tags: Mapping[str, str]
    card: Mapping[str, str] | None = None
    # The trust version (origin, root, targets) the statement is signed under (reappreg.trust).
    trust: Mapping[str, object] | None = None


@dataclass(frozen=True)
class Provenance:
    """How a version was made and judged, as the statement records it: the ``registration``
    parameters (registration key, artifact hash, params hash, commit, gate declarations), the ``materials`` (every input with its digest), the ``flat_evidence`` the gates read and
    their ``gate_results``, the ``builder`` (who, with which packages) and when registration
    ``started``. One object because the registration plan has all of it for a folder before the
    version exists, and none of it depends on the version number."""

    registration: Mapping[str, Any]
    materials: list[dict[str, Any]]
    flat_evidence: Mapping[str, Any]
    gate_results: list[dict[str, Any]]
    builder: Mapping[str, Any]
    started: str


def statement(version: AttestedVersion, provenance: Provenance) -> dict[str, Any]:
    """An in-toto Statement v1 / SLSA provenance v1 as plain JSON, checked against both specs
    (:mod:`reappreg.registry.slsa`: a field either spec does not define is refused)."""
    from reappreg.registry.slsa import check_statement

    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"model": version.name, "version": str(version.version), "mlflow_run_id": version.run_id,
                                   "source": version.source, **provenance.registration,
                                   **({"trust": dict(version.trust)} if version.trust else {})},
            "resolvedDependencies": provenance.materials,
        },
        "runDetails": {
            "builder": dict(provenance.builder),
            "metadata": {"invocationId": version.run_id, "startedOn": provenance.started},
            "byproducts": [_byproduct(EVIDENCE_BYPRODUCT, dict(provenance.flat_evidence)),
                           _byproduct(GATES_BYPRODUCT, {"results": provenance.gate_results}),
                           _byproduct(TAGS_BYPRODUCT, dict(version.tags)),
                           *([_byproduct(CARD_BYPRODUCT, dict(version.card))] if version.card else [])],
        },
    }
    built = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": rel, "digest": {"sha256": digest}} for rel, digest in sorted(version.subjects.items())],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }
    # JSON types only (tuples become lists; NaN and infinities are refused: canonical JSON has none).
    built = json.loads(json.dumps(built, allow_nan=False))
    check_statement(built)
    return built


def _byproduct(name: str, annotations: dict[str, Any]) -> dict[str, Any]:
    """A byproduct carried in the statement itself; its digest (sha256 of the annotations' canonical
    JSON) is what makes it a resource descriptor the in-toto spec accepts (uri, digest or content)."""
    canonical = json.dumps(annotations, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return {"name": name, "digest": {"sha256": hashlib.sha256(canonical).hexdigest()}, "mediaType": "application/json",
            "annotations": annotations}


def material(path: str, md5: str, **annotations: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"name": path, "digest": {"md5": md5.removesuffix(".dir")}}
    if md5.endswith(".dir"):
        annotations["dvc_dir_hash"] = True
    if annotations:
        item["annotations"] = annotations
    return item


def byproduct(stmt: Mapping[str, Any], name: str) -> dict[str, Any]:
    for item in stmt.get("predicate", {}).get("runDetails", {}).get("byproducts", []):
        if item.get("name") == name:
            return dict(item.get("annotations", {}))
    return {}
