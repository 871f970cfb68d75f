"""Win-rate statistics whose claims cannot be manufactured.

Why: the seeds' model card compared an iid Wilson bound (n = 720, only 6 vignettes) to a
reference point, and reported best-of-N numbers measured on the pool that chose the answer.
Crafted judgments then showed more ways to print ``supported: true`` wrongly: selectively
missing verdicts, one order only, a flipped ``trusted`` flag, duplicated contests, correlated
generations, one dominant vignette, a moved bar, relabelled pools. Each is closed here:

* **Inputs** (``inputs``): every row of the judgments contract is checked; the same
  (generation, opponent answer, order) twice under any contest id, two generations sharing a
  sampling seed (a copy, e.g. into the other pool), a contest whose orders disagree on what
  was compared, and mixed judges or fingerprints are errors naming the rows. Rows or
  calibrations missing a contract key are errors naming the key.
* **The contest is the unit** (``contests``): both orders give one contest score (won both 1,
  split 0.5, lost both 0, ``reappreg.verdicts``); ``n`` and ``min_n_confirm`` count distinct
  contests; order-level figures and the order-disagreement rate are reported beside them. A
  missing or unparseable order never drops its contest: for the bound it counts as a loss
  (and as a win for the upper bound: Manski bounds), and so does each contest a generation
  lacks relative to the others (every generation meets the same number of opponent answers);
  above ``max_unparseable_rate`` of missing/unparseable orders nothing is tested.
* **Pre-declared estimand** (``intervals``): the equal-weight vignette mean of contest scores,
  tested on the worst of the vignette t(G-1), generation- and opponent-answer-level stratified
  cluster-robust (Satterthwaite df), Wilson-over-generations and vignette-bootstrap lower bounds, never an iid
  SE; n_eff is capped by the contests and the independent generations.
* **Trust is recomputed** (``trust``) from the calibration's numbers; the calibration must name
  the judgments' judge model and fingerprint; ``trusted`` is a cache that must agree. A bar
  claim also needs the calibration size the bar pins (``calibration_too_small``), and must
  clear the bar once corrected for the judge's error (``correction``: Rogan–Gladen, with the
  calibration's Jeffreys posterior uncertainty, which stays wide at perfect agreement).
* **Looks** (``looks``): every evaluation of one policy (its model md5) against one bar
  (opponent, threshold) is a look, whatever vignettes, evals, samples or seeds it used; a
  claim drawn after earlier looks says so (``repeated_looks``) and lists what each used; under
  ``dvc repro`` the step's signed custody link records them too (``byproducts.looks``).
  Position bias is also measured on the judgments themselves (``position_biased`` blocks).
* **Reference bar** (``reference``): pinned in registry/models.yaml with its source and the
  judge it was measured with, by name and by identity (its weights' md5, or an API's provider
  and model id); another bar or opponent (``stats.bar`` / ``stats.bar_opponent``) gives
  ``custom_bar`` claims, and a bar claim whose judgments' fingerprint is not the pinned
  identity is ``judge_mismatch``, whatever the rows call the judge.
* **Pools**: fresh and selection pools may not share generations or seeds, identical pools
  are an error, a fresh-pool claim needs its selection pool and reports ``selection_minus_fresh``.
* **Length** (``length``): an AlpacaEval-style length-controlled win-rate (GLM read at zero
  length difference, vignette-bootstrap interval); a claim confirmed only on the raw rate is
  marked ``length_sensitive``. The probability-weighted win-rate is reported beside the hard one.

Outputs
-------
``metrics/eval.json`` -- one flat JSON object, ``/``-separated keys (opponent names contain dots):

* ``judge/{trusted (recomputed, 1|0), trusted_cached, n_pairs, agreement, agreement_low,
  agreement_high, position_bias_A, position_bias_B, order_consistency, unparseable_rate,
  min_agreement, min_pairs, min_agreement_applied, min_pairs_applied, max_position_bias,
  max_unparseable_rate, model_matches, fingerprint_matches}``;
* ``reference_bar/bar`` (its opponent and source are in each claim's ``reference_bar``);
* ``judgments/{n_rows, n_contests, n_orders_scored, n_unparseable, n_missing_orders,
  unparseable_rate, n_complete_contests, position_bias_A, position_bias_B,
  order_disagreement_rate, position_biased}``;
* ``{condition}/{opponent}/{stat}``, stat in ``analysis.SUMMARY_METRICS``: ``n`` (CONTESTS),
  order-level ``n_orders, n_orders_scored, n_unparseable, n_missing_orders,
  win_rate_orders, order_iid_low/high, win_rate_policy_first/second``; ``win_rate`` (the
  estimand on contests with both orders scored), ``win_rate_pooled``, ``worst_case_win_rate``,
  ``best_case_win_rate``, ``iid_low/high`` (Wilson on contests, reference only),
  ``vignette_*``, ``generation_*``, ``answer_low/high``, ``generation_wilson_low``, ``bootstrap_*`` (observed
  data), ``observed_cluster_low/high`` (the claim rule on observed contests),
  ``cluster_low/high`` (the claim rule on worst/best-case scores: THE interval claims use),
  ``n_missing_contests, n_clusters, n_generations, deff, n_eff, n_eff_cap, weighted_win_rate, n_weighted,
  lc_win_rate, lc_low, lc_high, length_coef`` ...;
* ``{condition}/{opponent}/vignette/{vignette_id}/{win_rate, n}`` and ``.../eval_k/{k}/{win_rate, n}``;
* ``best_of_n/{opponent}/{fresh_pool_win_rate, selection_pool_win_rate, selection_minus_fresh}``;
* ``claims/{n_claims, n_supported}``. Values that cannot be computed are ``null``.

``plots/eval/forest.csv`` / ``forest.png`` -- per (condition, opponent): each vignette
(generation clusters) and the pooled estimand with the iid Wilson and the claim interval.

``reports/claims.json`` -- a JSON LIST of claim objects, schema version 3 (each object carries
``schema_version``; version 2 added ``schema_version``, ``kind: custom_bar``,
``reference_bar``, ``blocking_flags`` and the evidence fields ``estimand``, ``clustering``,
``binding_interval``, ``worst_case_low``, ``observed_low/high``, order-level, weighted and
length-controlled figures; ``n`` now counts contests; version 3 added ``judge_fingerprint``,
``reference_bar.judge_identity`` and ``.calibration_min_pairs``, the Jeffreys figures of
``evidence.judge_corrected`` and, stamped by the stage (``looks``), ``looks`` keyed by the
policy and the bar instead of the generations' md5)::

    {
      "schema_version": 3,
      "claim_id":    "{kind}/{condition}/{opponent}",
      "kind":        "bar" (the reference bar) | "custom_bar" | "beats_opponent",
      "condition":   "policy" | "best_of_n_fresh_pool" | "best_of_n_selection_pool",
      "opponent":    str,
      "statement":   str,   # the sentence a card may print if supported ("[custom_bar: ...]" prefix)
      "threshold":   float,
      "reference_bar": {"bar", "opponent", "judge", "judge_identity": {"weights_md5"} | {"provider", "model_id"},
                        "calibration_min_pairs", "source"},
      "metric_refs": [str], # keys of metrics/eval.json backing the claim
      "supported":   bool,  # status == "confirmed" and no blocking flag
      "status":      "confirmed" | "inconclusive" | "refuted" | "not_tested",
      "reason":      str,
      "flags":       [str], # claims.FLAGS
      "blocking_flags": [str],
      "judge_model": str,   # a label
      "judge_fingerprint": str,   # the judge's identity, matched against reference_bar.judge_identity
      "judge_trusted": bool,      # trust as recomputed
      "evidence": {"estimand", "clustering", "binding_interval", "confidence", "n", "n_orders",
                   "n_unparseable", "n_missing_orders", "unparseable_rate", "order_disagreement_rate",
                   "n_clusters", "n_generations", "n_eff", "n_eff_cap", "win_rate", "win_rate_pooled",
                   "win_rate_orders", "weighted_win_rate", "lc_win_rate", "lc_low", "lc_high",
                   "cluster_low", "cluster_high", "worst_case_low", "observed_low", "observed_high",
                   "selection_pool_win_rate", "fresh_pool_win_rate", "selection_minus_fresh",
                   "judge_corrected": {"raw", "corrected", "low", "high", "informative", "reason",
                                       "calibration_pairs", "agreement_low", "agreement_high"}},
      # added by the stats stage (stats.looks):
      "inputs": {role: md5}, "decision_settings": {params key: value},
      "looks": {"earlier", "look_number", "keyed_by": {"policy_model_md5", "opponent", "threshold"},
                "this_look": {evals, samples_per_vignette, best_of_n, seed, n_vignettes, vignettes, contests, ...},
                "earlier_looks": [{"run_id", "design"}], "summary", "checked"}
    }

Across conditions
-----------------
``reappreg.stats.results`` (stage ``results``) reads the judgments of every condition -- the policy,
the other model conditions, reference answer files, off-distribution sets; all under this same
judgments contract, judged by one judge -- and summarises each with ``summarize_contests``
into ``metrics/results.json`` / ``reports/results.md``: the iid interval (screening only)
beside the worst-case cluster interval, the bar read from the cluster bound only, the
best-of-K optimism of a selected condition and its fresh-pool promotability, opponent
strengths and ``weak_opponent`` generalisation claims (schema in ``reappreg.stats.results``).

Status: ``confirmed`` = worst-case cluster lower bound > threshold; ``refuted`` = best-case
upper bound < threshold; ``inconclusive`` otherwise; ``not_tested`` = no contests, fewer than
``min_n_confirm`` contests, too many unparseable orders, fewer than 2 vignettes or a vignette
with fewer than 2 generations, selection-pool rows, or a fresh pool without its selection pool.
"""

