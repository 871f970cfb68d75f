"""The handful of numbers ``dvc metrics show`` compares between experiments."""

from __future__ import annotations

from typing import Any

from reappreg.errors import InputError
from reappreg.report.blocks import is_number, read_if_present
from reappreg.report.sections import ReportSources

# ``dvc metrics show`` prints one column per key: keep the headline file this small.
HEADLINE_MAX_KEYS = 100


def headline(sources: ReportSources, *, health: Any = None, max_completion_length: int | None = None,
             trust_policy: Any = None) -> dict[str, Any]:
    """The few numbers compared between experiments (nested; ``dvc metrics show`` dots the keys).

    ``policy.healthy`` is the training-health verdict the report, the cards and the registry's
    ``healthy_training`` gate state (:func:`reappreg.report.facts.policy_health`, with ``health``:
    CardHealthSettings): 1 only when it is "healthy". Without ``health`` no verdict is written.
    The training monitor's own flag is ``policy.monitor_healthy``. ``judge.trusted`` is the trust the
    report states (:func:`reappreg.report.facts.judge_trust`: recomputed under ``trust_policy``), never
    the calibration's cached flag when a policy is given."""
    from reappreg.report.facts import judge_trust, policy_health, rm_scores

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
            if isinstance(obj, dict) and isinstance(obj.get("holdout"), dict):
                # The report's reading of a reward model's held-out accuracy (an ensemble's is its `ranking`).
                put("rm", file.stem, rm_scores(obj)["holdout.acc"][0])
    train = read_if_present(sources.policy_metrics / "train.json")
    if isinstance(train, dict):
        final = train.get("final") if isinstance(train.get("final"), dict) else {}
        try:
            monitor, verdict = policy_health(sources.policy_metrics, health, max_completion_length)
        except InputError:
            monitor, verdict = None, None
        put("policy", "monitor_healthy", monitor)
        if verdict is not None:
            put("policy", "healthy", verdict.verdict == "healthy")
            for gate in verdict.gates:  # the values the verdict was judged on
                put("policy", gate.name.replace("-", "_").replace(" ", "_"), gate.value)
        for key in ("format_gate_hit_rate", "kl", "reward_mean"):
            if key not in out.get("policy", {}):
                put("policy", key, final.get(f"health/{key}"))
    calib = read_if_present(sources.calibration)
    if isinstance(calib, dict):
        put("judge", "agreement", calib.get("agreement"))
        put("judge", "trusted", judge_trust(calib, trust_policy)[0])
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
