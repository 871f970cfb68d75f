"""Model cards generated from tracked files, and the claims linter that guards them.

A card is a Hugging Face style ``README.md``: YAML front matter (license, language,
base_model, pipeline_tag, tags, library_name) and the sections model details, evaluation,
prompting, hyperparameters, data separation, intended use, limitations and how to
reproduce. It is rendered from ``registry/card_template.md`` (Jinja2) and an
:class:`Evidence` bundle read from the pipeline's tracked outputs:

* ``metrics/eval.json`` and ``reports/claims.json`` (see ``reappreg.stats``),
* ``metrics/judge_calibration.json``,
* ``data/guard/certificate.json`` (see ``reappreg.guard``),
* ``metrics/rm/*.json`` and ``metrics/policy/*.json``,
* the params sections the model was trained with and the GRPO prompt file.

No number is typed by hand: the template's literal text may not contain a digit
(:func:`check_template` refuses it), and every value is formatted by :func:`fmt` from
one of those files. The claims linter (:func:`lint_claims`) re-derives each claim that
``claims.json`` marks supported from ``eval.json`` and the calibration, and refuses the
card when one is not backed: a bar comparison that only an iid bound clears, a win with
``n`` below the confirmation rule, an untrusted judge presented as trusted, or a claim
that disagrees with the metrics it cites. Unsupported claims are printed as such, with
the stats module's reason.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reappreg.card_health import TrainingHealth, training_health
from reappreg.card_labels import calibration_rows, metric_label
from reappreg.card_meta import (card_body, card_metadata, card_revision, numbers_in, parse_card, source_revision,
                                validate_card)
from reappreg.errors import InputError, ReappregError
from reappreg.hashing import dvc_md5
from reappreg.io import read_json, read_yaml
from reappreg.stats.claims import BLOCKING_FLAGS  # claim flags that can never back a printed claim
CLAIM_KEYS = ("claim_id", "statement", "metric_refs", "supported", "status", "reason", "flags")
# Per-comparison stats shown in the evaluation table, in column order.
EVAL_COLUMNS = ("win_rate", "n", "iid_low", "cluster_low", "n_eff", "n_clusters")
CONDITIONS = ("policy", "best_of_n_fresh_pool", "best_of_n_selection_pool")


class ClaimRejected(ReappregError):
    """A claim marked supported is not backed by the metrics it cites."""


# --------------------------------------------------------------------------- formatting


def fmt(value: Any, decimals: int = 3) -> str:
    """The one number formatter of the card: ints as ints, floats to ``decimals`` places."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        if value != 0 and abs(value) < 10 ** -decimals:
            return f"{value:.{decimals}g}"  # 1e-05, not 0.000
        return f"{value:.{decimals}f}"
    return str(value)


def flatten(obj: Any, prefix: str = "", sep: str = ".") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}{sep}{key}" if prefix else str(key), sep))
        return out
    return {prefix: obj}


# --------------------------------------------------------------------------- evidence


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


# What the card shows of a certificate (dotted keys into it; see reappreg.guard.stage).
CERTIFICATE_SUMMARY = (
    "schema", "policy", "counts.sources", "counts.texts_checked", "counts.hits", "counts.flagged_records",
    "counts.removed_records", "heldout.answers", "detectors.ngram.n", "detectors.ngram.containment",
    "detectors.ngram.min_run", "detectors.minhash.threshold",
    "detectors.minhash.lsh.fn_probability_at_threshold",
)