from reappreg.stats.analysis import SUMMARY_METRICS, analyze, summarize_contests
from reappreg.stats.claims import (
    BLOCKING_FLAGS,
    CLAIMS_SCHEMA_VERSION,
    CONDITION_LABELS,
    FLAGS,
    STATUSES,
    ClaimContext,
    assess,
    build_claim,
)
from reappreg.stats.contests import contest_table, order_figures, position_biased
from reappreg.stats.inputs import (
    CALIBRATION_KEYS,
    CONDITION_OF_SELECTION,
    JUDGMENT_KEYS,
    ORDERS,
    SELECTIONS,
    load_calibration,
    load_judgments,
    validate_calibration,
    validate_judgments,
)
from reappreg.stats.intervals import (
    Design,
    design_bounds,
    information,
    vignette_bootstrap,
    wilson_interval,
)
from reappreg.stats.length import lc_fit, length_controlled
from reappreg.stats.outputs import (
    mlflow_metrics,
    write_forest_csv,
    write_forest_plot,
    write_outputs,
)
from reappreg.evidence.reference import ReferenceBar, load_reference_bar
from reappreg.stats.trust import Trust, TrustPolicy, recompute_trust

__all__ = [
    "BLOCKING_FLAGS",
    "CALIBRATION_KEYS",
    "CLAIMS_SCHEMA_VERSION",
    "CONDITION_LABELS",
    "CONDITION_OF_SELECTION",
    "FLAGS",
    "JUDGMENT_KEYS",
    "ORDERS",
    "SELECTIONS",
    "STATUSES",
    "SUMMARY_METRICS",
    "ClaimContext",
    "Design",
    "ReferenceBar",
    "Trust",
    "TrustPolicy",
    "analyze",
    "assess",
    "build_claim",
    "contest_table",
    "design_bounds",
    "information",
    "lc_fit",
    "length_controlled",
    "load_calibration",
    "load_judgments",
    "load_reference_bar",
    "mlflow_metrics",
    "order_figures",
    "position_biased",
    "recompute_trust",
    "summarize_contests",
    "validate_calibration",
    "validate_judgments",
    "vignette_bootstrap",
    "wilson_interval",
    "write_forest_csv",
    "write_forest_plot",
    "write_outputs",
]
