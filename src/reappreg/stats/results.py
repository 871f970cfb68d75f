"""The results table: one row per evaluated condition (and opponent), with both interval kinds.

Why: the seeds' headline table compared an iid bound with the reference bar, picked a winner
on the pool it then reported, and called a win against a weak opponent on fresh scenarios a
generalisation. This module builds ``metrics/results.json`` and ``reports/results.md`` from
the judgments of every condition (``reappreg.eval.conditions``) with the statistics package
(``reappreg.stats``: contest-level scores, worst-case vignette-cluster bounds, n_eff, the
length-controlled win-rate) and closes each of those holes:

* **Both interval kinds, side by side, never mixed.** Each row carries the iid Wilson
  interval over contests, marked *screening only*, and the worst-case vignette-cluster
  interval the claims use. The bar column (the reference bar pinned in registry/models.yaml)
  reads ONLY the cluster lower bound: no cell compares an iid bound with a reference point.
* **The winner's curse** (:func:`best_of_k_optimism`): when a winner is picked among K
  candidates (``results.selection_candidates``) on the same judgments it is reported on, its
  win-rate is optimistic. The expected optimism is estimated by a bootstrap over vignettes
  (resample vignettes, pick the best of K in the resample, take its resampled minus its
  full-sample win-rate). A selected candidate is ``promotable`` past ``candidate`` only if
  judgments of a FRESH pool (new generations, so new contests; no generation or sampling seed
  shared with the selection pool) give a worst-case cluster bound that clears the bar, and
  its answers are new words: a fresh answer that near-duplicates a selection-pool answer by
  the separation guard's detectors (:func:`near_duplicates`) makes the pool no confirmation
  (``fresh_pool_near_duplicates``, naming the pairs).
* **Opponent strength** (:func:`opponent_strengths`): an opponent's strength is its own
  win-rate against the bar opponent on the in-distribution vignettes where the pipeline
  measured it (a reference condition whose answers come from that source), otherwise the
  strength declared in params (``results.opponent_strength``, with a source); the bar
  opponent's strength is 0.5 by definition. A generalisation claim (an off-distribution row,
  cluster bound above 0.5 over scenarios) against an opponent weaker than the bar opponent,
  or of unknown strength, is labelled ``weak_opponent`` and supports nothing.

``metrics/results.json`` (schema version 1)::

    {"schema_version": 1, "confidence", "reference_bar": {bar, opponent, source},
     "judge": {model, fingerprint, trusted, trust_reason, position_biased, bar_judge (its identity is the
               bar's pinned judge: else every bar row and the promotion carry judge_mismatch), bar_judge_reason,
               calibration_too_small (why the calibration is below the bar's pinned size, else null)},
     "rows": [{"row_id": "<condition>/<opponent>", "condition", "kind": policy|checkpoint|model|reference|ood,
               "checkpoint_step" (kind checkpoint: the kept GRPO checkpoint's step, condition policy-step-<n>),
               "pool": <stats condition: policy | best_of_n_fresh_pool | best_of_n_selection_pool>,
               "opponent", "ood", "status": evaluated|not_run, "reason",
               "win_rate", "n" (contests), "n_eff", "n_vignettes", "n_generations",
               "iid_screening_low", "iid_screening_high" (Wilson on contests: screening only),
               "cluster_low", "cluster_high", "binding_interval" (worst-case cluster interval),
               "lc_win_rate", "lc_low", "lc_high",
               "mean_length" (mean characters of the condition's answers, one per generation),
               "bar", "bar_cleared" (cluster_low > bar; null unless the opponent is the bar's),
               "bar_status", "bar_supported", "flags",
               "verdict_methods": {method: judged orders} (how each verdict was read)}],
     "opponents": {name: {strength, measured, source}},
     "selection": {candidates, k, selected, selection_pool_win_rate, expected_optimism,
                   optimism_adjusted_win_rate, fresh_pool_win_rate, fresh_pool_cluster_low,
                   selection_minus_fresh, promotable, reason, fresh_pool_flags,
                   fresh_pool_near_duplicates: [{fresh, selection, detector, score, threshold}]},
     "claims": [{claim_id: "generalisation/<condition>/<opponent>", kind: "generalisation",
                 label: supported|weak_opponent|not_confirmed, supported, reason, ...}],
     "complete": bool, "not_run": [condition names]}

A card links to its row by ``rows[*].row_id`` and to the promotion evidence by
``selection.promotable``. ``reappreg.stats.results_outputs`` writes the files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from reappreg.errors import InputError
from reappreg.evidence.reference import judge_matches
from reappreg.io import read_jsonl
from reappreg.settings import Params
from reappreg.settings.conditions import CHECKPOINT_PREFIX, checkpoint_condition, fresh_condition, ood_condition
from reappreg.settings.guard import GuardSettings
from reappreg.settings.judge import JudgeSettings
from reappreg.settings.stats import StatsSettings
from reappreg.stats import (
    BLOCKING_FLAGS,
    ReferenceBar,
    TrustPolicy,
    assess,
    contest_table,
    recompute_trust,
    summarize_contests,
)
from reappreg.stats.analysis import judge_error_of
from reappreg.stats.claims import calibration_size_problem, judge_error_gate
from reappreg.stats.contests import order_figures, position_biased
from reappreg.stats.design import DesignSources, bind_files
from reappreg.stats.intervals import finite

RESULTS_SCHEMA_VERSION = 1
KINDS = ("policy", "checkpoint", "model", "reference", "ood")
BAR_OPPONENT_STRENGTH = 0.5   # the bar opponent against itself


@dataclass(frozen=True)
class ConditionInput:
    """One condition's judgments (None: declared but not run) and what kind of answer source it is."""

    name: str
    kind: Literal["policy", "checkpoint", "model", "reference", "ood"]
    judgments: Path | None
    answer_source: str | None = None   # reference conditions: whose answers (their strength as an opponent)
    ood: bool = False
    step: int | None = None            # checkpoint conditions: the GRPO step of the kept checkpoint
    # What the judgments are bound to (stats.design): every judged condition needs it, so a
    # condition's labels are re-derived from its generations, answers, vignettes and plan.
    design: DesignSources | None = None