def read_certificate(path: str | os.PathLike) -> Certificate:
    """The guard certificate, normalised (schema ``reappreg.guard.certificate/v1``, see ``reappreg.guard.stage``)."""
    from reappreg.guard.stage import CERTIFICATE_SCHEMA

    path = Path(path)
    raw = read_json(path)
    if not isinstance(raw, dict) or raw.get("schema") != CERTIFICATE_SCHEMA:
        raise InputError(f"{path}: not a guard certificate (expected schema '{CERTIFICATE_SCHEMA}')")
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
        return _trust_recomputed(self.calibration, self.eval_metrics)  # never the calibration's cached flag alone

    @property
    def judge_model(self) -> str | None:
        models = {c.get("judge_model") for c in self.claims if c.get("judge_model")}
        return ", ".join(sorted(models)) if models else self.calibration.get("model")

    def training_health(self, health: Any, max_completion_length: int | None) -> TrainingHealth:
        """The card's verdict (monitor AND format-gate AND truncation gates; ``health``: CardHealthSettings).
        The registry's ``healthy_training`` gate should read ``.verdict == "healthy"`` of this."""
        return training_health(self.policy_metrics, health, max_completion_length)

    @property
    def training_healthy(self) -> bool | None:
        """The training monitor's flag alone (see :meth:`training_health` for the card's verdict)."""
        flags = [v for k, v in self.policy_metrics.items() if k.rsplit(".", 1)[-1] == "healthy"]
        if not flags:
            return None
        return all(bool(v) for v in flags)

    def bar_claim(self, condition: str = "policy") -> dict[str, Any] | None:
        for claim in self.claims:
            if claim.get("kind") == "bar" and claim.get("condition") == condition:
                return claim
        return None

    def comparisons(self) -> list[dict[str, Any]]:
        """One row per (condition, opponent) in eval.json, with the table's columns."""
        rows = []
        pairs = sorted({tuple(k.split("/")[:2]) for k in self.eval_metrics if k.endswith("/win_rate") and k.count("/") == 2})
        for condition, opponent in pairs:
            if condition not in CONDITIONS:
                continue
            prefix = f"{condition}/{opponent}"
            row = {"condition": condition, "opponent": opponent}
            row.update({col: self.eval_metrics.get(f"{prefix}/{col}") for col in EVAL_COLUMNS})
            rows.append(row)
        rows.sort(key=lambda r: (CONDITIONS.index(r["condition"]), r["opponent"]))
        return rows


def _metrics_folder(folder: str | os.PathLike | None) -> tuple[dict[str, Any], dict[str, Path]]:
    if folder is None:
        return {}, {}
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: metrics folder not found")
    flat: dict[str, Any] = {}
    sources = {}
    for file in sorted(folder.glob("*.json")):
        flat.update(flatten(read_json(file), file.stem))
        sources[f"{folder.name}/{file.name}"] = file
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


# --------------------------------------------------------------------------- linter


@dataclass
class LintProblem:
    claim_id: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.claim_id}: {self.rule}: {self.detail}"


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def _trust_recomputed(calibration: Mapping[str, Any], eval_metrics: Mapping[str, Any]) -> bool:
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


