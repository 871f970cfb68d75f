"""Validation of the two inputs: judged orders and the judge's calibration.

Every rule here refuses input that could manufacture a claim: a row whose score does not
follow from its verdict, the same (generation, opponent answer, order) judged twice under
any contest id, a contest whose two orders disagree about what was compared, two
generations sharing one sampling seed (a relabelled copy), judgments from more than one
judge or model fingerprint, and rows or calibrations written before the current contract
(a missing key is an error naming it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from reappreg import verdicts
from reappreg.errors import InputError

SELECTIONS = ("none", "best_of_n_fresh", "best_of_n_selection_pool")
CONDITION_OF_SELECTION = {
    "none": "policy",
    "best_of_n_fresh": "best_of_n_fresh_pool",
    "best_of_n_selection_pool": "best_of_n_selection_pool",
}
ORDERS = verdicts.CONTEST_ORDERS
# Keys every judged order must carry (the judge's contract); p_a/p_b/p_tie may be null.
JUDGMENT_KEYS = (
    "contest_id", "generation_id", "vignette_id", "eval_k", "opponent_source", "opponent_answer_id",
    "order", "verdict", "policy_score", "judge_model", "selection",
    "p_a", "p_b", "p_tie", "verdict_method", "judge_fingerprint", "sampling_seed", "policy_chars", "opponent_chars",
)
# Keys the calibration must carry; the numbers are re-checked, ``trusted`` is only a cache.
CALIBRATION_KEYS = (
    "judge_model", "judge_fingerprint", "n_pairs", "agreement", "agreement_low", "agreement_high",
    "position_bias_A", "position_bias_B", "order_consistency", "unparseable_rate", "min_agreement", "min_pairs",
    "trusted",
)
CALIBRATION_RATES = ("agreement", "agreement_low", "agreement_high", "position_bias_A", "position_bias_B",
                     "order_consistency", "unparseable_rate", "min_agreement")
# What the two orders of one contest (and every row of one generation) must agree on.
CONTEST_FIELDS = ("generation_id", "vignette_id", "eval_k", "opponent_source", "opponent_answer_id", "selection",
                  "sampling_seed", "policy_chars", "opponent_chars")
GENERATION_FIELDS = ("vignette_id", "eval_k", "selection", "sampling_seed", "policy_chars")
MAX_EXAMPLES = 5


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _examples(items: Sequence[str]) -> str:
    shown = "; ".join(items[:MAX_EXAMPLES])
    return shown + (f"; ... ({len(items) - MAX_EXAMPLES} more)" if len(items) > MAX_EXAMPLES else "")


def _check_row(rec: Mapping[str, Any], where: str) -> dict[str, Any]:
    missing = [k for k in JUDGMENT_KEYS if k not in rec]
    if missing:
        raise InputError(f"{where}: missing key(s) {', '.join(missing)} (the judgments contract; "
                         "rows written by an older judge must be re-judged)")
    if rec["order"] not in ORDERS:
        raise InputError(f"{where}: 'order' must be one of {ORDERS}, got {rec['order']!r}")
    if rec["verdict"] not in verdicts.VERDICTS:
        raise InputError(f"{where}: 'verdict' must be one of {verdicts.VERDICTS}, got {rec['verdict']!r}")
    if rec["selection"] not in SELECTIONS:
        raise InputError(f"{where}: 'selection' must be one of {SELECTIONS}, got {rec['selection']!r}")
    if rec["verdict_method"] not in verdicts.VERDICT_METHODS:
        raise InputError(f"{where}: 'verdict_method' must be one of {verdicts.VERDICT_METHODS}, "
                         f"got {rec['verdict_method']!r}")
    for key in ("eval_k", "sampling_seed", "policy_chars", "opponent_chars"):
        if not _is_int(rec[key]) or (key != "eval_k" and rec[key] < 0):
            raise InputError(f"{where}: {key!r} must be a non-negative integer, got {rec[key]!r}")
    for key in ("judge_fingerprint", "judge_model", "generation_id", "contest_id", "opponent_answer_id"):
        if not isinstance(rec[key], str) or not rec[key]:
            raise InputError(f"{where}: {key!r} must be a non-empty string, got {rec[key]!r}")
    expected = verdicts.score(rec["order"], rec["verdict"])
    score = rec["policy_score"]
    if expected is None:
        if score is not None:
            raise InputError(f"{where}: unparseable verdict must have policy_score null, got {score!r}")
    elif isinstance(score, bool) or not isinstance(score, (int, float)) or float(score) != expected:
        raise InputError(f"{where}: policy_score {score!r} does not match verdict {rec['verdict']!r} "
                         f"with order {rec['order']!r} (expected {expected})")
    probs = (rec["p_a"], rec["p_b"], rec["p_tie"])
    if any(p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))) for p in probs):
        raise InputError(f"{where}: p_a, p_b, p_tie must be numbers or null, got {probs}")
    if (rec["p_a"] is None) != (rec["p_b"] is None):
        raise InputError(f"{where}: p_a and p_b must both be numbers or both null, got {probs}")
    try:
        weighted = verdicts.weighted_score(rec["order"], *probs)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from exc
    return {
        **{k: rec[k] for k in ("contest_id", "generation_id", "opponent_answer_id", "judge_model",
                               "judge_fingerprint", "verdict_method")},
        "vignette_id": str(rec["vignette_id"]),
        "opponent_source": str(rec["opponent_source"]),
        "eval_k": int(rec["eval_k"]),
        "order": rec["order"],
        "verdict": rec["verdict"],
        "score": math.nan if expected is None else expected,
        "weighted": math.nan if weighted is None else weighted,
        "selection": rec["selection"],
        "condition": CONDITION_OF_SELECTION[rec["selection"]],
        "sampling_seed": int(rec["sampling_seed"]),
        "policy_chars": int(rec["policy_chars"]),
        "opponent_chars": int(rec["opponent_chars"]),
    }


def _duplicates(frame: pd.DataFrame, keys: list[str], what: str, source: str) -> None:
    dup = frame[frame.duplicated(keys, keep=False)]
    if dup.empty:
        return
    groups = [f"{'/'.join(str(v) for v in key)} at rows {', '.join(str(r) for r in rows['row'])}"
              for key, rows in dup.groupby(keys, sort=False)]
    raise InputError(f"{source}: {len(groups)} {what} judged more than once ({', '.join(keys)}): "
                     f"{_examples(groups)}")


def _consistent(frame: pd.DataFrame, by: str, fields: Sequence[str], what: str, source: str) -> None:
    for field in fields:
        counts = frame.groupby(by, sort=False)[field].nunique()
        bad = counts[counts > 1]
        if len(bad):
            examples = []
            for key in bad.index[:MAX_EXAMPLES]:
                rows = frame[frame[by] == key]
                examples.append(f"{key} rows {', '.join(str(r) for r in rows['row'])} "
                                f"({field}: {sorted(map(str, rows[field].unique()))})")
            raise InputError(f"{source}: {len(bad)} {what}(s) disagree on {field!r} across their rows: "
                             f"{_examples(examples)}")


def _same_content(frame: pd.DataFrame, source: str) -> None:
    """The same judged contest under two generation ids, recognised by its content.

    Two different answers judged against one opponent answer do not get the same length AND
    the same unsaturated label probabilities in both orders; a copy does. Only contests
    whose four probabilities are all inside (0.001, 0.999) are compared (a saturated judge
    gives many identical 0/1 probabilities honestly).
    """
    probs = frame[frame["weighted"].notna()]
    if probs.empty:
        return
    wide = probs.pivot_table(index=["contest_id", "generation_id", "opponent_answer_id", "policy_chars"],
                             columns="order", values="weighted", aggfunc="first").dropna()
    if wide.empty or len(wide.columns) < 2:
        return
    inside = ((wide > 0.001) & (wide < 0.999)).all(axis=1)
    wide = wide[inside].reset_index()
    key = ["opponent_answer_id", "policy_chars", *ORDERS]
    dup = wide[wide.duplicated(key, keep=False)]
    groups = [f"contests {', '.join(g['contest_id'])} (generations {', '.join(g['generation_id'])})"
              for _, g in dup.groupby(key, sort=False) if g["generation_id"].nunique() > 1]
    if groups:
        raise InputError(f"{source}: {len(groups)} judged contest(s) appear under more than one generation id "
                         "(same opponent answer, answer length and judge probabilities in both orders): "
                         f"{_examples(groups)}")


def validate_judgments(records: Sequence[Mapping[str, Any]], source: str = "judgments") -> pd.DataFrame:
    """Check every row of the judgments contract; one validated row per judged order.

    Columns: the contract's identifiers, ``score`` (hard, NaN when unparseable), ``weighted``
    (P(policy) + 0.5 P(tie), NaN without probabilities), ``condition`` and ``row`` (1-based line).
    Raises InputError naming the rows.
    """
    if not records:
        raise InputError(f"{source}: no judgments (empty file)")
    rows = []
    for lineno, rec in enumerate(records, start=1):
        if not isinstance(rec, Mapping):
            raise InputError(f"{source}: row {lineno}: expected a JSON object")
        rows.append({**_check_row(rec, f"{source}: row {lineno}"), "row": lineno})
    frame = pd.DataFrame(rows)
    for key in ("judge_model", "judge_fingerprint"):
        values = sorted(frame[key].unique())
        if len(values) > 1:
            # One calibration describes one judge; mixing judges would blend their biases silently.
            raise InputError(f"{source}: judgments come from more than one {key}: {values}")
    _duplicates(frame, ["contest_id", "order"], "contest order(s)", source)
    _duplicates(frame, ["generation_id", "opponent_answer_id", "order"], "(generation, opponent answer, order)",
                source)
    _consistent(frame, "contest_id", CONTEST_FIELDS, "contest", source)
    _consistent(frame, "generation_id", GENERATION_FIELDS, "generation", source)
    _same_content(frame, source)
    seeds = frame.drop_duplicates("generation_id").groupby("sampling_seed")["generation_id"].unique()
    shared = seeds[seeds.map(len) > 1]
    if len(shared):
        # generate derives one seed per sequence; two generations with one seed are one sample, relabelled.
        examples = []
        for seed, gens in shared.items():
            pools = sorted(frame[frame["generation_id"].isin(gens)]["condition"].unique())
            examples.append(f"seed {seed}: generations {', '.join(map(str, gens))} (pools {', '.join(pools)})")
        raise InputError(f"{source}: {len(shared)} sampling seed(s) shared by different generations "
                         f"(a generation relabelled or copied into another pool): {_examples(examples)}")
    return frame


def load_judgments(path: str | Path) -> pd.DataFrame:
    from reappreg.io import read_jsonl

    return validate_judgments(read_jsonl(path), str(path))


def validate_calibration(obj: Any, source: str = "calibration") -> dict[str, Any]:
    """Check the calibration's keys and types; the trust decision is recomputed in ``trust``."""
    if not isinstance(obj, dict):
        raise InputError(f"{source}: expected a JSON object")
    missing = [k for k in CALIBRATION_KEYS if k not in obj]
    if missing:
        raise InputError(f"{source}: missing key(s) {', '.join(missing)} (the calibration must name its judge "
                         "and fingerprint and carry the numbers trust is recomputed from)")
    if not isinstance(obj["trusted"], bool):
        raise InputError(f"{source}: 'trusted' must be true or false, got {obj['trusted']!r}")
    for key in ("judge_model", "judge_fingerprint"):
        if not isinstance(obj[key], str) or not obj[key]:
            raise InputError(f"{source}: {key!r} must name the judge (non-empty string), got {obj[key]!r}")
    for key in ("n_pairs", "min_pairs"):
        if not _is_int(obj[key]) or obj[key] < 0:
            raise InputError(f"{source}: {key!r} must be a non-negative integer, got {obj[key]!r}")
    for key in CALIBRATION_RATES:
        value = obj[key]
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise InputError(f"{source}: {key!r} must be a rate in [0, 1] or null, got {value!r}")
    low, mid, high = obj["agreement_low"], obj["agreement"], obj["agreement_high"]
    if None not in (low, mid, high) and not low <= mid <= high:
        raise InputError(f"{source}: agreement {mid} is not inside its interval [{low}, {high}]")
    return dict(obj)


def load_calibration(path: str | Path) -> dict[str, Any]:
    from reappreg.io import read_json

    return validate_calibration(read_json(path), str(path))
