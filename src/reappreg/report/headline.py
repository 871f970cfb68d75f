"""The handful of numbers ``dvc metrics show`` compares between experiments."""

from __future__ import annotations

from typing import Any

from reappreg.errors import InputError
from reappreg.report.blocks import is_number, read_if_present
from reappreg.report.sections import ReportSources

# ``dvc metrics show`` prints one column per key: keep the headline file this small.
HEADLINE_MAX_KEYS = 100


def headline(sources: ReportSources) -> dict[str, Any]:
    """The few numbers compared between experiments (nested; ``dvc metrics show`` dots the keys)."""
    out: dict[str, dict[str, Any]] = {}

    def put(group: str, key: str, value: Any) -> None:
        if isinstance(value, bool):
            value = int(value)
        if is_number(value):
            out.setdefault(group, {})[key] = value

    validation = read_if_present(sources.validation) or {}
    put("validation", "failed", validation.get("n_failed") if isinstance(validation, dict) else None)
    cert = read_if_present(sources.certificate)
    if isinstance(cert, dict):
        put("guard", "pass", cert.get("result") == "pass" if "result" in cert else None)
        counts = cert.get("counts") if isinstance(cert.get("counts"), dict) else {}
        put("guard", "hits", counts.get("hits"))
        put("guard", "removed", counts.get("removed_records"))
    if sources.rm_metrics.is_dir():
        for file in sorted(sources.rm_metrics.glob("*.json")):
            obj = read_if_present(file)
            holdout = obj.get("holdout") if isinstance(obj, dict) else None
            if isinstance(holdout, dict):
                put("rm", file.stem, (holdout.get("ranking") or holdout).get("pairwise_accuracy"))
    train = read_if_present(sources.policy_metrics / "train.json")
    if isinstance(train, dict):
        final = train.get("final") if isinstance(train.get("final"), dict) else {}
        put("policy", "healthy", train.get("healthy"))
        for key in ("format_gate_hit_rate", "kl", "reward_mean"):
            put("policy", key, final.get(f"health/{key}"))
    calib = read_if_present(sources.calibration)
    if isinstance(calib, dict):
        put("judge", "agreement", calib.get("agreement"))
        put("judge", "trusted", calib.get("trusted"))
    metrics = read_if_present(sources.eval_metrics)
    if isinstance(metrics, dict):
        for key in sorted(metrics):
            parts = key.split("/")
            if len(parts) == 3 and parts[2] in ("win_rate", "cluster_low", "n"):
                put("eval", f"{parts[0]}/{parts[1]}/{parts[2]}", metrics[key])
    claims = read_if_present(sources.claims)
    if isinstance(claims, list):
        put("claims", "total", len(claims))
        put("claims", "supported", sum(1 for c in claims if isinstance(c, dict) and c.get("supported")))
    scan = read_if_present(sources.leakscan)
    if isinstance(scan, dict):
        put("leakscan", "hits", scan.get("n_hits"))
    n_keys = sum(len(v) for v in out.values())
    if n_keys > HEADLINE_MAX_KEYS:
        raise InputError(f"headline metrics: {n_keys} keys, more than {HEADLINE_MAX_KEYS}; "
                         "`dvc metrics show` would not be readable")
    return out