@dataclass(frozen=True)
class FreshPool:
    """A selection candidate's fresh pool: its judgments and what they are bound to."""

    judgments: Path
    design: DesignSources


@dataclass(frozen=True)
class DeclaredStrength:
    win_rate: float
    source: str


@dataclass
class ResultsInputs:
    conditions: Sequence[ConditionInput]
    calibration: Mapping[str, Any]
    reference: ReferenceBar
    settings: StatsSettings
    trust_policy: TrustPolicy
    judge: JudgeSettings
    selection_candidates: Sequence[str] = ()
    # Fresh-pool judgments per selection candidate (new generations judged like the first); the
    # selected candidate's is the promotion evidence. Judgments that do not exist = no fresh pool.
    fresh_pools: Mapping[str, FreshPool] = field(default_factory=dict)
    declared_strengths: Mapping[str, DeclaredStrength] = field(default_factory=dict)
    optimism_iterations: int = 2000
    # The guard's detectors and thresholds (params ``guard``): what "a near copy" of a selection-pool
    # answer is when a fresh pool's answers are compared with it (``near_duplicates``).
    guard: GuardSettings = field(default_factory=GuardSettings)


@dataclass(frozen=True)
class ResultsFiles:
    """Where the results stage reads: the policy's judgments and generations, the folder of the
    other conditions (``<name>/judgments.jsonl`` next to its ``generations.jsonl``), the split's
    held-out answers and vignettes, and the off-distribution sets' folders (``<name>/``)."""

    policy_judgments: Path
    policy_generations: Path
    conditions_dir: Path
    answers: Path
    vignettes: Path
    ood_dir: Path


