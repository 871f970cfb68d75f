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

if TYPE_CHECKING:
    from reappreg.card.evidence import Evidence
    from reappreg.card.inputs import CardInputs


def eval_results(inputs: CardInputs, evidence: Evidence) -> list[Any]:
    """Hugging Face ``model-index`` results (huggingface_hub EvalResult) from the tracked metrics only."""
    from huggingface_hub import EvalResult

    task = inputs.front_matter["pipeline_tag"]
    results = []
    if inputs.kind == "policy":
        # huggingface_hub groups results by dataset type, config and split (not name): one type per opponent.
        # A kept checkpoint's card: its own results rows, never the final model's numbers.
        for row in (inputs.comparisons if inputs.comparisons is not None else evidence.comparisons()):
            for key, name in (("win_rate", "win-rate"), ("cluster_low", "vignette-cluster 95% CI lower bound"),
                              ("iid_low", "iid (Wilson) 95% CI lower bound"), ("n", "scored judgments")):
                if isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool):
                    results.append(EvalResult(
                        task_type=task, dataset_type=f"reappreg/heldout-answers/{row['opponent']}",
                        dataset_config=row["condition"],
                        dataset_name=f"Held-out reappraisals by {row['opponent']} (pairwise LLM judge, both orders)",
                        dataset_split="heldout", metric_type=key, metric_value=row[key],
                        metric_name=f"{name} vs {row['opponent']} ({row['condition']})"))
    else:
        for key, value in inputs.metrics:
            split = "holdout" if ".holdout." in key else "leave-one-vignette-out" if ".lovo." in key else None
            if split is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            results.append(EvalResult(task_type=task, dataset_type="reappreg/heldout-ratings", dataset_split=split,
                                      dataset_name="Held-out human effectiveness ratings", metric_type=key.split(".")[-1],
                                      metric_value=value, metric_name=metric_label(key)))
    return results


def card_metadata(inputs: CardInputs, evidence: Evidence) -> dict[str, Any]:
    """The card's YAML front matter: the declaration's metadata, ``model_name``, ``datasets``, ``model-index``
    and the git revision the card was built at (``reappreg.revision``; registration reads it back)."""
    from huggingface_hub import ModelCardData

    front = inputs.front_matter
    data = ModelCardData(model_name=inputs.name, eval_results=eval_results(inputs, evidence) or None,
                         datasets=list(inputs.datasets), **front)
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
