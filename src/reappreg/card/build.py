"""Model cards generated from tracked files, and the claims linter that guards them.

A card is a Hugging Face style ``README.md``: YAML front matter (license, language,
base_model, pipeline_tag, tags, library_name) and the sections model details, evaluation,
prompting, hyperparameters, data separation, intended use, limitations and how to
reproduce. It is rendered from ``registry/card_template.md`` (Jinja2) and an
:class:`Evidence` bundle (``reappreg.card.evidence``) read from the pipeline's tracked outputs:

* ``metrics/eval.json`` and ``reports/claims.json`` (see ``reappreg.stats``),
* ``metrics/judge_calibration.json``,
* ``data/guard/certificate.json`` (see ``reappreg.guard``),
* ``metrics/rm/*.json`` and ``metrics/policy/*.json``,
* the params sections the model was trained with and the GRPO prompt file.

No number is typed by hand: the template's literal text may not contain a digit
(:func:`check_template` refuses it), and every value is formatted by :func:`~reappreg.evidence.formatting.fmt` from
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from reappreg.card.evidence import (CLAIM_KEYS, CONDITIONS, EVAL_COLUMNS, Certificate, Evidence, load_evidence,
                                    read_certificate, trust_recomputed)
from reappreg.evidence.health import TrainingHealth, training_health
from reappreg.card.inputs import CardInputs
from reappreg.card.labels import calibration_rows, metric_label
from reappreg.card.meta import (card_body, card_metadata, card_revision, numbers_in, parse_card, source_revision,
                                validate_card)
from reappreg.errors import InputError, ReappregError
from reappreg.evidence.flat import flatten
from reappreg.evidence.formatting import fmt
from reappreg.hashing import dvc_md5
from reappreg.io import read_json
from reappreg.stats.claims import BLOCKING_FLAGS  # claim flags that can never back a printed claim

if TYPE_CHECKING:
    from reappreg.settings import Params


class ClaimRejected(ReappregError):
    """A claim marked supported is not backed by the metrics it cites."""


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




def lint_claims(claims: Sequence[Mapping[str, Any]], eval_metrics: Mapping[str, Any], calibration: Mapping[str, Any],
                *, min_n_confirm: int) -> list[LintProblem]:
    """Problems with claims that would be printed as supported, re-derived from the metrics."""
    problems: list[LintProblem] = []
    trusted = trust_recomputed(calibration, eval_metrics)
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
        if claim.get("kind") == "bar":
            problem = _bar_judge_problem(claim, calibration)
            if problem:
                add("bar claim under another judge", problem)
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


def _bar_judge_problem(claim: Mapping[str, Any], calibration: Mapping[str, Any]) -> str | None:
    """Why a supported bar claim was not decided by the bar's judge; None when it was.

    A judge is its identity, not its name: the claim's judge fingerprint must BE the identity pinned
    beside the bar (``reference_bar.judge_identity``, reappreg.evidence.reference), and the calibration
    must describe that same judge (model and fingerprint), or the trust it lends is another judge's."""
    from pydantic import ValidationError

    from reappreg.evidence.reference import JudgeIdentity

    pinned_record = (claim.get("reference_bar") or {}).get("judge_identity")
    try:
        pinned = JudgeIdentity.model_validate(pinned_record)
    except ValidationError:
        return f"the claim records no valid pinned judge identity (reference_bar.judge_identity: {pinned_record!r})"
    fingerprint = claim.get("judge_fingerprint")
    if JudgeIdentity.of_fingerprint(fingerprint) != pinned:
        return f"the bar's judge is {pinned.describe()}; the claim's judge fingerprint is {fingerprint!r}"
    mine = (claim.get("judge_model"), fingerprint)
    theirs = (calibration.get("judge_model"), calibration.get("judge_fingerprint"))
    if mine != theirs:
        return f"the claim's judge is {mine[0]!r} ({mine[1]!r}), the calibration's is {theirs[0]!r} ({theirs[1]!r})"
    return None


