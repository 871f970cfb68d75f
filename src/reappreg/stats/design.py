"""The evaluation design, re-derived from upstream outputs: judgments are bound to it, never trusted.

A judgments file carries labels (vignette, opponent, generation, pool, verdict) that decide
how contests are clustered and which claim they count toward. Taking those labels as given
lets one file edit turn six vignettes into sixty, pass a weaker opponent off as the bar
opponent, move losses into another pool or drop lost generations. So the stats stage
re-derives the design from the outputs it came from, and binds every judged order to it:

* **The plan.** ``judge.contests.build_contests`` is deterministic in its inputs: the
  generate stage's generations (ids, vignettes, eval_k, pools, sampling seeds, answers),
  the split's held-out answer table (answer id -> vignette, source, text) and the judge
  params (opponents, answers per generation). The same call here gives every contest that
  was planned, with its true labels and both answers' lengths.
* **The sampling plan.** Where generations were sampled (the policy, model and checkpoint
  conditions, fresh pools, off-distribution sets), ``eval.plan.plan_samples`` re-derives
  every sequence the generate stage drew from the vignettes and the generate params (K evals,
  samples per vignette, best-of-N, the base seed or a fresh pool's own). The generations
  file must hold exactly those ids, each with its planned vignette, eval, pool and seed, and
  one selected winner per best-of-N pool: a lost generation cannot be deleted from both files,
  nor a copy added under a new id, because the count per vignette is a params fact.
* **Binding.** A judged order whose contest is not planned, or whose labels differ from the
  plan's (vignette, eval_k, pool, seed, opponent source, opponent answer, either length), is
  refused with its rows named. Every vignette of the split's vignette list must be planned.
* **Identity.** Ids that differ only by Unicode compatibility form, case, whitespace or
  invisible characters are one id to a reader; two such ids in the inputs are refused.
* **One policy.** Every generation names the model it came from (``model_md5``, the generate
  stage's md5 of the policy folder): one file mixing two models is refused, and the one md5 is
  the policy whose looks the stats stage counts (``stats.looks``).
* **Missing is worst case.** A planned order with no judged row enters the bounds as a loss
  (lower) and a win (upper), exactly like an unparseable one: dropping rows, generations or
  whole vignettes can only make a claim harder.
* **Verdicts from the judge's own output.** A row with label probabilities must carry their
  argmax (within ``ARGMAX_TOLERANCE``); a label-only row (guided, json_schema, free_text)
  must carry the verdict its raw reply parses to under its method. A relabelled verdict, or
  a "fallback" verdict next to probabilities that say otherwise, is refused.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import regex

from reappreg import verdicts
from reappreg.errors import InputError
from reappreg.eval.plan import plan_samples, select_vignettes
from reappreg.settings.generate import GenerateSettings

# Probabilities are written as floats after renormalisation; a verdict whose probability is
# this close to the top one is still the argmax (float noise, never a real preference).
ARGMAX_TOLERANCE = 1e-6
# The labels a plan compares with the judged rows (the contest id is derived from two of them).
PLANNED_FIELDS = ("generation_id", "vignette_id", "eval_k", "selection", "sampling_seed", "opponent_source",
                  "opponent_answer_id", "policy_chars", "opponent_chars")
_INVISIBLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Cf}\p{Cc}\p{Z}\s]+")
MAX_EXAMPLES = 5


def canonical_id(value: str) -> str:
    """An id as a reader sees it: NFKC, case-folded, without whitespace or invisible characters."""
    return _INVISIBLE.sub("", unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold()))


def _examples(items: Sequence[str]) -> str:
    shown = "; ".join(items[:MAX_EXAMPLES])
    return shown + (f"; ... ({len(items) - MAX_EXAMPLES} more)" if len(items) > MAX_EXAMPLES else "")


def check_distinct_ids(kind: str, ids: Iterable[str], source: str) -> None:
    """Refuse two different ids of one kind that a reader cannot tell apart."""
    seen: dict[str, set[str]] = {}
    for value in ids:
        seen.setdefault(canonical_id(str(value)), set()).add(str(value))
    clashes = [" vs ".join(repr(v) for v in sorted(group)) for group in seen.values() if len(group) > 1]
    if clashes:
        raise InputError(f"{source}: {len(clashes)} {kind}(s) differ only by case, width, whitespace or invisible "
                         f"characters (one id to a reader, several clusters to the statistics): {_examples(clashes)}")


@dataclass(frozen=True)
class Plan:
    """Every planned contest (one row each, ``PLANNED_FIELDS`` plus ``contest_id``) and the vignettes."""

    contests: pd.DataFrame
    vignettes: tuple[str, ...]
    labels: tuple[str, ...]

    @property
    def n_generations(self) -> int:
        return int(self.contests["generation_id"].nunique())


def derive_plan(generations: Sequence[Mapping[str, Any]], answers: Sequence[Mapping[str, Any]],
                vignette_ids: Sequence[str], *, opponents: Sequence[str], answers_per_generation: int,
                labels: tuple[str, ...], source: str = "plan") -> Plan:
    """The contests the judge stage was asked to judge, from the same inputs and params."""
    from reappreg.judge.contests import build_contests

    check_distinct_ids("vignette id", [*vignette_ids, *(g.get("vignette_id", "") for g in generations),
                                       *(a.get("vignette_id", "") for a in answers)], source)
    check_distinct_ids("generation id", [g.get("generation_id", "") for g in generations], source)
    check_distinct_ids("answer id", [a.get("answer_id", "") for a in answers], source)
    check_distinct_ids("opponent source", [a.get("source", "") for a in answers], source)
    planned_vignettes = {g.get("vignette_id") for g in generations if g.get("selected")}
    missing = sorted(set(vignette_ids) - planned_vignettes)
    if missing:
        raise InputError(f"{source}: vignette(s) {missing} of the split have no selected generation: the "
                         "generations file does not cover the evaluation design")
    unknown = sorted(planned_vignettes - set(vignette_ids))
    if unknown:
        raise InputError(f"{source}: generations name vignette(s) {unknown} that the split does not have")
    contests = build_contests(generations, answers, opponents, answers_per_generation)
    table = pd.DataFrame([{
        "contest_id": c.contest_id, "generation_id": c.generation_id, "vignette_id": c.vignette_id,
        "eval_k": c.eval_k, "selection": c.selection, "sampling_seed": c.sampling_seed,
        "opponent_source": c.opponent_source, "opponent_answer_id": c.opponent_answer_id,
        "policy_chars": len(c.policy_answer), "opponent_chars": len(c.opponent_answer),
    } for c in contests])
    return Plan(contests=table, vignettes=tuple(sorted(planned_vignettes)), labels=labels)


SAMPLED_FIELDS = ("vignette_id", "eval_k", "selection", "pool_id", "sample_index", "candidate_index",
                  "sampling_seed")


def check_sampling_plan(generations: Sequence[Mapping[str, Any]], vignettes: Sequence[Mapping[str, Any]],
                        generate: GenerateSettings, source: str = "generations", id_prefix: str = "") -> list[str]:
    """Refuse generations that are not exactly the sampling plan of ``generate`` over ``vignettes``.

    Returns the vignette ids the plan covers (``generate.vignettes`` may select some).
    """
    rows = select_vignettes(vignettes, generate.vignettes, source=source)
    planned = {s.generation_id: s for s in plan_samples([v["vignette_id"] for v in rows], generate, id_prefix)}
    seen: dict[str, int] = {}
    for g in generations:
        gid = str(g.get("generation_id"))
        seen[gid] = seen.get(gid, 0) + 1
    problems = [f"{gid!r} appears {n} times" for gid, n in seen.items() if n > 1]
    missing = sorted(set(planned) - set(seen))
    if missing:
        problems.append(f"{len(missing)} planned generation(s) are absent ({_examples(missing)})")
    extra = sorted(set(seen) - set(planned))
    if extra:
        problems.append(f"{len(extra)} generation(s) the plan does not have ({_examples(extra)})")
    winners: dict[str, int] = {}
    for g in generations:
        sample = planned.get(str(g.get("generation_id")))
        if sample is None:
            continue
        expected = {"vignette_id": sample.vignette_id, "eval_k": sample.eval_k, "selection": sample.selection,
                    "pool_id": sample.pool_id, "sample_index": sample.sample_index,
                    "candidate_index": sample.candidate_index, "sampling_seed": sample.seed}
        for field in SAMPLED_FIELDS:
            if str(g.get(field)) != str(expected[field]):
                problems.append(f"{sample.generation_id} {field}: {g.get(field)!r} (planned {expected[field]!r})")
        if sample.selection == "none" and g.get("selected") is not True:
            problems.append(f"{sample.generation_id}: a plain sample is always evaluated, but selected is "
                            f"{g.get('selected')!r}")
        if g.get("selected") is True:
            winners[sample.pool_id] = winners.get(sample.pool_id, 0) + 1
    pools = {planned[gid].pool_id for gid in seen if gid in planned}   # absent ones are named above
    wrong = sorted(p for p in pools if winners.get(p, 0) != 1)
    if wrong:
        problems.append(f"{len(wrong)} pool(s) without exactly one selected generation "
                        f"({_examples([f'{p} ({winners.get(p, 0)})' for p in wrong])})")
    if problems:
        raise InputError(f"{source}: not the sampling plan of the generate params (generate.evals "
                         f"{generate.evals} x samples_per_vignette {generate.samples_per_vignette} x best_of_n "
                         f"{generate.best_of_n} over {len(rows)} vignette(s), seed {generate.seed}: {len(planned)} "
                         f"sequences): {_examples(problems)}")
    return [v["vignette_id"] for v in rows]


def policy_identity(generations: Sequence[Mapping[str, Any]], source: str = "generations") -> str | None:
    """The one ``model_md5`` every generation records (None when none records one: answers that were not
    sampled from a model folder, or written before the field); a mix is refused, naming the models."""
    found = sorted({str(g.get("model_md5")) if g.get("model_md5") is not None else "(none)" for g in generations})
    if found == ["(none)"] or not found:
        return None
    if len(found) > 1:
        raise InputError(f"{source}: the generations come from more than one policy model (model_md5: "
                         f"{', '.join(found[:MAX_EXAMPLES])}): one generations file is one policy's answers")
    return found[0]


def _verdict_problem(row: Mapping[str, Any], labels: tuple[str, ...]) -> str | None:
    """Why a row's verdict is not what the judge's own output says; None when it is."""
    from reappreg.judge.parse import from_reply

    verdict, method = row["verdict"], row["verdict_method"]
    probs = {"A": row["p_a"], "B": row["p_b"], "tie": row["p_tie"]}
    if probs["A"] is not None and not (isinstance(probs["A"], float) and math.isnan(probs["A"])):
        present = {k: float(v) for k, v in probs.items() if v is not None and not math.isnan(float(v))}
        top = max(present.values())
        winners = {k for k, v in present.items() if v >= top - ARGMAX_TOLERANCE}
        if {"A", "B"} <= winners:
            winners.add("tie")  # equal top masses of A and B are a tie (judge.parse)
        if verdict not in winners:
            return (f"verdict {verdict!r} is not the argmax of its label probabilities "
                    f"(A {present.get('A'):.4g}, B {present.get('B'):.4g}, tie {present.get('tie')}) "
                    f"[method {method}]")
        return None
    if method == "logprob":
        return None if verdict == "unparseable" else f"method logprob with verdict {verdict!r} but no probabilities"
    raw = row.get("raw_output")
    if not isinstance(raw, str):
        return f"method {method} has no raw_output to read its verdict from"
    parsed = from_reply(method, raw, labels)
    expected = "unparseable" if parsed is None else parsed.verdict
    if verdict != expected:
        return f"verdict {verdict!r} but its raw reply {raw[:60]!r} reads {expected!r} under method {method}"
    return None


def check_verdicts(records: Sequence[Mapping[str, Any]], labels: tuple[str, ...], source: str) -> dict[str, int]:
    """Refuse rows whose verdict is not re-derived from the judge's output; the method mix per count."""
    bad = []
    for lineno, rec in enumerate(records, start=1):
        problem = _verdict_problem(rec, labels)
        if problem:
            bad.append(f"row {lineno}: {problem}")
    if bad:
        raise InputError(f"{source}: {len(bad)} verdict(s) disagree with the judge's own output: {_examples(bad)}")
    mix: dict[str, int] = {}
    for rec in records:
        mix[rec["verdict_method"]] = mix.get(rec["verdict_method"], 0) + 1
    return dict(sorted(mix.items()))


