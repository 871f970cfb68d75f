"""What a claim was drawn from, and how many times the same policy was tested against the same bar.

A confidence interval certifies one look. Evaluating the same policy against the same bar again
-- on another subset of vignettes (``generate.vignettes``), with fewer evals (``generate.evals``
3 -> 2 after the judgments were seen), other samples or seeds, another judge, edited judgments --
until a claim comes out supported is a search, and the interval does not account for it. Every
such evaluation asks the same question (does THIS policy clear THIS bar?), so looks are counted
by the question, not by the files: keying them by the generations' md5, as this module once did,
gave 15 vignette subsets and 4 seeds in one store ``looks 0`` each, since every one of them has
generations of its own. This module stamps every claim with:

* ``inputs``: the DVC md5 of every file the stats stage read (judgments, generations,
  held-out answers, vignettes, calibration, registry declarations), so a reader can match
  the claim to ``dvc.lock``;
* ``looks``: the earlier finished ``stats`` runs in the MLflow experiment that tested the same
  policy against the same bar, what they were keyed by (``keyed_by``: the policy model's md5
  -- the ``model_md5`` the generate stage records on every generation, ``eval.generate`` -- the
  opponent and the threshold), and the design of this look and of each earlier one (evals,
  samples per vignette, best-of-N, seed, vignettes, contests), so the card can say what was
  tried; the ``repeated_looks`` flag when there were any: the claim says so, with the reason;
* ``decision_settings``: the settings the decision used (confidence, minimum n, agreement
  floor and minimum calibration pairs, position-bias ceiling).

The condition (plain samples, a best-of-N pool) is not part of the key: trying best-of-N after
the plain policy missed the bar is one more path to "the policy clears the bar".

Under ``dvc repro`` the stats step's signed custody link carries the same count (``byproducts.looks``,
:func:`link_record`), beside the params it ran with (``environment.params``: a cut of
``generate.evals`` is there too).

What it cannot see: looks taken outside this tracking store (another machine, a deleted run,
a notebook that never logged), and the judge stage's own descriptive win-rates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

POLICY_TAG = "look.policy"      # the policy model's md5, readable on the run
DESIGN_TAG = "look.design"      # this look's design (JSON), read back by later looks
MAX_LISTED = 20                 # earlier looks listed on a claim (all are counted)


@dataclass(frozen=True)
class LookKey:
    """The question a claim answers: does the policy with this model md5 clear ``threshold`` against
    ``opponent``? Two runs with the same key are two looks, whatever else differs."""

    policy: str
    opponent: str
    threshold: float

    @property
    def digest(self) -> str:
        text = json.dumps({"policy": self.policy, "opponent": self.opponent, "threshold": round(self.threshold, 6)},
                          sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]

    @property
    def tag(self) -> str:
        """The MLflow tag a stats run carries for every question it tested (value: the digest; hex
        only, so the search needs no quoting of opponent names)."""
        return f"look.{self.digest}"

    def as_dict(self) -> dict[str, Any]:
        return {"policy_model_md5": self.policy, "opponent": self.opponent, "threshold": self.threshold}


def look_design(design: Mapping[str, Any], inputs: Mapping[str, str]) -> dict[str, Any]:
    """What this look evaluated (from ``stats.design``'s summary and the input md5s): short enough for a tag."""
    plan = design.get("sampling_plan") or {}
    vignettes = list(design.get("vignettes") or [])
    return {"evals": plan.get("evals"), "samples_per_vignette": plan.get("samples_per_vignette"),
            "best_of_n": plan.get("best_of_n"), "seed": plan.get("seed"), "n_vignettes": len(vignettes),
            "vignettes": vignettes[:40], "contests": design.get("planned_contests"),
            "judgments_md5": inputs.get("judgments"), "generations_md5": inputs.get("generations")}


def keys_of(claims: Sequence[Mapping[str, Any]], policy: str) -> dict[str, LookKey]:
    """claim id -> the question it answers."""
    return {c["claim_id"]: LookKey(policy, str(c["opponent"]), float(c["threshold"])) for c in claims}


def look_tags(keys: Mapping[str, LookKey], policy: str, design: Mapping[str, Any]) -> dict[str, str]:
    """The tags that make this run a look for later runs: one per question, the policy and the design."""
    return {**{k.tag: k.digest for k in keys.values()}, POLICY_TAG: policy,
            DESIGN_TAG: json.dumps(design, sort_keys=True, default=str)}


def earlier_looks(client: Any, experiment_id: str, key: LookKey, current_run_id: str | None) -> list[dict[str, Any]]:
    """The finished ``stats`` runs of ``experiment_id`` (other than the current one) that tested ``key``,
    oldest first, each ``{run_id, design}``; every page of the search is read."""
    found, token = [], None
    query = f"tags.stage = 'stats' and tags.`{key.tag}` = '{key.digest}' and attributes.status = 'FINISHED'"
    while True:
        page = client.search_runs([experiment_id], filter_string=query, max_results=1000, page_token=token,
                                  order_by=["attributes.start_time ASC"])
        for run in page:
            if run.info.run_id == current_run_id:
                continue
            try:
                design = json.loads(run.data.tags.get(DESIGN_TAG, "null"))
            except json.JSONDecodeError:
                design = None
            found.append({"run_id": run.info.run_id, "design": design})
        token = page.token
        if not token:
            return found


def describe_design(design: Mapping[str, Any] | None) -> str:
    """One look's design in words (the claim's reason and the card)."""
    if not design:
        return "design not recorded"
    parts = []
    if design.get("evals") is not None:
        parts.append(f"{design['evals']} eval(s) x {design.get('samples_per_vignette')} sample(s)"
                     + (f", best-of-{design['best_of_n']}" if (design.get("best_of_n") or 1) > 1 else "")
                     + f", seed {design.get('seed')}")
    parts.append(f"{design.get('n_vignettes')} vignette(s)")
    if design.get("contests") is not None:
        parts.append(f"{design['contests']} contests")
    return ", ".join(parts)


def link_record(claims: Sequence[Mapping[str, Any]], keys: Mapping[str, LookKey],
                design: Mapping[str, Any]) -> dict[str, Any]:
    """The looks as the stats step's custody link records them (its ``byproducts.looks``, signed with
    the claims it drew): this look's design and, per question tested, its look number, the earlier
    looks' run ids and the claims that answer it. Call after :func:`stamp_claims`."""
    questions: dict[str, dict[str, Any]] = {}
    for claim in claims:
        key, looks = keys[claim["claim_id"]], claim["looks"]
        entry = questions.setdefault(key.digest, {
            **key.as_dict(), "look_number": looks["look_number"], "earlier": looks["earlier"],
            "earlier_run_ids": [e["run_id"] for e in looks["earlier_looks"]], "claims": []})
        entry["claims"].append(claim["claim_id"])
    return {"this_look": dict(design),
            "questions": sorted(questions.values(), key=lambda q: (q["opponent"], q["threshold"]))}


def stamp_claims(claims: Sequence[dict[str, Any]], *, inputs: Mapping[str, str], keys: Mapping[str, LookKey],
                 earlier: Mapping[str, Sequence[Mapping[str, Any]]], design: Mapping[str, Any],
                 decision_settings: Mapping[str, Any]) -> None:
    """Add ``inputs``, ``looks`` and ``decision_settings`` to every claim (in place). ``earlier``: key digest
    -> its earlier looks (``earlier_looks``). Earlier looks add the informative ``repeated_looks`` flag and
    say so in the reason, with the design of each."""
    for claim in claims:
        key = keys[claim["claim_id"]]
        seen = list(earlier.get(key.digest, ()))
        claim["inputs"] = dict(sorted(inputs.items()))
        claim["decision_settings"] = dict(decision_settings)
        earlier_text = "; ".join(describe_design(s.get("design")) for s in seen[:5]) + ("; ..." if len(seen) > 5 else "")
        claim["looks"] = {
            "earlier": len(seen),
            "look_number": len(seen) + 1,
            "keyed_by": key.as_dict(),
            "this_look": dict(design),
            "earlier_looks": [dict(s) for s in seen[:MAX_LISTED]],
            # what the card prints under the claim
            "summary": (f"look {len(seen) + 1} at this policy against this bar (keyed by policy model {key.policy}, "
                        f"opponent {key.opponent}, threshold {key.threshold:.3f}; any vignettes, evals, samples or "
                        f"seeds); this one: {describe_design(design)}"
                        + (f"; earlier: {earlier_text}" if seen else "")),
            "checked": "finished stats runs in this MLflow experiment that tested the same policy (its model md5) "
                       "against the same opponent and threshold, whatever vignettes, evals, samples, seeds or "
                       "judgments they used; looks outside this tracking store are not seen",
        }
        if seen:
            claim["flags"].append("repeated_looks")
            claim["reason"] += (f"; drawn after {len(seen)} earlier evaluation(s) of this policy (model "
                                f"{key.policy}) against {key.opponent} at {key.threshold:.3f} ({earlier_text}; "
                                f"this one: {describe_design(design)}): the interval certifies one look, not the search")
