"""The one number formatter (reappreg.evidence.formatting)."""

from __future__ import annotations

import math

from reappreg.evidence.formatting import fmt


def test_fmt_prints_ints_as_ints_and_floats_to_the_decimals():
    assert [fmt(None), fmt(True), fmt(False), fmt(7), fmt(0.5), fmt(2 / 3, 2), fmt(0.0)] == \
        ["n/a", "yes", "no", "7", "0.500", "0.67", "0.000"]
    assert fmt(1e-5) == "1e-05" and fmt(math.nan) == "n/a" and fmt(math.inf) == "n/a" and fmt("x") == "x"