def condition_inputs(params: Params, files: ResultsFiles) -> tuple[list[ConditionInput], dict[str, FreshPool]]:
    """Every condition the params declare, each with the files its judgments are bound to, and
    the fresh pools: the policy, every kept checkpoint, model, reference and off-distribution
    condition (``stats.*``). Sampled conditions carry the generate settings (a fresh pool its
    own seed); a reference file was not sampled; an off-distribution set has its own vignettes,
    answers and opponent."""
    from reappreg.eval.plan import fresh_pool_prefix

    s, generate, root = params.stats, params.generate, Path(files.conditions_dir)

    def sampled(folder: Path, seed: int | None = None) -> DesignSources:
        if seed is None:
            return DesignSources(folder / "generations.jsonl", files.answers, files.vignettes, generate=generate)
        return DesignSources(folder / "generations.jsonl", files.answers, files.vignettes,
                             generate=generate.model_copy(update={"seed": seed}), id_prefix=fresh_pool_prefix(seed))

    conditions = [ConditionInput("policy", "policy", files.policy_judgments,
                                 design=DesignSources(files.policy_generations, files.answers, files.vignettes,
                                                      generate=generate))]
    steps = params.policy.train.checkpoint_steps
    conditions += [ConditionInput(checkpoint_condition(n), "checkpoint", root / checkpoint_condition(n) /
                                  "judgments.jsonl", step=n, design=sampled(root / checkpoint_condition(n)))
                   for n in steps]
    known = {c.name for c in conditions}
    stray = [c for c in s.selection_candidates if c.startswith(CHECKPOINT_PREFIX) and c not in known]
    if stray:
        raise InputError(f"stats.selection_candidates {stray}: no such kept checkpoint (policy.train.checkpoint_steps "
                         f"{steps})")
    conditions += [ConditionInput(name, "model", root / name / "judgments.jsonl", design=sampled(root / name))
                   for name in s.model_conditions]
    conditions += [ConditionInput(ref.name, "reference", root / ref.name / "judgments.jsonl", answer_source=ref.source,
                                  design=DesignSources(root / ref.name / "generations.jsonl", files.answers,
                                                       files.vignettes))
                   for ref in s.reference_conditions]
    for o in s.ood_sets:
        folder, data = root / ood_condition(o.name), Path(files.ood_dir) / o.name
        conditions.append(ConditionInput(ood_condition(o.name), "ood", folder / "judgments.jsonl", ood=True, design=DesignSources(
            folder / "generations.jsonl", data / "answers.jsonl", data / "vignettes.jsonl", opponents=(o.opponent,),
            generate=generate)))
    # fresh pools: <conditions_dir>/fresh-<candidate>/ (stages generate_fresh / judge_fresh), their own seed
    fresh = {f.condition: FreshPool(root / fresh_condition(f.condition) / "judgments.jsonl",
                                    sampled(root / fresh_condition(f.condition), seed=f.seed)) for f in s.fresh_pools}
    return conditions, fresh


def missing_rows(results: Mapping[str, Any], conditions: Sequence[str], opponent: str) -> list[str]:
    """Matrix completeness: the conditions (policy, every kept checkpoint, ...) without an evaluated row
    against ``opponent`` that carries both interval kinds (iid screening and worst-case cluster)."""
    complete = {r["condition"] for r in results["rows"]
                if r["opponent"] == opponent and r["status"] == "evaluated" and r["pool"] == "policy"
                and None not in (r["iid_screening_low"], r["iid_screening_high"], r["cluster_low"], r["cluster_high"])}
    return [c for c in conditions if c not in complete]


# ----------------------------------------------------------------------------- rows


def _row(condition: ConditionInput, pool: str, opponent: str, summary: Mapping[str, Any] | None,
         reference: ReferenceBar, settings: StatsSettings, blocked: list[str],
         bar_blocked: Sequence[str] = (), judge_error: Any = None) -> dict[str, Any]:
    """One row; ``blocked``: flags every row carries (an untrusted judge), ``bar_blocked``: flags only a
    bar row carries (``judge_mismatch``: the bar is on its own judge's scale, a parity row is not;
    ``calibration_too_small``). A bar row confirmed on the raw interval must also clear the bar once
    corrected for ``judge_error`` (the calibration's, ``stats.correction``), as a bar claim must."""
    row: dict[str, Any] = {
        "row_id": f"{condition.name}/{opponent}" + ("" if pool == "policy" else f"/{pool}"),
        "condition": condition.name, "kind": condition.kind, "pool": pool, "opponent": opponent,
        "ood": condition.ood, "checkpoint_step": condition.step,
        "status": "evaluated" if summary is not None else "not_run",
        "reason": None if summary is not None else f"no judgments for condition {condition.name!r}",
    }
    keys = {"win_rate": "win_rate", "n": "n", "n_eff": "n_eff", "n_vignettes": "n_clusters",
            "n_generations": "n_generations", "iid_screening_low": "iid_low", "iid_screening_high": "iid_high",
            "cluster_low": "cluster_low", "cluster_high": "cluster_high", "binding_interval": "binding_interval",
            "lc_win_rate": "lc_win_rate", "lc_low": "lc_low", "lc_high": "lc_high", "mean_length": "mean_chars"}
    for out, key in keys.items():
        value = None if summary is None else summary.get(key)
        row[out] = finite(value) if isinstance(value, float) else value
    is_bar = opponent == reference.opponent and not condition.ood
    if is_bar:
        blocked = [*blocked, *bar_blocked]
    row["bar"] = reference.bar if is_bar else None
    row["bar_cleared"] = (row["cluster_low"] > reference.bar) if is_bar and row["cluster_low"] is not None else None
    if summary is not None and is_bar:
        status, reason, flags = assess(summary, reference.bar, settings)
        _, corrected_flags, corrected_reason = judge_error_gate(status, summary, reference.bar, judge_error,
                                                                settings.confidence)
        flags = [*flags, *blocked, *corrected_flags]
        reason += corrected_reason
        if pool == "best_of_n_selection_pool":
            flags.append("selection_pool")
        row.update(bar_status=status, bar_reason=reason, flags=flags,
                   bar_supported=status == "confirmed" and not any(f in BLOCKING_FLAGS for f in flags))
    else:
        row.update(bar_status=None, bar_reason=None, flags=list(blocked) if summary is not None else [],
                   bar_supported=None if not is_bar else False)
    return row


