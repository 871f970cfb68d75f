"""The one flattener (reappreg.evidence.flat)."""

from __future__ import annotations

from reappreg.evidence.flat import flatten


def test_flatten_keeps_every_leaf_under_dotted_keys():
    nested = {"a": {"b": 1, "c": [1, 2], "e": {}}, "d": None}
    assert flatten(nested) == {"a.b": 1, "a.c": [1, 2], "d": None}
    assert flatten(nested, "judge") == {"judge.a.b": 1, "judge.a.c": [1, 2], "judge.d": None}
    assert flatten({1: {"x": "y"}}) == {"1.x": "y"}
    assert flatten(3, "k") == {"k": 3}
