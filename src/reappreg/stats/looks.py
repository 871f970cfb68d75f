"""What a claim was drawn from, and how many times the same generations were looked at.

A confidence interval certifies one look. Re-running ``stats`` over the same generations
with other settings, other judges or edited judgments until a claim comes out supported is
a search, and the interval does not account for it. This module stamps every claim with:

* ``inputs``: the DVC md5 of every file the stats stage read (judgments, generations,
  held-out answers, vignettes, calibration, registry declarations), so a reader can match
  the claim to ``dvc.lock``;
* ``looks``: how many earlier, finished ``stats`` runs in the MLflow experiment read the
  same generations (by their recorded md5), and the ``repeated_looks`` flag when any did:
  the claim says so, and the card prints it with the reason;
* ``decision_settings``: the settings the decision used (confidence, minimum n, agreement
  floor and minimum calibration pairs, position-bias ceiling).

What it cannot see: looks taken outside this tracking store (another machine, a deleted
run, a notebook that never logged).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GENERATIONS_TAG = "input.generations.md5"


def earlier_looks(client: Any, experiment_id: str, generations_md5: str, current_run_id: str | None) -> list[str]:
    """Run ids of the finished ``stats`` runs of ``experiment_id`` (other than the current one)
    that read generations with this md5; every page of the search is read."""
    found, token = [], None
    query = f"tags.stage = 'stats' and tags.`{GENERATIONS_TAG}` = '{generations_md5}' and attributes.status = 'FINISHED'"
    while True:
        page = client.search_runs([experiment_id], filter_string=query, max_results=1000, page_token=token)
        found += [r.info.run_id for r in page if r.info.run_id != current_run_id]
        token = page.token
        if not token:
            return found


def stamp_claims(claims: Sequence[dict[str, Any]], *, inputs: Mapping[str, str], earlier: Sequence[str],
                 decision_settings: Mapping[str, Any]) -> None:
    """Add ``inputs``, ``looks`` and ``decision_settings`` to every claim (in place); earlier
    looks add the informative ``repeated_looks`` flag and say so in the reason."""
    for claim in claims:
        claim["inputs"] = dict(sorted(inputs.items()))
        claim["decision_settings"] = dict(decision_settings)
        claim["looks"] = {
            "earlier_stats_runs_same_generations": len(earlier),
            "earlier_run_ids": list(earlier)[:20],
            "checked": "finished stats runs in this MLflow experiment whose recorded generations md5 equals this one's; "
                       "looks outside this tracking store are not seen",
        }
        if earlier:
            claim["flags"].append("repeated_looks")
            claim["reason"] += (f"; drawn after {len(earlier)} earlier stats run(s) over the same generations: the "
                                "interval certifies one look, not the search")