def verdict_method_mix(orders: pd.DataFrame, contest_ids: pd.Series) -> dict[str, int]:
    """How the judge's verdicts behind one row were read (logprob, guided, json_schema, free_text, ...), by
    judged order: a row decided mostly by the free-text fallback says so beside its win-rate."""
    mine = orders[orders["contest_id"].isin(set(contest_ids))]
    return {str(method): int(n) for method, n in sorted(mine["verdict_method"].value_counts().items())}


def _judge_state(frames: Sequence[pd.DataFrame], calibration: Mapping[str, Any], trust_policy: TrustPolicy,
                 settings: StatsSettings, reference: ReferenceBar) -> tuple[dict[str, Any], list[str], list[str]]:
    """Recomputed trust for the one judge every condition must share; blocking flags for every row, and for
    the bar rows and the promotion (``judge_mismatch``: the judgments' judge identity is not the bar's)."""
    models = sorted({str(m) for f in frames for m in f["judge_model"].unique()})
    prints = sorted({str(m) for f in frames for m in f["judge_fingerprint"].unique()})
    if len(models) > 1 or len(prints) > 1:
        raise InputError(f"results: conditions were judged by different judges or fingerprints ({models}, {prints}); "
                         "every condition must be judged by the same judge and protocol")
    if not models:
        return ({"model": None, "trusted": False, "trust_reason": "no judgments"}, ["untrusted_judge"],
                ["judge_mismatch"])
    trust = recompute_trust(calibration, trust_policy, judge_model=models[0], judge_fingerprint=prints[0])
    same_judge, judge_reason = judge_matches(reference, prints[0])
    too_small = calibration_size_problem(reference, judge_error_of(calibration))
    blocked = [] if trust.trusted else ["untrusted_judge"]
    contests = pd.concat([contest_table(f) for f in frames], ignore_index=True)
    biased, bias_reason = position_biased(order_figures(contests), settings.max_position_bias)
    if biased:
        blocked.append("position_biased")
    return ({"model": models[0], "fingerprint": prints[0], "trusted": trust.trusted, "trust_reason": trust.reason,
             "position_biased": biased, "position_bias_reason": bias_reason, "bar_judge": same_judge,
             "bar_judge_reason": judge_reason, "calibration_too_small": too_small}, blocked,
            ([] if same_judge else ["judge_mismatch"]) + (["calibration_too_small"] if too_small else []))


# ----------------------------------------------------------------------------- winner's curse


def vignette_means(contests: pd.DataFrame) -> pd.Series:
    """The estimand's per-vignette parts: mean observed contest score per vignette."""
    scored = contests[contests["observed"].notna()]
    return scored.groupby("vignette_id")["observed"].mean()