def bind(frame: pd.DataFrame, plan: Plan, source: str = "judgments") -> tuple[pd.DataFrame, dict[str, Any]]:
    """Bind validated judged orders to the plan; planned orders with no row come back as missing.

    Returns the frame with one placeholder row (``present`` False, score NaN) per planned
    order that was not judged, and a summary of what was checked.
    """
    for kind, column in (("vignette id", "vignette_id"), ("generation id", "generation_id"),
                         ("answer id", "opponent_answer_id"), ("opponent source", "opponent_source")):
        check_distinct_ids(kind, [*frame[column].astype(str).unique(), *plan.contests[column].astype(str).unique()],
                           source)
    planned = plan.contests.set_index("contest_id")
    known = frame["contest_id"].isin(planned.index)
    if not known.all():
        rows = frame[~known]
        examples = [f"row {r.row} (generation {r.generation_id!r}, answer {r.opponent_answer_id!r}, "
                    f"vignette {r.vignette_id!r})" for r in rows.itertuples()]
        raise InputError(f"{source}: {len(rows)} judged order(s) are not contests the design planned (the "
                         f"generations, the held-out answers and judge.opponents/answers_per_generation give "
                         f"{len(planned)} contests): {_examples(examples)}")
    expected = planned.loc[frame["contest_id"], list(PLANNED_FIELDS)].reset_index(drop=True)
    observed = frame[list(PLANNED_FIELDS)].reset_index(drop=True)
    wrong = []
    for field in PLANNED_FIELDS:
        differs = expected[field].astype(str) != observed[field].astype(str)
        for i in differs[differs].index:
            wrong.append(f"row {frame['row'].iloc[i]} {field}: {observed[field].iloc[i]!r} "
                         f"(planned {expected[field].iloc[i]!r})")
    if wrong:
        raise InputError(f"{source}: {len(wrong)} label(s) differ from the planned contest's: {_examples(wrong)}")
    have = set(zip(frame["contest_id"], frame["order"]))
    template = frame.iloc[0]
    ghosts = []
    for cid, contest in planned.iterrows():
        if contest["selection"] not in set(frame["selection"]):
            continue  # another pool's contests: judged in their own file
        for order in verdicts.CONTEST_ORDERS:
            if (cid, order) not in have:
                ghosts.append({**{k: contest[k] for k in PLANNED_FIELDS}, "contest_id": cid, "order": order,
                               "verdict": "missing", "score": math.nan, "weighted": math.nan,
                               "verdict_method": "missing", "judge_model": template["judge_model"],
                               "judge_fingerprint": template["judge_fingerprint"],
                               "condition": template["condition"] if contest["selection"] == template["selection"]
                               else contest["selection"], "row": 0, "present": False})
    bound = frame.assign(present=True)
    if ghosts:
        from reappreg.stats.inputs import CONDITION_OF_SELECTION

        extra = pd.DataFrame(ghosts)
        extra["condition"] = extra["selection"].map(CONDITION_OF_SELECTION)
        bound = pd.concat([bound, extra[bound.columns]], ignore_index=True)
    pools = sorted(set(frame["selection"]))
    summary = {
        "planned_contests": int(planned["selection"].isin(pools).sum()),
        "judged_orders": int(len(frame)),
        "missing_orders": len(ghosts),
        "vignettes": list(plan.vignettes),
        "generations": int(planned[planned["selection"].isin(pools)]["generation_id"].nunique()),
    }
    return bound, summary


