"""Evaluation conditions besides the GRPO policy: reference answer files and off-distribution sets.

Every condition is judged against the bar opponent (GPT-4-0314) with the same judge, prompt
and protocol as the ``policy`` condition, so its judgments follow the same row contract
(``reappreg.judge.contests``) and the results table (``reappreg.stats.results``) reads them alike.

* **Model conditions** (``stats.model_conditions``): a policy folder ``models/policy/<name>``
  (the CPU default: ``base``, the untrained base) answers through ``reappreg generate run``.
* **Checkpoint conditions** (``policy.train.checkpoint_steps``): each kept GRPO checkpoint
  ``models/policy/checkpoints/step_<n>`` is the condition ``policy-step-<n>`` (``reappreg.settings.conditions``),
  generated and judged exactly like the final model, so the table has a row per checkpoint.
* **Reference conditions** (``stats.reference_conditions``): a file of answers somebody
  else's model wrote (one JSON object a line: ``vignette_id``, ``text``, ``source``), e.g. a
  frontier model's single-pass answers. Such answers are evaluation text like the held-out
  answers: no training text may contain them. :func:`reference_generations` therefore runs
  the separation guard's detectors with the reference answers as the protected set over
  every training source and refuses on any hit (naming the records), before turning the
  answers into generation rows the judge reads.
* **Off-distribution sets** (``stats.ood_sets``, default off): fresh scenarios no training
  text contains (guard-checked the same way, :func:`check_fresh_scenarios`), marked OOD, with
  an opponent's answers to them (e.g. the human reframes of Sharma et al. 2023, read in
  place by :func:`load_situation_csv`; never copied into the repository).

What the guard check covers: the guard's own detectors and normalisation (word n-gram
containment, MinHash Jaccard, letters and fragments; ``guard`` params) between every
protected text and every record of the given training sources. It does not look at model
weights, and it does not check sources it was not given.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.settings.guard import GuardSettings

REFERENCE_KEYS = ("vignette_id", "text", "source")
MAX_EXAMPLES = 5


def declared_condition(declared: Sequence[Any], name: str, *, field: str, command: str) -> Any:
    """The entry called ``name`` of a declared list of conditions (``stats.reference_conditions``,
    ``stats.ood_sets``); an undeclared name is refused, listing the declared ones."""
    by_name = {entry.name: entry for entry in declared}
    if name not in by_name:
        raise InputError(f"{command}: {name!r} is not in {field} ({sorted(by_name)})")
    return by_name[name]


def _stable_seed(*parts: str) -> int:
    """A reproducible 63-bit id for a row that was not sampled (unique per condition and row)."""
    return int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:8], "big") >> 1


def read_reference_answers(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a reference answers file; every row needs ``vignette_id``, ``text`` and ``source``."""
    from reappreg.io import read_jsonl

    rows = read_jsonl(path)
    if not rows:
        raise InputError(f"{path}: no reference answers (empty file)")
    bad = []
    for i, row in enumerate(rows, start=1):
        missing = [k for k in REFERENCE_KEYS if not isinstance(row.get(k), str) or not row.get(k).strip()]
        if missing:
            bad.append(f"row {i}: {', '.join(missing)}")
    if bad:
        raise InputError(f"{path}: {len(bad)} reference answer(s) lack a non-empty {'/'.join(REFERENCE_KEYS)}: "
                         + "; ".join(bad[:MAX_EXAMPLES]))
    return rows


def guard_hits(protected: Sequence[tuple[str, str]], training_specs: Sequence[str], guard: GuardSettings,
               *, what: str) -> list[Any]:
    """Guard hits of every training record against the ``protected`` (id, text) pairs."""
    from reappreg.guard import (
        AnswerMeta,
        FastHasher,
        HeldoutIndex,
        SourceSpec,
        check_units,
        fragment_groups,
        read_source,
    )

    if not training_specs:
        raise InputError(f"{what}: no training sources to check against (a check over nothing certifies nothing)")
    index = HeldoutIndex.build([AnswerMeta(pid, what) for pid, _ in protected], [t for _, t in protected],
                               guard, FastHasher())
    sources = [read_source(SourceSpec.parse(spec)) for spec in training_specs]
    units = [u for src in sources for u in src.units]
    return check_units(index, units, groups=fragment_groups(sources, guard), workers=1,
                       chunk_size=guard.chunk_size, max_shared=guard.max_shared_reported)


def _refuse_hits(hits: Sequence[Any], what: str, n_protected: int, training_specs: Sequence[str]) -> dict[str, Any]:
    if hits:
        examples = [f"{h.source} record {h.record_id} ~ {h.answer_id} ({h.detector} {h.score:.2f})"
                    for h in hits[:MAX_EXAMPLES]]
        raise InputError(f"{what}: {len(hits)} overlap(s) between its texts and training data, blocked by the "
                         f"separation guard: {'; '.join(examples)}")
    return {"checked_texts": n_protected, "training_sources": list(training_specs), "hits": 0,
            "detectors": "the guard's (ngram, minhash, chars, fragments; guard params)"}