def best_of_k_optimism(selection: Mapping[str, pd.DataFrame], *, iterations: int, seed: int) -> dict[str, Any]:
    """Expected optimism of the best of K candidates' win-rate on the pool it was picked on.

    ``selection`` maps each candidate to its contests (``stats.contest_table`` rows against one
    opponent) on the selection pool. Vignettes are the resampling unit (the candidates share
    them, so vignette difficulty stays paired across candidates): in each resample the best
    candidate is picked again and its resampled win-rate minus its full-sample win-rate is the
    optimism of that resample; the mean over resamples estimates the expected optimism.
    """
    if not selection:
        raise InputError("best-of-K optimism: no candidates")
    table = pd.DataFrame({name: vignette_means(c) for name, c in selection.items()})
    incomplete = table.columns[table.isna().any()].tolist()
    if incomplete:
        raise InputError(f"best-of-K optimism: candidate(s) {incomplete} lack scored contests on some vignettes "
                         f"({sorted(table.index[table.isna().any(axis=1)])}); candidates must share the vignettes")
    names = list(table.columns)
    matrix = table.to_numpy().T                      # K x G
    k, g = matrix.shape
    if g < 2:
        raise InputError(f"best-of-K optimism: {g} vignette(s): the bootstrap over vignettes needs at least 2")
    full = matrix.mean(axis=1)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, g, size=(iterations, g))
    boot = matrix[:, picks].mean(axis=2)             # K x B
    winners = boot.argmax(axis=0)
    optimism = boot[winners, np.arange(iterations)] - full[winners]
    selected = int(full.argmax())
    return {"candidates": names, "k": k, "n_vignettes": g, "selected": names[selected],
            "selection_pool_win_rate": float(full[selected]),
            "candidate_win_rates": {n: float(v) for n, v in zip(names, full)},
            "expected_optimism": float(optimism.mean()),
            "optimism_adjusted_win_rate": float(full[selected] - optimism.mean()),
            "bootstrap_iterations": iterations}


def judged_answers(judgments: Path, generation_ids: Iterable[str]) -> dict[str, str]:
    """{generation id: answer text} of the judged generations with a non-empty answer, read from the
    ``generations.jsonl`` the generate stage wrote next to ``judgments`` (ids alone can be renamed; the
    words cannot be checked from a judgments file)."""
    path = Path(judgments).parent / "generations.jsonl"
    if not path.exists():
        raise InputError(f"results: no generations next to {judgments} ({path}): a fresh pool's answers cannot be "
                         "checked against its selection pool without them")
    wanted = set(map(str, generation_ids))
    texts: dict[str, str] = {}
    present: set[str] = set()
    for record in read_jsonl(path):
        gid = str(record.get("generation_id"))
        present.add(gid)
        if gid in wanted and str(record.get("answer") or "").strip():
            texts[gid] = str(record["answer"])
    missing = wanted - present
    if missing:
        raise InputError(f"results: {path} lacks {len(missing)} judged generation(s) ({', '.join(sorted(missing)[:5])})")
    return texts


def check_fresh_pool(selection: pd.DataFrame, fresh: pd.DataFrame, name: str,
                     texts: tuple[Mapping[str, str], Mapping[str, str]] | None = None) -> None:
    """A fresh pool shares no generation, sampling seed, contest or answer text with the
    selection pool. ``texts`` are ({generation id: answer}) of the selection pool and of the
    fresh pool (``judged_answers``): the same answers (after the guard's normalisation) under
    new ids and seeds are the selection pool again, not fresh evidence. Answers that are
    near, not exact, copies are found by :func:`near_duplicates` and block the promotion."""
    from reappreg.guard.normalise import normalise

    for key in ("generation_id", "sampling_seed", "contest_id"):
        shared = sorted(set(selection[key]) & set(fresh[key]))
        if shared:
            raise InputError(f"results: the fresh pool of {name!r} shares {len(shared)} {key}(s) with its selection "
                             f"pool ({', '.join(map(str, shared[:5]))}): it is not fresh evidence")
    if texts is not None:
        chosen, new = ({normalise(t): gid for gid, t in sorted(pool.items(), reverse=True)} for pool in texts)
        same = sorted(set(chosen) & set(new))
        if same:
            pairs = ", ".join(f"{new[t]} = {chosen[t]}" for t in same[:5])
            raise InputError(f"results: the fresh pool of {name!r} repeats {len(same)} answer text(s) of its selection "
                             f"pool under other ids ({pairs}; compared after the guard's normalisation): it is not "
                             "fresh evidence")