# --------------------------------------------------------------------------- rendering

_TEMPLATE_CODE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)


def check_template(text: str, source: str) -> None:
    """A card template may not contain a literal number: every number comes from data."""
    # Tags are blanked out but their newlines kept, so line numbers match the file.
    literal = _TEMPLATE_CODE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for lineno, line in enumerate(literal.splitlines(), start=1):
        if numbers_in(line):
            raise InputError(f"{source}: line {lineno} has a literal number ({line.strip()!r}); read it from a tracked file instead")


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
    """Scalar metrics whose flattened key matches one of ``patterns`` (see :func:`key_pattern`), sorted by key.

    A pattern without a wildcard may also name a text value (the RM gate's rival, a recipe in
    words): it is shown as written, so a card states such facts from the metrics file, never
    retyped; a wildcard never pulls in text."""
    compiled = [key_pattern(p) for p in patterns]
    exact = {p for p in patterns if "*" not in p}
    return [(k, v) for k, v in sorted(flat.items())
            if ((isinstance(v, (int, float, bool)) or v is None) and any(c.match(k) for c in compiled))
            or (isinstance(v, str) and k in exact)]


# The stage that builds each kind of model from training-side inputs only.
TRAINING_STAGE = {"reward-model": "rm_ensemble", "policy": "policy_train"}
# Where a team's DVC remotes are set up, once per clone (a fresh clone's remotes are local folders).
REMOTES_LINE = '# once per clone: point the remotes at the team\'s storage (README "Working as a team")'


def model_md5(model: Any, evidence: Evidence, root: str | os.PathLike = ".") -> str:
    """The DVC md5 of a declared model's artifact: what names its bytes in ``dvc.lock``.

    A model whose declaration names an ``artifact_md5_metric`` is identified by that metric:
    the card stage reads a policy's training metrics, not its weights (they are not among its
    deps), and registration refuses an artifact whose md5 differs from the metric. Any other
    model's artifact (the reward ensemble, a dep of the card stage) is hashed here.
    """
    if model.artifact_md5_metric is None:
        return dvc_md5(Path(root) / model.artifact)
    metrics = evidence.policy_metrics if model.kind == "policy" else evidence.rm_metrics
    recorded = metrics.get(model.artifact_md5_metric)
    if not isinstance(recorded, str) or not recorded:
        raise InputError(f"training metrics have no '{model.artifact_md5_metric}' naming the md5 of {model.artifact} "
                         "(registry/models.yaml artifact_md5_metric); rerun the training stage")
    return recorded


def reproduce_commands(stage: str, commit: str, artifact: str, md5: str, kind: str | None = None,
                       experiment: str | None = None) -> list[str]:
    """What rebuilds the model from a fresh clone, with the access each step needs (README "Working as a team").

    The card is built before the run's ``dvc.lock`` and outputs are committed, so ``commit``
    (HEAD then) does not record this model and ``dvc pull`` there fetches older bytes. The
    revision is therefore named by the model's bytes: the first commit whose ``dvc.lock``
    records ``md5`` (the DVC md5 of ``artifact``), or the GTO tag ``reappreg registry tag``
    gives its registered version. A card built by ``dvc exp run`` names its experiment: its
    ``dvc.lock`` lives in the experiment's ref, not in the branch history, so the experiment is
    pulled and applied on its baseline ``commit``. The training remote alone rebuilds the
    model; its evaluation and registration read held-out data, so they also need the heldout remote.
    """
    if experiment:
        lines = [REMOTES_LINE,
                 f"dvc exp pull --no-cache origin {experiment}     # the experiment's Git ref; its data come from the pulls below",
                 f"git checkout {commit}     # the experiment's baseline (the card was built there)",
                 f"dvc exp apply {experiment}     # this experiment's params and dvc.lock (dvc exp run -S ...)"]
    else:
        lines = [f"git checkout $(git log --reverse --format=%H -S {md5} -- dvc.lock | head -n 1)"
                 f"     # the first commit whose dvc.lock records this model (the card was built at {commit}, "
                 "before its results were committed)",
                 f"# or, once `reappreg registry tag` has tagged its registered version N: git checkout <name>@v<N>.0.0 "
                 f"(<name>: the dvc.yaml `artifacts:` entry of {artifact})",
                 REMOTES_LINE]
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
    from reappreg.settings.conditions import checkpoint_condition

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
             "n_clusters": r.get("n_vignettes"), "cluster_high": r.get("cluster_high")}
            for r in rows if r.get("status") == "evaluated" and r.get("pool") == "policy"]