def lint_claims(claims: Sequence[Mapping[str, Any]], eval_metrics: Mapping[str, Any], calibration: Mapping[str, Any],
                *, min_n_confirm: int) -> list[LintProblem]:
    """Problems with claims that would be printed as supported, re-derived from the metrics."""
    problems: list[LintProblem] = []
    trusted = _trust_recomputed(calibration, eval_metrics)
    for claim in claims:
        cid = str(claim.get("claim_id"))
        if claim.get("judge_trusted") and not trusted:
            problems.append(LintProblem(cid, "untrusted judge presented as trusted",
                                        "the claim says judge_trusted but the calibration says trusted: false"))
        if not claim.get("supported"):
            continue
        add = lambda rule, detail: problems.append(LintProblem(cid, rule, detail))  # noqa: E731
        if not trusted or eval_metrics.get("judge/trusted") not in (1, True):
            add("untrusted judge presented as trusted",
                f"claim is marked supported but calibration trusted={trusted}, eval judge/trusted={eval_metrics.get('judge/trusted')}")
        if claim.get("status") != "confirmed":
            add("supported without confirmation", f"status is {claim.get('status')!r}")
        blocking = [f for f in claim.get("flags", []) if f in BLOCKING_FLAGS]
        if blocking:
            add("blocking flags", ", ".join(blocking))
        condition, opponent = claim.get("condition"), claim.get("opponent")
        if condition is None or opponent is None:
            parts = cid.split("/")
            condition, opponent = (parts[1], parts[2]) if len(parts) == 3 else (None, None)
        prefix = f"{condition}/{opponent}"
        if f"{prefix}/n" not in eval_metrics:
            add("cites missing metrics", f"{prefix}/* not in eval.json")
            continue
        missing_refs = [r for r in claim.get("metric_refs", []) if r not in eval_metrics]
        if missing_refs:
            add("cites missing metrics", ", ".join(missing_refs))
        n = eval_metrics.get(f"{prefix}/n") or 0
        if n < min_n_confirm:
            add("win with n below the confirmation rule", f"n = {n} < {min_n_confirm}")
        threshold = claim.get("threshold")
        if claim.get("kind") == "bar" and (threshold is None or not _same(threshold, eval_metrics.get("reference_bar/bar"))):
            add("bar claim not at the reference bar",
                f"threshold {threshold} but eval.json reference_bar/bar={eval_metrics.get('reference_bar/bar')}; another bar is a custom_bar")
        low, iid_low = eval_metrics.get(f"{prefix}/cluster_low"), eval_metrics.get(f"{prefix}/iid_low")
        if threshold is None:
            add("no threshold", "a supported claim must state the threshold it clears")
        elif low is None or low <= threshold:
            if iid_low is not None and iid_low > threshold:
                add("above the bar only by an iid bound",
                    f"iid lower bound {iid_low} > {threshold} but the cluster lower bound is {low}")
            else:
                add("cluster lower bound not above threshold", f"cluster lower bound {low} vs threshold {threshold}")
        evidence = claim.get("evidence") or {}
        for key in ("n", "win_rate", "cluster_low", "n_eff"):
            if key in evidence and not _same(evidence[key], eval_metrics.get(f"{prefix}/{key}")):
                add("disagrees with eval.json", f"evidence {key}={evidence[key]} but eval.json {prefix}/{key}={eval_metrics.get(f'{prefix}/{key}')}")
    return problems


# --------------------------------------------------------------------------- rendering

_TEMPLATE_CODE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)


def check_template(text: str, source: str) -> None:
    """A card template may not contain a literal number: every number comes from data."""
    # Tags are blanked out but their newlines kept, so line numbers match the file.
    literal = _TEMPLATE_CODE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for lineno, line in enumerate(literal.splitlines(), start=1):
        if numbers_in(line):
            raise InputError(f"{source}: line {lineno} has a literal number ({line.strip()!r}); read it from a tracked file instead")


@dataclass
class CardInputs:
    """The per-model facts a card shows besides the evidence."""

    name: str
    kind: str
    description: str
    front_matter: dict[str, Any]
    gates: dict[str, Any]
    training_inputs: dict[str, str]     # path -> md5
    other_inputs: dict[str, str]        # path -> md5
    hyperparameters: dict[str, Any]     # flattened params shown in the card
    method: dict[str, Any]              # base model, method, rm used (strings from params/declarations)
    metrics: list[tuple[str, Any]]      # metrics shown (key, value)
    revision: dict[str, Any]            # commit, dirty ("true"/"false"), dirty_paths, dirty_allowed, commands
    datasets: list[str]                 # training data paths, for the front matter's `datasets`
    health: TrainingHealth | None       # policies only
    paths: dict[str, str]               # evidence source name -> path as shown on the card
    min_n_confirm: int
    decimals: int = 3
    # The results table rows (metrics/results.json) of the condition this version is: `policy` for
    # the final policy, `policy-step-<n>` for a kept checkpoint. The card links to them by row_id.
    results_rows: list[dict[str, Any]] = field(default_factory=list)
    # A kept checkpoint: {step, final_step, folder, model_md5, training_run_id, condition}; None otherwise.
    checkpoint: dict[str, Any] | None = None
    # Evaluation rows the card shows instead of eval.json's (a checkpoint: its own results rows).
    comparisons: list[dict[str, Any]] | None = None