def near_duplicates(selection: Mapping[str, str], fresh: Mapping[str, str], guard: GuardSettings
                    ) -> list[dict[str, Any]]:
    """The fresh answers that near-duplicate a selection-pool answer, by the guard's own detectors.

    A fresh pool confirms a selected candidate only if its answers are new draws: the selection
    pool's answers with a word appended, sentences swapped, the case changed or a few words edited
    meet the same opponent answers with the same merits, so the judge sees the pool it was picked on
    again. Exact text misses all of that; the separation guard's detectors (word n-gram containment,
    MinHash on word shingles, letter windows, in-order content words: ``reappreg.guard``, at the
    ``guard`` params' thresholds) are what the project uses to say "a copy of this text" of held-out
    answers, and here the selection pool's answers play the held-out set and each fresh answer is
    checked against all of them. One entry per fresh answer that hits (its best hit): ``fresh``,
    ``selection`` (generation ids), ``detector``, ``score``, ``threshold``. Honest fresh draws of a
    policy that answers every vignette alike in long stock phrases can hit too: then the fresh pool
    does not show the candidate is better than the answers it was picked on, which is the point."""
    from reappreg.guard import AnswerMeta, FastHasher, HeldoutIndex, TextUnit, check_units
    from reappreg.guard.normalise import tokens   # not in the guard's public entry: from its module

    ids = sorted(gid for gid, text in selection.items() if tokens(text))   # the index needs words to hold
    if not ids or not fresh:
        return []
    index = HeldoutIndex.build([AnswerMeta(gid, "selection pool") for gid in ids], [selection[g] for g in ids], guard,
                               FastHasher())
    units = [TextUnit(source="fresh pool", record_id=gid, field="answer", text=fresh[gid]) for gid in sorted(fresh)]
    best: dict[str, Any] = {}
    for hit in check_units(index, units, workers=1, chunk_size=guard.chunk_size, max_shared=0):
        if hit.record_id not in best or hit.score / hit.threshold > best[hit.record_id].score / best[hit.record_id].threshold:
            best[hit.record_id] = hit
    return [{"fresh": gid, "selection": hit.answer_id, "detector": hit.detector, "score": round(float(hit.score), 4),
             "threshold": float(hit.threshold)} for gid, hit in sorted(best.items())]


def promotion(selected: str | None, fresh_summary: Mapping[str, Any] | None, reference: ReferenceBar,
              settings: StatsSettings, blocked: Sequence[str], judge_error: Any = None,
              duplicates: Sequence[Mapping[str, Any]] = (), n_fresh: int | None = None) -> dict[str, Any]:
    """Whether the selected candidate may move past ``candidate``: only on fresh-pool evidence that clears the
    bar on its worst-case cluster bound AND once corrected for the judge's calibrated error (``judge_error``),
    from answers that do not near-duplicate the selection pool's (``duplicates``, :func:`near_duplicates`, of
    ``n_fresh`` fresh answers)."""
    if selected is None:
        return {"promotable": False, "reason": "no selection candidates were evaluated"}
    if fresh_summary is None:
        return {"promotable": False, "fresh_pool_win_rate": None, "fresh_pool_cluster_low": None,
                "reason": f"no fresh-pool judgments for the selected {selected!r}: its evidence comes only from the "
                          "pool it was selected on"}
    status, reason, flags = assess(fresh_summary, reference.bar, settings)
    _, corrected_flags, corrected_reason = judge_error_gate(status, fresh_summary, reference.bar, judge_error,
                                                            settings.confidence)
    flags = [*flags, *blocked, *corrected_flags]
    reason += corrected_reason
    if duplicates:
        flags.append("fresh_pool_near_duplicates")
        shown = ", ".join(f"{d['fresh']} ~ {d['selection']} ({d['detector']} {d['score']:.2f} >= {d['threshold']:g})"
                          for d in duplicates[:5])
        more = f", ... ({len(duplicates) - 5} more)" if len(duplicates) > 5 else ""
        reason += (f"; fresh_pool_near_duplicates: {len(duplicates)} of {n_fresh} fresh answer(s) near-duplicate the "
                   f"selection pool's by the guard's detectors ({shown}{more}): not a confirmation")
    ok = status == "confirmed" and not any(f in BLOCKING_FLAGS for f in flags)
    return {"promotable": ok, "fresh_pool_win_rate": finite(fresh_summary.get("win_rate")),
            "fresh_pool_cluster_low": finite(fresh_summary.get("cluster_low")), "fresh_pool_status": status,
            "fresh_pool_flags": flags, "fresh_pool_near_duplicates": list(duplicates),
            "reason": ("fresh pool clears the bar: " if ok else "fresh pool does not clear the bar: ") + reason}


# ----------------------------------------------------------------------------- opponents, generalisation


