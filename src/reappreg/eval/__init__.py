"""Evaluation: policy generation per condition, the condition table, and the results table."""
