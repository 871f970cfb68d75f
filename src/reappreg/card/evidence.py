"""The evidence a model card and a registration read: tracked files, normalised and keyed to their source.

Split from ``reappreg.card.build`` (which re-exports these names) so the card module holds the
linter and the rendering, and this one what is read: the guard certificate
(:func:`read_certificate`), eval metrics, judge calibration, claims, reward-model and policy
metrics, the GRPO prompt and the results table (:func:`load_evidence`). The judge's trust is
re-derived here from the calibration's numbers (:func:`trust_recomputed`), never read from
its cached flag alone: both the card and the claims linter rely on that one derivation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reappreg.evidence.health import TrainingHealth, monitor_healthy, read_metrics_folder, training_health
from reappreg.errors import InputError
from reappreg.evidence.flat import flatten
from reappreg.hashing import dvc_md5
from reappreg.io import read_json, read_versioned, read_yaml

# Keys every claim in reports/claims.json carries (reappreg.stats.claims).
CLAIM_KEYS = ("claim_id", "statement", "metric_refs", "supported", "status", "reason", "flags")
# Per-comparison stats shown in the evaluation table, in column order.
EVAL_COLUMNS = ("win_rate", "n", "iid_low", "cluster_low", "n_eff", "n_clusters")
CONDITIONS = ("policy", "best_of_n_fresh_pool", "best_of_n_selection_pool")


def trust_recomputed(calibration: Mapping[str, Any], eval_metrics: Mapping[str, Any]) -> bool:
    """Trust re-derived from the calibration's numbers under the thresholds eval.json says the stats
    stage applied (``judge/*``); the calibration's ``trusted`` is a cache and must agree, and so must
    eval.json's ``judge/trusted``. Missing thresholds: not trusted."""
    from reappreg.stats.trust import TrustPolicy, recompute_trust

    keys = ("judge/max_position_bias", "judge/max_unparseable_rate", "judge/min_agreement_applied",
            "judge/min_pairs_applied")
    if any(eval_metrics.get(k) is None for k in keys):
        return False
    policy = TrustPolicy(max_position_bias=float(eval_metrics[keys[0]]), max_unparseable_rate=float(eval_metrics[keys[1]]),
                         min_agreement_floor=float(eval_metrics[keys[2]]), min_pairs_floor=int(eval_metrics[keys[3]]))
    trust = recompute_trust(calibration, policy, judge_model=None, judge_fingerprint=None)
    return trust.trusted and eval_metrics.get("judge/trusted") in (1, True)


@dataclass
class Certificate:
    path: Path
    md5: str
    passed: bool
    result: str
    # guarded copy path -> md5: the training text the certificate vouches for
    certified: dict[str, str]
    # checked source path -> (guarded path, md5 of the source)
    sources: list[dict[str, Any]]
    heldout: dict[str, str]
    summary: dict[str, Any]


# What the card shows of a certificate (dotted keys into it; see reappreg.guard.certificate).
CERTIFICATE_SUMMARY = (
    "schema", "policy", "counts.sources", "counts.texts_checked", "counts.hits", "counts.flagged_records",
    "counts.removed_records", "heldout.answers", "detectors.ngram.n", "detectors.ngram.containment",
    "detectors.ngram.min_run", "detectors.minhash.threshold",
    "detectors.minhash.lsh.fn_probability_at_threshold",
)


def read_certificate(path: str | os.PathLike) -> Certificate:
    """The guard certificate, normalised (schema ``reappreg.guard.certificate/v2``, see ``reappreg.guard.certificate``)."""
    from reappreg.guard.certified import CERTIFICATE_SCHEMA

    path = Path(path)
    raw = read_versioned(path, CERTIFICATE_SCHEMA, what="a guard certificate")
    for key in ("result", "training", "heldout"):
        if key not in raw:
            raise InputError(f"{path}: missing key '{key}'")
    result = str(raw["result"])
    if result not in ("pass", "fail"):
        raise InputError(f"{path}: 'result' must be 'pass' or 'fail', got {result!r}")
    heldout = raw["heldout"]
    if not isinstance(heldout, Mapping) or "path" not in heldout or "md5" not in heldout:
        raise InputError(f"{path}: 'heldout' needs 'path' and 'md5'")
    certified, sources = {}, []
    for i, entry in enumerate(raw["training"]):
        if not isinstance(entry, Mapping) or "path" not in entry or "md5" not in entry:
            raise InputError(f"{path}: training entry {i} needs 'path' and 'md5'")
        if entry.get("guarded_path") and entry.get("guarded_md5"):
            certified[str(entry["guarded_path"])] = str(entry["guarded_md5"])
        sources.append({"path": str(entry["path"]), "md5": str(entry["md5"]), "guarded_path": entry.get("guarded_path"),
                        "guarded_md5": entry.get("guarded_md5"), "records": entry.get("records"),
                        "flagged_records": entry.get("flagged_records")})
    flat = flatten(raw)
    summary = {key: flat[key] for key in CERTIFICATE_SUMMARY if key in flat}
    return Certificate(path, dvc_md5(path), result == "pass", result, certified, sources,
                       {str(heldout["path"]): str(heldout["md5"])}, summary)


@dataclass
class Evidence:
    """Everything a card or a registration reads, keyed to the files it came from."""

    certificate: Certificate
    eval_metrics: dict[str, Any]
    calibration: dict[str, Any]
    claims: list[dict[str, Any]]
    rm_metrics: dict[str, Any]       # flattened "<file stem>.<key>" -> value
    policy_metrics: dict[str, Any]   # flattened "<file stem>.<key>" -> value
    prompt: dict[str, Any]
    sources: dict[str, Path] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)  # metrics/results.json, flattened "<key>.<key>" -> value

    @property
    def judge_trusted(self) -> bool:
        return trust_recomputed(self.calibration, self.eval_metrics)  # never the calibration's cached flag alone

    @property
    def judge_model(self) -> str | None:
        models = {c.get("judge_model") for c in self.claims if c.get("judge_model")}
        return ", ".join(sorted(models)) if models else self.calibration.get("model")

    def training_health(self, health: Any, max_completion_length: int | None) -> TrainingHealth:
        """The verdict (monitor AND format-gate AND truncation gates; ``health``: CardHealthSettings), computed
        once by :func:`reappreg.evidence.health.training_health`: the card, the registry's ``healthy_training``
        gate, the report and the headline metrics all state this one."""
        return training_health(self.policy_metrics, health, max_completion_length)

    @property
    def training_healthy(self) -> bool | None:
        """The training monitor's flag alone (see :meth:`training_health` for the card's verdict)."""
        return monitor_healthy(self.policy_metrics)

    def bar_claim(self, condition: str = "policy") -> dict[str, Any] | None:
        for claim in self.claims:
            if claim.get("kind") == "bar" and claim.get("condition") == condition:
                return claim
        return None

    def comparisons(self) -> list[dict[str, Any]]:
        """One row per (condition, opponent) in eval.json, with the table's columns and ``cluster_high``."""
        rows = []
        pairs = sorted({tuple(k.split("/")[:2]) for k in self.eval_metrics if k.endswith("/win_rate") and k.count("/") == 2})
        for condition, opponent in pairs:
            if condition not in CONDITIONS:
                continue
            prefix = f"{condition}/{opponent}"
            row = {"condition": condition, "opponent": opponent}
            row.update({col: self.eval_metrics.get(f"{prefix}/{col}") for col in (*EVAL_COLUMNS, "cluster_high")})
            rows.append(row)
        rows.sort(key=lambda r: (CONDITIONS.index(r["condition"]), r["opponent"]))
        return rows


def _metrics_folder(folder: str | os.PathLike | None) -> tuple[dict[str, Any], dict[str, Path]]:
    if folder is None:
        return {}, {}
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: metrics folder not found")
    flat = read_metrics_folder(folder)  # the same reading the report and the headline metrics use
    sources = {f"{folder.name}/{file.name}": file for file in sorted(folder.glob("*.json"))}
    return flat, sources


def load_evidence(
    *,
    certificate: str | os.PathLike,
    eval_metrics: str | os.PathLike,
    calibration: str | os.PathLike,
    claims: str | os.PathLike,
    rm_metrics: str | os.PathLike | None = None,
    policy_metrics: str | os.PathLike | None = None,
    prompt: str | os.PathLike | None = None,
    results: str | os.PathLike | None = None,
) -> Evidence:
    eval_obj = read_json(eval_metrics)
    if not isinstance(eval_obj, dict):
        raise InputError(f"{eval_metrics}: expected one flat JSON object")
    calib = read_json(calibration)
    if not isinstance(calib, dict) or not isinstance(calib.get("trusted"), bool):
        raise InputError(f"{calibration}: expected a JSON object with a boolean 'trusted'")
    claim_list = read_json(claims)
    if not isinstance(claim_list, list):
        raise InputError(f"{claims}: expected a JSON list of claims")
    for i, claim in enumerate(claim_list):
        missing = [k for k in CLAIM_KEYS if not isinstance(claim, dict) or k not in claim]
        if missing:
            raise InputError(f"{claims}: claim {i} is missing key(s) {', '.join(missing)}")
    rm_flat, rm_sources = _metrics_folder(rm_metrics)
    policy_flat, policy_sources = _metrics_folder(policy_metrics)
    prompt_obj: dict[str, Any] = {}
    if prompt is not None:
        if not Path(prompt).exists():
            raise InputError(f"{prompt}: prompt file not found")
        prompt_obj = read_yaml(prompt) or {}
    sources = {
        "certificate": Path(certificate),
        "eval": Path(eval_metrics),
        "judge_calibration": Path(calibration),
        "claims": Path(claims),
        **rm_sources,
        **policy_sources,
    }
    if prompt is not None:
        sources["prompt"] = Path(prompt)
    results_flat: dict[str, Any] = {}
    if results is not None:
        results_obj = read_json(results)
        if not isinstance(results_obj, dict):
            raise InputError(f"{results}: expected the results table's JSON object (reappreg stats results)")
        results_flat = flatten(results_obj)
        sources["results"] = Path(results)
    return Evidence(read_certificate(certificate), eval_obj, calib, claim_list, rm_flat, policy_flat, prompt_obj, sources,
                    results_flat)


@dataclass(frozen=True)
class EvidencePaths:
    """Where the evidence files are (``reappreg card build`` and ``registry register`` take the same
    options): what :func:`load_evidence` reads."""

    certificate: Path
    eval_metrics: Path
    calibration: Path
    claims: Path
    rm_metrics: Path | None = None
    policy_metrics: Path | None = None
    prompt: Path | None = None
    results: Path | None = None

    def load(self) -> Evidence:
        return load_evidence(certificate=self.certificate, eval_metrics=self.eval_metrics, calibration=self.calibration,
                             claims=self.claims, rm_metrics=self.rm_metrics, policy_metrics=self.policy_metrics,
                             prompt=self.prompt, results=self.results)