@dataclass(frozen=True)
class CardBuild:
    """What every card of one build reads: the declarations (``decl``, a RegistryDecl), the loaded
    ``evidence``, the ``revision`` the cards are built at (:func:`source_revision`'s ``commit``,
    ``dirty``, ``dirty_paths`` plus ``dirty_allowed``: built with ``--allow-dirty``), the ``root``
    the declared paths are relative to and the ``stage`` the reproduce commands end with. One object
    because a build reads them once and writes the card of every model and kept checkpoint from the
    same ones; only the model and the checkpoint change from card to card."""

    decl: Any
    evidence: Evidence
    revision: Mapping[str, Any]
    root: str | os.PathLike = "."
    stage: str = "register"


def card_inputs_for(settings: Params, build: CardBuild, name: str, *,
                    checkpoint: Mapping[str, Any] | None = None) -> CardInputs:
    """The facts of model ``name`` (declared in ``build.decl``) for its card, under the params
    ``settings`` (its hyperparameters, the confirmation rule, the decimals and the thresholds its
    training health is judged by).

    ``checkpoint`` (one of :func:`kept_checkpoints`) makes it the card of that kept checkpoint's
    version: its evaluation table is its own results rows, not the final model's.
    """
    decl, evidence, revision = build.decl, build.evidence, build.revision
    params = settings.model_dump(by_alias=True)
    model = decl.models[name]
    root = Path(build.root)
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
    if model.kind == "policy":
        # the GRPO objective, pinned in every profile (settings.policy.PINNED_TRL_KEYS)
        trl = _dotted(params, "policy.train.trl", source)
        method.update({key: trl[key] for key in ("loss_type", "scale_rewards")})
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
                  "commands": reproduce_commands(build.stage, revision.get("commit", "none"), model.artifact,
                                                 model_md5(model, evidence, root), model.kind,
                                                 revision.get("experiment"))},
        health=evidence.training_health(settings.card.health, _max_completion_length(params)) if model.kind == "policy" else None,
        paths={name: display_path(path, root) for name, path in evidence.sources.items()},
        min_n_confirm=settings.stats.min_n_confirm,
        decimals=settings.registry.card_decimals,
        reference_bar=({"bar": decl.reference_bar.bar, "opponent": decl.reference_bar.opponent}
                       if decl.reference_bar is not None else None),
        confidence=settings.stats.confidence,
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


# The evidence names (reappreg.card.evidence) are re-exported: callers read a card's inputs from here.
__all__ = ["CLAIM_KEYS", "CONDITIONS", "EVAL_COLUMNS", "CardBuild", "CardInputs", "Certificate", "ClaimRejected",
           "Evidence", "LintProblem", "TRAINING_STAGE", "TrainingHealth", "calibration_rows", "card_body", "card_comparisons",
           "card_inputs_for", "card_revision", "check_template", "checkpoint_card_name",
           "kept_checkpoints", "lint_claims", "load_evidence", "metric_label", "model_md5", "numbers_in", "parse_card",
           "read_certificate", "render_card", "reproduce_commands", "source_revision", "training_health",
           "trust_recomputed"]
