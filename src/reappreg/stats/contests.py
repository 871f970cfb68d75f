"""Contest-level scoring: the contest (both orders of one pair) is the unit, never the order.

The two orders of one pair are strongly dependent (the same two answers), so counting them
as two observations narrows iid intervals by up to sqrt(2) and lets ``min_n`` be reached
with half the contests. Each contest is scored from both orders with
``reappreg.verdicts.contest_score`` (won in both 1, won in one 0.5, lost in both 0) and,
for the bound a claim is tested on, with every unparseable or missing order counted as a
loss (``worst``) or, for the upper bound, as a win (``best``): a claim then holds whatever
the missing verdicts were (Manski bounds). A contest is never dropped for a missing order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from reappreg import verdicts

FIRST, SECOND = verdicts.CONTEST_ORDERS


def contest_table(orders: pd.DataFrame) -> pd.DataFrame:
    """One row per contest from validated judged orders (see ``inputs.validate_judgments``).

    Columns: ``contest_id, condition, opponent_source, opponent_answer_id, vignette_id, generation_id, eval_k,
    sampling_seed, len_diff`` (policy minus opponent characters), ``n_orders`` (present),
    ``n_scored`` (parseable), ``first/second`` (order scores, NaN unscored),
    ``first_verdict/second_verdict``, ``observed`` (both orders scored, else NaN),
    ``worst``/``best`` (unscored orders as loss / win), ``weighted`` (mean of the two
    weighted verdicts, NaN unless both have probabilities).
    """
    keys = ["contest_id", "condition", "opponent_source", "opponent_answer_id", "vignette_id", "generation_id",
            "eval_k", "sampling_seed", "policy_chars", "opponent_chars"]
    base = orders.drop_duplicates("contest_id")[keys].set_index("contest_id")
    wide = orders.pivot(index="contest_id", columns="order", values=["score", "weighted", "verdict"])
    table = base.copy()
    for order, name in ((FIRST, "first"), (SECOND, "second")):
        present = ("score", order) in wide.columns
        table[name] = wide[("score", order)] if present else np.nan
        table[f"{name}_weighted"] = wide[("weighted", order)] if present else np.nan
        table[f"{name}_verdict"] = wide[("verdict", order)] if present else None
    table["first_verdict"] = table["first_verdict"].fillna("missing")
    table["second_verdict"] = table["second_verdict"].fillna("missing")
    # Planned orders bound in as missing (stats.design.bind) are rows without a verdict.
    present = orders[orders["present"]] if "present" in orders else orders
    counts = present.groupby("contest_id").size()
    table["n_orders"] = counts.reindex(table.index).fillna(0).astype(int)
    table["n_scored"] = table[["first", "second"]].notna().sum(axis=1).astype(int)
    pair = table[["first", "second"]]
    table["observed"] = pair.mean(axis=1, skipna=False)
    table["worst"] = pair.fillna(0.0).mean(axis=1)
    table["best"] = pair.fillna(1.0).mean(axis=1)
    table["weighted"] = table[["first_weighted", "second_weighted"]].mean(axis=1, skipna=False)
    table["len_diff"] = (table["policy_chars"] - table["opponent_chars"]).astype(float)
    return table.reset_index()


def order_figures(contests: pd.DataFrame) -> dict[str, Any]:
    """Order-level counts and the judge's position behaviour, measured on these contests.

    ``position_bias_A`` / ``_B``: share of contests with both orders parseable where the judge
    named position A (B) in both orders, i.e. whatever answer stood there; an always-A judge
    gives 1.0, a content-driven one about 0. ``order_disagreement_rate``: share of those
    contests whose two orders give the policy different scores.
    """
    n = len(contests)
    expected_orders = 2 * n
    n_scored = int(contests["n_scored"].sum()) if n else 0
    n_present = int(contests["n_orders"].sum()) if n else 0
    both = contests[contests["n_scored"] == 2]
    n_both = len(both)
    same_a = int(((both["first_verdict"] == "A") & (both["second_verdict"] == "A")).sum())
    same_b = int(((both["first_verdict"] == "B") & (both["second_verdict"] == "B")).sum())
    disagree = int((both["first"] != both["second"]).sum())
    first, second = contests["first"].dropna(), contests["second"].dropna()
    return {
        "n_orders": n_present,
        "n_orders_scored": n_scored,
        "n_unparseable": n_present - n_scored,
        "n_missing_orders": expected_orders - n_present,
        "unparseable_rate": (expected_orders - n_scored) / expected_orders if expected_orders else None,
        "n_incomplete_contests": int((contests["n_orders"] < 2).sum()) if n else 0,
        "n_complete_contests": n_both,
        "position_bias_A": same_a / n_both if n_both else None,
        "position_bias_B": same_b / n_both if n_both else None,
        "order_disagreement_rate": disagree / n_both if n_both else None,
        "win_rate_orders": float(pd.concat([first, second]).mean()) if len(first) + len(second) else None,
        "win_rate_policy_first": float(first.mean()) if len(first) else None,
        "win_rate_policy_second": float(second.mean()) if len(second) else None,
    }


def position_biased(figures: dict[str, Any], max_position_bias: float) -> tuple[bool, str | None]:
    """(biased or unmeasurable, reason) for the judge's position behaviour in ``figures``."""
    a, b = figures["position_bias_A"], figures["position_bias_B"]
    if a is None or b is None:
        return True, "position bias unmeasured: no contest has both orders parseable"
    worst = max(a, b)
    if worst > max_position_bias:
        side = "A" if a >= b else "B"
        return True, (f"judge named position {side} in both orders of {worst:.3f} of the complete contests "
                      f"(max_position_bias {max_position_bias:.3f})")
    return False, None