def opponent_strengths(rows: Sequence[Mapping[str, Any]], conditions: Sequence[ConditionInput],
                       opponents: Sequence[str], reference: ReferenceBar,
                       declared: Mapping[str, DeclaredStrength]) -> dict[str, dict[str, Any]]:
    """Each opponent's win-rate against the bar opponent: measured in-distribution, else declared."""
    measured = {}
    for cond in conditions:
        if cond.kind != "reference" or cond.ood or cond.answer_source is None:
            continue
        for row in rows:
            if (row["condition"] == cond.name and row["opponent"] == reference.opponent
                    and row["win_rate"] is not None):
                measured[cond.answer_source] = row
    out: dict[str, dict[str, Any]] = {}
    for opponent in sorted(set(opponents) | {reference.opponent}):
        if opponent == reference.opponent:
            out[opponent] = {"strength": BAR_OPPONENT_STRENGTH, "measured": False,
                             "source": "the bar opponent against itself (0.5 by definition)"}
        elif opponent in measured:
            row = measured[opponent]
            out[opponent] = {"strength": row["win_rate"], "measured": True,
                             "source": f"results row {row['row_id']} (in-distribution vignettes)"}
        elif opponent in declared:
            out[opponent] = {"strength": declared[opponent].win_rate, "measured": False,
                             "source": declared[opponent].source}
        else:
            out[opponent] = {"strength": None, "measured": False, "source": None}
    return out


def generalisation_claim(row: Mapping[str, Any], summary: Mapping[str, Any], strength: Mapping[str, Any],
                         settings: StatsSettings, blocked: Sequence[str]) -> dict[str, Any]:
    """"Generalises to these fresh scenarios": off-distribution, scenario-cluster bound above parity,
    against an opponent at least as strong as the bar opponent."""
    status, reason, flags = assess(summary, settings.parity, settings)
    flags = [*flags, *blocked]
    value = strength.get("strength")
    if value is None or value < BAR_OPPONENT_STRENGTH:
        label = "weak_opponent"
        why = (f"opponent {row['opponent']!r} has no measured or declared strength" if value is None else
               f"opponent {row['opponent']!r} strength {value:.3f} < the bar opponent's {BAR_OPPONENT_STRENGTH}")
        supported = False
        reason = f"{why}: supports nothing ({reason})"
        flags.append("weak_opponent")
    else:
        supported = status == "confirmed" and not any(f in BLOCKING_FLAGS for f in flags)
        label = "supported" if supported else "not_confirmed"
    return {"claim_id": f"generalisation/{row['condition']}/{row['opponent']}", "kind": "generalisation",
            "condition": row["condition"], "opponent": row["opponent"], "label": label, "supported": supported,
            "status": status, "reason": reason, "flags": flags, "threshold": settings.parity,
            "opponent_strength": strength, "row_id": row["row_id"], "supports_generalisation": supported}


# ----------------------------------------------------------------------------- the table