def _dotted(params: Mapping[str, Any], key: str, source: str) -> Any:
    node: Any = params
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise InputError(f"{source}: params have no key '{key}'")
        node = node[part]
    return node


def key_pattern(pattern: str) -> re.Pattern:
    """A dotted-key glob: ``*`` matches within one key component, ``**`` across components."""
    parts = re.split(r"(\*\*|\*)", pattern)
    regex = "".join(".*" if p == "**" else "[^.]*" if p == "*" else re.escape(p) for p in parts)
    return re.compile(rf"\A{regex}\Z")


def select_metrics(flat: Mapping[str, Any], patterns: Sequence[str]) -> list[tuple[str, Any]]:
    """Scalar metrics whose flattened key matches one of ``patterns`` (see :func:`key_pattern`), sorted by key."""
    compiled = [key_pattern(p) for p in patterns]
    return [(k, v) for k, v in sorted(flat.items())
            if (isinstance(v, (int, float, bool)) or v is None) and any(c.match(k) for c in compiled)]


# The stage that builds each kind of model from training-side inputs only.
TRAINING_STAGE = {"reward-model": "rm_ensemble", "policy": "policy_train"}


def reproduce_commands(stage: str, commit: str, kind: str | None = None, experiment: str | None = None) -> list[str]:
    """What rebuilds the model with the access each step needs (README "Working as a team"):
    the training remote alone rebuilds the model; its evaluation and registration read held-out
    data, so they also need the heldout remote. A card built by ``dvc exp run`` names its
    experiment, whose params ``dvc exp apply`` restores."""
    lines = [f"git checkout {commit}"]
    if experiment:
        lines.append(f"dvc exp apply {experiment}     # this experiment's params (dvc exp run -S ...)")
    if kind in TRAINING_STAGE:
        lines += ["# with read access to the `train` remote: the model itself",
                  "dvc pull -r train --allow-missing   # heldout outputs are, by design, not there",
                  f"dvc repro --single-item {TRAINING_STAGE[kind]}     # nothing to do when the pull matches dvc.lock"]
    lines += [f"# with read access to both remotes (`train` and `heldout`): evaluation and {stage}",
              "dvc pull", f"dvc repro {stage}"]
    return lines


def display_path(path: str | os.PathLike, root: str | os.PathLike = ".") -> str:
    """``path`` relative to ``root`` when it lies inside it (cards never show machine paths)."""
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return Path(path).as_posix()