@dataclass(frozen=True)
class DesignSources:
    """The upstream files a condition's judgments are bound to, and how they were made.

    ``opponents``: the answer sources it was judged against (None: ``judge.opponents``; an
    off-distribution set names its own). ``generate``: the generate settings its answers
    were sampled under, with a fresh pool's own seed (None: answers that were not sampled,
    a reference condition's file).
    """

    generations: Path
    answers: Path
    vignettes: Path
    opponents: tuple[str, ...] | None = None
    generate: GenerateSettings | None = None
    id_prefix: str = ""   # a fresh pool's generation ids start with eval.plan.fresh_pool_prefix(seed)


def bind_files(judgments: str | Path, sources: DesignSources, judge, *, source: str | None = None
               ) -> tuple[pd.DataFrame, dict]:
    """``load_bound_judgments`` over a condition's ``DesignSources``."""
    return load_bound_judgments(judgments, sources.generations, sources.answers, sources.vignettes, judge,
                                generate=sources.generate, opponents=sources.opponents, source=source,
                                id_prefix=sources.id_prefix)


def load_bound_judgments(judgments: str, generations: str, answers: str, vignettes: str, judge, *,
                         generate: GenerateSettings | None = None, opponents: Sequence[str] | None = None,
                         source: str | None = None, id_prefix: str = "") -> tuple[pd.DataFrame, dict]:
    """Read the judgments and bind them to the design derived from the upstream files.

    ``judge`` is the validated ``JudgeSettings`` (opponents, answers per generation, ties);
    ``opponents`` overrides its opponents (an off-distribution set's own). ``generate`` is
    the generate settings the generations were sampled under (with a fresh pool's seed);
    None only for answers that were not sampled (a reference condition's file).
    Returns the bound frame and what was checked (``design`` of the claims file).
    """
    from reappreg.io import read_jsonl
    from reappreg.judge.prompt import verdict_labels
    from reappreg.stats.inputs import validate_judgments

    labels = verdict_labels(judge.allow_tie)
    source = source or str(judgments)
    records = read_jsonl(judgments)
    if not records:
        raise InputError(f"{source}: no judgments (empty file)")
    frame = validate_judgments(records, source)
    methods = check_verdicts(records, labels, source)
    vignette_rows = read_jsonl(vignettes)
    generation_rows = read_jsonl(generations)
    vignette_ids = [str(v["vignette_id"]) for v in vignette_rows]
    if generate is not None:
        vignette_ids = check_sampling_plan(generation_rows, vignette_rows, generate, source=str(generations),
                                           id_prefix=id_prefix)
    opponents = list(judge.opponents if opponents is None else opponents)
    plan = derive_plan(generation_rows, read_jsonl(answers), vignette_ids, opponents=opponents,
                       answers_per_generation=judge.answers_per_generation, labels=labels,
                       source=f"{generations} + {answers}")
    bound, summary = bind(frame, plan, source)
    sampling = ({"evals": generate.evals, "samples_per_vignette": generate.samples_per_vignette,
                 "best_of_n": generate.best_of_n, "seed": generate.seed} if generate is not None else None)
    return bound, {**summary, "verdict_methods": methods, "opponents": opponents,
                   "answers_per_generation": judge.answers_per_generation, "sampling_plan": sampling,
                   "policy_model_md5": policy_identity(generation_rows, str(generations))}


__all__ = ["ARGMAX_TOLERANCE", "DesignSources", "Plan", "bind", "bind_files", "canonical_id", "check_distinct_ids", "check_sampling_plan", "check_verdicts",
           "derive_plan", "load_bound_judgments", "policy_identity"]
