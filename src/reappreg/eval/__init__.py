"""Evaluation: the sampling plan, policy generation per condition, the conditions and the answer samples.

The results table built from every condition's judgments is ``reappreg.stats.results``."""