def group_params(flat: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """``a.b.c -> v`` grouped as ``("a.b", [("c", v)])`` in first-seen order, for a compact table."""
    groups: dict[str, list[tuple[str, Any]]] = {}
    for key, value in flat.items():
        group, _, leaf = key.rpartition(".")
        groups.setdefault(group, []).append((leaf, value))
    return list(groups.items())


def _max_completion_length(params: Mapping[str, Any]) -> int | None:
    try:
        return int(_dotted(params, "policy.train.max_completion_length", "params"))
    except (InputError, TypeError, ValueError):
        return None


def kept_checkpoints(model: Any, evidence: Evidence, steps: Sequence[int]) -> list[dict[str, Any]]:
    """The kept checkpoints of a policy declaration, in step order, from its training metrics.

    ``steps`` is policy.train.checkpoint_steps; each must be in the metrics the declaration's
    ``artifact_md5_metric`` file holds (``<file>.checkpoints.step_<n>.model_md5``), with the
    training run id (``<file>.training_run_id``). Refuses a step the metrics do not describe.
    """
    if model.kind != "policy" or model.checkpoints is None or not steps:
        return []
    from reappreg.conditions import checkpoint_condition

    stem = (model.artifact_md5_metric or "train.model_md5").split(".", 1)[0]
    metrics = evidence.policy_metrics
    out = []
    for step in steps:
        md5 = metrics.get(f"{stem}.checkpoints.step_{step}.model_md5")
        if md5 is None:
            raise InputError(f"policy metrics ({stem}.json) describe no kept checkpoint at step {step} "
                             f"(policy.train.checkpoint_steps {list(steps)}); rerun `reappreg policy train`")
        out.append({"step": step, "final_step": metrics.get(f"{stem}.global_step"),
                    "folder": f"{Path(model.checkpoints).as_posix()}/step_{step}", "model_md5": md5,
                    "training_run_id": metrics.get(f"{stem}.training_run_id"), "condition": checkpoint_condition(step)})
    return out


def checkpoint_card_name(name: str, step: int) -> str:
    """The card file stem of a kept checkpoint's version (``reports/cards/<this>.md``)."""
    return f"{name}.step-{step}"


def results_rows_of(evidence: Evidence, condition: str) -> list[dict[str, Any]]:
    """The results table rows of ``condition`` (metrics/results.json; none when it was not given)."""
    path = evidence.sources.get("results")
    if path is None:
        return []
    rows = read_json(path).get("rows", [])
    return [dict(r) for r in rows if isinstance(r, dict) and r.get("condition") == condition]


def rows_as_comparisons(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Evaluated results rows (the condition's own pool) in the card's evaluation-table columns."""
    return [{"condition": r["condition"], "opponent": r["opponent"], "win_rate": r.get("win_rate"), "n": r.get("n"),
             "iid_low": r.get("iid_screening_low"), "cluster_low": r.get("cluster_low"), "n_eff": r.get("n_eff"),
             "n_clusters": r.get("n_vignettes")}
            for r in rows if r.get("status") == "evaluated" and r.get("pool") == "policy"]


def card_inputs_for(
    name: str,
    decl: Any,
    *,
    params: Mapping[str, Any],
    evidence: Evidence,
    root: str | os.PathLike = ".",
    revision: Mapping[str, str],
    min_n_confirm: int,
    decimals: int,
    health: Any,
    stage: str = "register",
    checkpoint: Mapping[str, Any] | None = None,
) -> CardInputs:
    """The facts of model ``name`` (declared in ``decl``, a RegistryDecl) for its card.

    ``checkpoint`` (one of :func:`kept_checkpoints`) makes it the card of that kept checkpoint's
    version: its evaluation table is its own results rows, not the final model's.

    ``revision`` is :func:`source_revision`'s (``commit``, ``dirty``, ``dirty_paths``) plus
    ``dirty_allowed`` (the card was built with ``--allow-dirty``); ``health`` is the
    CardHealthSettings the policy's training health is judged by.
    """
    model = decl.models[name]
    root = Path(root)
    source = f"registry declaration of {name}"
    base_model = str(_dotted(params, model.base_model_param, source))
    base_model = decl.known_models.get(base_model, base_model)
    hyper: dict[str, Any] = {}
    for prefix in model.hyperparameters:
        section = _dotted(params, prefix, source)
        hyper.update(flatten(section, prefix) if isinstance(section, Mapping) else {prefix: section})
    method: dict[str, Any] = {"base_model": base_model, "method": " ".join(model.method.split())}
    if model.reward_model:
        rm = decl.models[model.reward_model]
        method["reward_model"] = f"{model.reward_model} (`{rm.artifact}`, md5 {dvc_md5(root / rm.artifact)})"
    metrics = evidence.policy_metrics if model.kind == "policy" else evidence.rm_metrics
    front = {
        "license": model.card.license,
        "language": list(model.card.language),
        "base_model": base_model,
        "pipeline_tag": model.card.pipeline_tag,
        "library_name": model.card.library_name,
        "tags": list(model.card.tags),
    }
    return CardInputs(
        name=name,
        kind=model.kind,
        description=" ".join(model.description.split()),
        front_matter=front,
        # One entry per declared gate (registry/models.yaml); a ">=" threshold is shown as "at least".
        gates={g.name: (g.value if g.op == ">=" and g.than is None else True) for g in model.gates},
        training_inputs={p: dvc_md5(root / p) for p in model.training_inputs},
        other_inputs={p: dvc_md5(root / p) for p in model.other_inputs},
        hyperparameters=hyper,
        method=method,
        metrics=select_metrics(metrics, model.card_metrics),
        revision={"commit": revision.get("commit", "none"), "dirty": revision.get("dirty", "unknown"),
                  "dirty_paths": list(revision.get("dirty_paths", [])),
                  "dirty_allowed": bool(revision.get("dirty_allowed", False)),
                  "experiment": revision.get("experiment"),
                  "commands": reproduce_commands(stage, revision.get("commit", "none"), model.kind,
                                                 revision.get("experiment"))},
        datasets=[*model.training_inputs, *[p for p in model.other_inputs if p.startswith("data/")]],
        health=evidence.training_health(health, _max_completion_length(params)) if model.kind == "policy" else None,
        paths={name: display_path(path, root) for name, path in evidence.sources.items()},
        min_n_confirm=min_n_confirm,
        decimals=decimals,
        results_rows=results_rows_of(evidence, checkpoint["condition"] if checkpoint else "policy")
        if model.kind == "policy" else [],
        checkpoint=dict(checkpoint) if checkpoint else None,
        comparisons=rows_as_comparisons(results_rows_of(evidence, checkpoint["condition"])) if checkpoint else None,
    )


def card_comparisons(inputs: CardInputs, evidence: Evidence) -> list[dict[str, Any]]:
    """The evaluation rows a card shows: a checkpoint's own results rows, else the policy's eval.json rows."""
    if inputs.kind != "policy":
        return []
    return inputs.comparisons if inputs.comparisons is not None else evidence.comparisons()


def render_card(template_text: str, template_source: str, inputs: CardInputs, evidence: Evidence) -> str:
    """Lint the claims, then render the card; raises ClaimRejected if a supported claim is not backed."""
    import jinja2

    check_template(template_text, template_source)
    problems = lint_claims(evidence.claims, evidence.eval_metrics, evidence.calibration, min_n_confirm=inputs.min_n_confirm)
    if problems:
        raise ClaimRejected(f"{evidence.sources.get('claims', 'claims')}: refusing to print unsupported claims: "
                            + "; ".join(str(p) for p in problems))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             autoescape=False)
    env.filters["num"] = lambda v: fmt(v, inputs.decimals)
    env.filters["cell"] = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
    front = yaml.safe_dump(card_metadata(inputs, evidence), sort_keys=False, allow_unicode=True).strip()
    supported = [c for c in evidence.claims if c.get("supported")]
    unsupported = [c for c in evidence.claims if not c.get("supported")]
    judge = {
        "model": evidence.judge_model,
        "trusted": evidence.judge_trusted,
        "calibration": calibration_rows(evidence.calibration),
    }
    cert = evidence.certificate
    template = env.from_string(template_text)
    text = template.render(
        card=inputs,
        front_matter=front,
        evidence=evidence,
        comparisons=card_comparisons(inputs, evidence),
        supported=supported,
        unsupported=unsupported,
        judge=judge,
        certificate=cert,
        hyperparameters=group_params(inputs.hyperparameters),
        prompt=evidence.prompt,
        health=inputs.health,
        metrics=[{"key": k, "label": metric_label(k), "value": v} for k, v in inputs.metrics],
    )
    text = re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"
    validate_card(text, f"card of {inputs.name}")
    return text


__all__ = ["CardInputs", "Certificate", "ClaimRejected", "Evidence", "LintProblem", "TrainingHealth", "card_body",
           "card_comparisons", "card_inputs_for", "card_revision", "checkpoint_card_name", "kept_checkpoints", "check_template", "flatten", "fmt", "lint_claims", "load_evidence",
           "metric_label", "calibration_rows", "numbers_in", "parse_card", "read_certificate", "render_card", "source_revision",
           "training_health"]