def reference_generations(name: str, answers: Sequence[Mapping[str, Any]], vignettes: Sequence[Mapping[str, Any]],
                          *, training_specs: Sequence[str], guard: GuardSettings,
                          source_name: str = "reference answers") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Generation rows (the judge's input contract) of a reference condition, after the guard check.

    Raises InputError when any training record overlaps a reference answer, or an answer names
    a vignette that is not evaluated. Returns (rows, guard summary).
    """
    by_id = {str(v["vignette_id"]): v for v in vignettes}
    unknown = sorted({str(a["vignette_id"]) for a in answers} - set(by_id))
    if unknown:
        raise InputError(f"{source_name}: {len(unknown)} answer(s) name vignettes not in the eval set: "
                         f"{', '.join(unknown[:MAX_EXAMPLES])}")
    ids = [f"ref-{name}-{i}" for i in range(len(answers))]
    hits = guard_hits(list(zip(ids, (a["text"] for a in answers))), training_specs, guard,
                      what=f"reference condition {name!r} ({source_name})")
    summary = _refuse_hits(hits, f"reference condition {name!r} ({source_name})", len(answers), training_specs)
    counters: dict[str, int] = {}
    rows = []
    for gid, answer in zip(ids, answers):
        vid = str(answer["vignette_id"])
        sample = counters.get(vid, 0)
        counters[vid] = sample + 1
        seed = _stable_seed(name, gid, answer["text"])
        rows.append({
            "generation_id": gid, "vignette_id": vid, "scenario": by_id[vid]["scenario"], "eval_k": 0,
            "sample_index": sample, "candidate_index": 0, "seed": seed, "sampling_seed": seed,
            "raw_text": answer["text"], "thinking": "", "answer": answer["text"], "has_close_tag": False,
            "n_tokens": len(answer["text"].split()), "hit_max_new_tokens": False, "selection": "none",
            "selected": True, "best_of_n": 1, "pool_id": None, "selection_pool": None, "rm_score": None,
            "backend": "reference_answers", "model": str(answer["source"]),
        })
    return rows, summary


# ----------------------------------------------------------------------------- off-distribution sets


def load_situation_csv(path: str | Path, *, scenario_field: str, answer_field: str, set_name: str,
                       opponent: str, max_scenarios: int | None = None) -> tuple[list[dict], list[dict]]:
    """Fresh scenarios and one opponent's answers to them from a CSV read in place.

    Rows sharing a scenario text become one scenario (``<set_name>-<n>``) with every answer
    of that scenario as an opponent answer. Returns (vignettes, answers) in the shapes the
    generate and judge stages read (``vignette_id, scenario`` / ``answer_id, vignette_id,
    source, text``); ``max_scenarios`` keeps the first N scenarios.
    """
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [f for f in (scenario_field, answer_field) if f not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{path}: column(s) {', '.join(missing)} not found (columns: {reader.fieldnames})")
        records = list(reader)
    scenario_ids: dict[str, str] = {}
    vignettes, answers = [], []
    for i, rec in enumerate(records, start=2):
        scenario, answer = (rec[scenario_field] or "").strip(), (rec[answer_field] or "").strip()
        if not scenario or not answer:
            continue
        if scenario not in scenario_ids:
            if max_scenarios is not None and len(scenario_ids) >= max_scenarios:
                continue
            scenario_ids[scenario] = f"{set_name}-{len(scenario_ids)}"
            vignettes.append({"vignette_id": scenario_ids[scenario], "scenario": scenario, "ood": True,
                              "ood_set": set_name})
        answers.append({"answer_id": f"{scenario_ids[scenario]}-line{i}", "vignette_id": scenario_ids[scenario],
                        "source": opponent, "text": answer})
    if not vignettes:
        raise InputError(f"{path}: no rows with both {scenario_field!r} and {answer_field!r}")
    return vignettes, answers


def check_fresh_scenarios(set_name: str, vignettes: Sequence[Mapping[str, Any]], *, training_specs: Sequence[str],
                          guard: GuardSettings) -> dict[str, Any]:
    """Refuse an off-distribution set any of whose scenarios a training source contains.

    Returns the guard summary with ``ood: true`` (the set may be labelled out-of-distribution).
    """
    protected = [(str(v["vignette_id"]), str(v["scenario"])) for v in vignettes]
    hits = guard_hits(protected, training_specs, guard, what=f"off-distribution set {set_name!r}")
    return {**_refuse_hits(hits, f"off-distribution set {set_name!r}", len(protected), training_specs), "ood": True}


__all__ = ["REFERENCE_KEYS", "check_fresh_scenarios", "declared_condition", "guard_hits", "load_situation_csv", "read_reference_answers",
           "reference_generations"]
