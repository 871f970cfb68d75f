"""A card's YAML front matter (Hugging Face metadata with ``model-index``), the revision it was
built at, and reading a card back (front matter, body, revision, the numbers in its text)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import yaml

from reappreg.card.labels import metric_label
from reappreg.errors import InputError
from reappreg.evidence.formatting import fmt

if TYPE_CHECKING:
    from reappreg.card.evidence import Evidence
    from reappreg.card.inputs import CardInputs


# What a Hugging Face hub reader knows a number as: the card's metric leaf key -> its model-index
# ``type`` (``evaluate`` metric ids, and ``win_rate`` for the pairwise judge's win-rate). Counts,
# interval bounds, settings and diagnostics are not results a reader compares models by: they stay
# in the card's body (an interval is stated in its estimate's ``name``).
HUB_METRIC_TYPES = {"pairwise_accuracy": "accuracy", "model_accuracy": "accuracy", "rival_accuracy": "accuracy",
                    "spearman": "spearmanr", "spearman_within_vignette": "spearmanr", "win_rate": "win_rate"}
# Key components whose numbers are diagnostics, not results: ``disagreement_vs_error.spearman`` is the
# seeds' disagreement against their rank error, not a correlation with the ratings.
NOT_RESULTS = ("disagreement_vs_error",)
# Where a reward model's metric was measured (a middle key component), as model-index splits.
RM_SPLITS = {"holdout": "holdout", "lovo": "leave-one-vignette-out", "beats_length_baseline": "leave-one-vignette-out"}
# The reward-model gate whose rival is the trivial baseline a card's accuracy leads beside.
RIVAL_GATE = "beats_length_baseline"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _rm_split(key: str) -> str | None:
    parts = key.split(".")
    return next((RM_SPLITS[p] for p in parts[1:-1] if p in RM_SPLITS), None)


def _rating_correlation(shown: dict[str, Any], split: str) -> str | None:
    """The key of the ranking model's Spearman correlation with the human ratings on ``split``
    (``<file>.<split>.ranking.spearman``, or ``<file>.<split>.spearman`` for a model with one part)."""
    for key in shown:
        if re.fullmatch(rf"[^.]+\.{split}\.(ranking\.)?spearman", key) and _number(shown[key]):
            return key
    return None


def _rm_results(inputs: CardInputs, task: str) -> list[Any]:
    """A reward model's results, leading with what a reader compares reward models by: pairwise
    accuracy beside its trivial baseline (the strongest trivial rival the ``beats_length_baseline``
    gate names, on the gate's pairs, as the metrics file records them), then the ranking model's
    Spearman correlation with the human ratings and pairwise accuracy on each split; then the other
    accuracies and correlations shown."""
    from huggingface_hub import EvalResult

    shown = dict(inputs.metrics)
    order: list[tuple[str, str]] = []  # (key, name)
    gate = next((k[: -len("model_accuracy")] for k in shown
                 if k.endswith(f".{RIVAL_GATE}.model_accuracy") and _number(shown[k])), None)
    if gate is not None:
        order.append((f"{gate}model_accuracy", metric_label(f"{gate}model_accuracy")))
        rival = shown.get(f"{gate}rival")
        if _number(shown.get(f"{gate}rival_accuracy")) and isinstance(rival, str):
            context = metric_label(f"{gate}rival_accuracy").partition(" (")[2]
            order.append((f"{gate}rival_accuracy", f"Pairwise accuracy of the strongest trivial rival, {rival}"
                                                   + (f" ({context}" if context else "")))
    for split in ("lovo", "holdout"):
        key = _rating_correlation(shown, split)
        if key is not None:
            order.append((key, f"{metric_label(key)} with the human ratings"))
            accuracy = key[: -len("spearman")] + "pairwise_accuracy"
            if _number(shown.get(accuracy)):
                order.append((accuracy, metric_label(accuracy)))
    for key, value in shown.items():
        if (key.split(".")[-1] in HUB_METRIC_TYPES and _number(value) and _rm_split(key) is not None
                and not any(p in NOT_RESULTS for p in key.split(".")) and key not in dict(order)):
            order.append((key, metric_label(key)))
    return [EvalResult(task_type=task, dataset_type="reappreg/heldout-ratings", dataset_split=_rm_split(key),
                       dataset_name="Held-out human effectiveness ratings", metric_type=HUB_METRIC_TYPES[key.split(".")[-1]],
                       metric_value=shown[key], metric_name=name)
            for key, name in order]


def _win_rate_name(row: dict[str, Any], inputs: CardInputs) -> str:
    """``Win-rate vs gpt-4-0314, the reference bar's opponent (bar 0.608; policy; vignette-cluster 95% CI
    0.804 to 0.956; n 240)``: the estimate with its interval and count, all from the tracked files."""
    bar = inputs.reference_bar or {}
    details = [row["condition"]]
    if row["opponent"] == bar.get("opponent"):
        details.insert(0, f"bar {fmt(bar['bar'], inputs.decimals)}")
    if _number(row.get("cluster_low")) and _number(row.get("cluster_high")):
        level = f" {inputs.confidence * 100:g}%" if inputs.confidence else ""
        details.append(f"vignette-cluster{level} CI {fmt(row['cluster_low'], inputs.decimals)} to "
                       f"{fmt(row['cluster_high'], inputs.decimals)}")
    if _number(row.get("n")):
        details.append(f"n {fmt(row['n'], inputs.decimals)}")
    who = f"{row['opponent']}, the reference bar's opponent" if row["opponent"] == bar.get("opponent") else row["opponent"]
    return f"Win-rate vs {who} ({'; '.join(details)})"


def _policy_results(inputs: CardInputs, evidence: Evidence, task: str) -> list[Any]:
    """A policy's results: its win-rate against the reference bar's opponent first (the model's own
    condition: ``policy``, or a kept checkpoint's), its interval in the name; then the other rows."""
    from huggingface_hub import EvalResult

    # A kept checkpoint's card: its own results rows, never the final model's numbers.
    rows = inputs.comparisons if inputs.comparisons is not None else evidence.comparisons()
    own = inputs.checkpoint["condition"] if inputs.checkpoint is not None else "policy"
    bar_opponent = (inputs.reference_bar or {}).get("opponent")
    rows = sorted(rows, key=lambda r: (r["condition"] != own, r["opponent"] != bar_opponent))
    # huggingface_hub groups results by dataset type, config and split (not name): one type per opponent.
    return [EvalResult(task_type=task, dataset_type=f"reappreg/heldout-answers/{row['opponent']}",
                       dataset_config=row["condition"],
                       dataset_name=f"Held-out reappraisals by {row['opponent']} (pairwise LLM judge, both orders)",
                       dataset_split="heldout", metric_type=HUB_METRIC_TYPES["win_rate"], metric_value=row["win_rate"],
                       metric_name=_win_rate_name(row, inputs))
            for row in rows if _number(row.get("win_rate"))]


def eval_results(inputs: CardInputs, evidence: Evidence) -> list[Any]:
    """Hugging Face ``model-index`` results (huggingface_hub EvalResult) from the tracked metrics only,
    typed from :data:`HUB_METRIC_TYPES`, the results a reader expects first."""
    task = inputs.front_matter["pipeline_tag"]
    if inputs.kind == "policy":
        return _policy_results(inputs, evidence, task)
    return _rm_results(inputs, task)


def card_metadata(inputs: CardInputs, evidence: Evidence) -> dict[str, Any]:
    """The card's YAML front matter: the declaration's metadata, ``model_name``, ``model-index`` and the git
    revision the card was built at (``reappreg.revision``; registration reads it back).

    No ``datasets``: that field names Hugging Face hub datasets, and this project's data are local
    files; their paths and md5s are in the card's body (training data, data separation)."""
    from huggingface_hub import ModelCardData

    front = inputs.front_matter
    data = ModelCardData(model_name=inputs.name, eval_results=eval_results(inputs, evidence) or None, **front)
    meta = {"model_name": inputs.name, **data.to_dict()}  # to_dict keeps model_name only inside model-index
    meta["reappreg"] = {"revision": {"git_commit": inputs.revision["commit"], "git_dirty": inputs.revision["dirty"],
                                     "dirty_paths": list(inputs.revision.get("dirty_paths", [])),
                                     "dirty_allowed": bool(inputs.revision.get("dirty_allowed", False))}}
    if inputs.kind == "policy":
        # The results table rows this version is (metrics/results.json rows[*].row_id).
        meta["reappreg"]["results_rows"] = [r["row_id"] for r in inputs.results_rows]
    if inputs.checkpoint is not None:
        meta["reappreg"]["checkpoint"] = {k: inputs.checkpoint[k] for k in ("step", "final_step", "folder", "model_md5",
                                                                          "training_run_id", "condition")}
    return meta


def validate_card(text: str, source: str) -> Any:
    """Parse ``text`` with huggingface_hub's ModelCard (offline): its metadata, ``model-index`` included, must load."""
    from huggingface_hub import ModelCard

    try:
        return ModelCard(text, ignore_metadata_errors=False)
    except Exception as exc:  # huggingface_hub raises ValueError/KeyError subclasses for bad metadata
        raise InputError(f"{source}: not a valid Hugging Face model card: {exc}") from exc


# --------------------------------------------------------------------------- revision

# Files the pipeline itself writes into git (dvc.lock and the outputs kept in git): a tree that
# differs from its commit only there is the commit's own pipeline run, not uncommitted work.
GENERATED_IN_GIT = ("dvc.lock", "metrics/", "plots/", "reports/")


def source_revision(root: str | os.PathLike = ".", generated: Sequence[str] = GENERATED_IN_GIT) -> dict[str, Any]:
    """``commit`` (HEAD), ``dirty`` ("true"/"false") and ``dirty_paths``: tracked files changed outside ``generated``."""
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "-z"], cwd=root,
                                capture_output=True, text=True, check=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return {"commit": "none", "dirty": "unknown", "dirty_paths": []}
    entries, paths = iter(status.split("\0")), set()
    for entry in entries:
        if len(entry) > 3:
            paths.add(entry[3:])
            if entry[0] in "RC":
                next(entries, None)  # a rename's or copy's second entry is the original path
    paths = sorted(paths)
    # DVC writes the .gitignore files beside its outputs (it adds an entry per new output): not source.
    changed = [p for p in paths if not any(p == g or (g.endswith("/") and p.startswith(g)) for g in generated)
               and Path(p).name != ".gitignore"]
    # Under `dvc exp run -S ...` the edited params.yaml is the experiment's own, recorded in its
    # experiment ref (`dvc exp apply NAME` restores it); any other change still counts.
    experiment = os.environ.get("DVC_EXP_NAME") or None
    if experiment:
        changed = [p for p in changed if p != "params.yaml"]
    return {"commit": commit, "dirty": "true" if changed else "false", "dirty_paths": changed, "experiment": experiment}


# --------------------------------------------------------------------------- reading a card back

_FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def parse_card(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, body) of a card."""
    match = _FRONT.match(text)
    if not match:
        raise InputError("card: no YAML front matter (a card starts with '---')")
    meta = yaml.safe_load(match.group(1)) or {}
    if not isinstance(meta, dict):
        raise InputError("card: front matter must be a mapping")
    return meta, text[match.end():]


def card_body(markdown: str) -> str:
    """A card without its YAML front matter (for the MLflow version description: the facts are tags there)."""
    return parse_card(markdown)[1].lstrip("\n")


def card_revision(markdown: str) -> dict[str, Any]:
    """The revision a card was built at: ``git_commit``, ``git_dirty``, ``dirty_paths``, ``dirty_allowed``."""
    revision = (parse_card(markdown)[0].get("reappreg") or {}).get("revision")
    if not isinstance(revision, dict) or "git_commit" not in revision:
        raise InputError("card: front matter has no reappreg.revision (built before cards recorded it?)")
    return revision


# Numbers as a reader sees them: not part of a word, identifier or hash.
NUMBER = re.compile(r"(?<![\w.\-/])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]*\w)")


def numbers_in(text: str) -> list[str]:
    return NUMBER.findall(text)