def _bound(name: str, judgments: Path, design: DesignSources | None, judge: JudgeSettings
           ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A condition's judged orders bound to its upstream design, and what was checked."""
    if design is None:
        raise InputError(f"results: condition {name!r} has judgments ({judgments}) but no design sources "
                         "(generations, answers, vignettes): its labels cannot be bound, so they are not counted")
    frame, summary = bind_files(judgments, design, judge, source=f"{name}: {judgments}")
    return frame, {k: summary[k] for k in ("planned_contests", "judged_orders", "missing_orders", "generations",
                                            "opponents", "sampling_plan", "policy_model_md5")}


def build_results(inputs: ResultsInputs) -> dict[str, Any]:
    """Every row, the opponents' strengths, the selection and the generalisation claims."""
    settings, reference = inputs.settings, inputs.reference
    names = [c.name for c in inputs.conditions]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"results: condition name(s) declared twice: {dup}")
    frames, designs = {}, {}
    for c in inputs.conditions:
        if c.judgments is not None and c.judgments.exists():
            frames[c.name], designs[c.name] = _bound(c.name, c.judgments, c.design, inputs.judge)
    unknown = sorted(set(inputs.fresh_pools) - set(inputs.selection_candidates))
    if unknown:
        raise InputError(f"results: fresh pools for {unknown}, which are not selection candidates "
                         f"({list(inputs.selection_candidates)})")
    fresh_frames = {}
    for name, pool in inputs.fresh_pools.items():
        if Path(pool.judgments).exists():
            fresh_frames[name], _ = _bound(fresh_condition(name), pool.judgments, pool.design, inputs.judge)
    judge, blocked, bar_blocked = _judge_state([*frames.values(), *fresh_frames.values()], inputs.calibration,
                                               inputs.trust_policy, settings, reference)
    judge_error = judge_error_of(inputs.calibration)
    rows, summaries, contests_of = [], {}, {}
    for cond in inputs.conditions:
        if cond.name not in frames:
            rows.append(_row(cond, "policy", reference.opponent, None, reference, settings, blocked, bar_blocked,
                             judge_error))
            rows[-1]["reason"] = f"not run: no judgments at {cond.judgments}"
            continue
        contests = contest_table(frames[cond.name])
        for pool in sorted(contests["condition"].unique(), key=lambda p: p != "policy"):
            in_pool = contests[contests["condition"] == pool]
            for opponent in sorted(in_pool["opponent_source"].unique()):
                part = in_pool[in_pool["opponent_source"] == opponent]
                summary = summarize_contests(part, settings)
                summaries[(cond.name, pool, opponent)] = summary
                contests_of[(cond.name, pool, opponent)] = part
                rows.append(_row(cond, pool, opponent, summary, reference, settings, blocked, bar_blocked,
                                 judge_error))
                rows[-1]["verdict_methods"] = verdict_method_mix(frames[cond.name], part["contest_id"])
                rows[-1]["design"] = designs[cond.name]

    opponents = sorted({r["opponent"] for r in rows})
    strengths = opponent_strengths(rows, inputs.conditions, opponents, reference, inputs.declared_strengths)
    claims = [generalisation_claim(r, summaries[(r["condition"], r["pool"], r["opponent"])],
                                   strengths[r["opponent"]], settings, blocked)
              for r in rows if r["ood"] and r["status"] == "evaluated"]

    candidates = {c: contests_of[(c, "policy", reference.opponent)] for c in inputs.selection_candidates
                  if (c, "policy", reference.opponent) in contests_of}
    missing = [c for c in inputs.selection_candidates if c not in candidates]
    selection: dict[str, Any] = {"candidates": list(inputs.selection_candidates), "not_evaluated": missing}
    if candidates:
        selection.update(best_of_k_optimism(candidates, iterations=inputs.optimism_iterations, seed=settings.seed))
    fresh_summary, duplicates, n_fresh = None, [], None
    selection["fresh_pools"] = sorted(fresh_frames)
    judgments_of = {c.name: c.judgments for c in inputs.conditions}
    for name, frame in fresh_frames.items():
        fresh = contest_table(frame)
        fresh = fresh[(fresh["condition"] == "policy") & (fresh["opponent_source"] == reference.opponent)]
        if name in candidates:   # every fresh pool must be fresh, selected or not: ids, seeds and words
            texts = (judged_answers(judgments_of[name], candidates[name]["generation_id"]),
                     judged_answers(inputs.fresh_pools[name].judgments, fresh["generation_id"]))
            check_fresh_pool(candidates[name], fresh, name, texts)
            if name == selection.get("selected"):
                duplicates, n_fresh = near_duplicates(*texts, inputs.guard), len(texts[1])
        if name == selection.get("selected"):
            fresh_summary = summarize_contests(fresh, settings)
    selection.update(promotion(selection.get("selected"), fresh_summary, reference, settings,
                               [*blocked, *bar_blocked], judge_error, duplicates, n_fresh))
    if fresh_summary is not None and selection.get("selection_pool_win_rate") is not None \
            and selection.get("fresh_pool_win_rate") is not None:
        selection["selection_minus_fresh"] = selection["selection_pool_win_rate"] - selection["fresh_pool_win_rate"]
    else:
        selection["selection_minus_fresh"] = None
    not_run = [r["condition"] for r in rows if r["status"] == "not_run"]
    return {"schema_version": RESULTS_SCHEMA_VERSION, "confidence": settings.confidence,
            "reference_bar": reference.model_dump(), "judge": judge, "rows": rows, "opponents": strengths,
            "selection": selection, "claims": claims, "complete": not not_run, "not_run": not_run}


__all__ = ["KINDS", "RESULTS_SCHEMA_VERSION", "ConditionInput", "DeclaredStrength", "FreshPool", "ResultsInputs",
           "ResultsFiles", "best_of_k_optimism", "build_results", "check_fresh_pool", "condition_inputs", "generalisation_claim",
           "missing_rows", "near_duplicates", "opponent_strengths",
           "promotion"]
