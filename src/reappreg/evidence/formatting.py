"""The one number formatter: a value the way every card and the report print it."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, decimals: int = 3) -> str:
    """Ints as ints, floats to ``decimals`` places (tiny ones in ``g`` form), booleans as yes/no, none as n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        if value != 0 and abs(value) < 10 ** -decimals:
            return f"{value:.{decimals}g}"  # 1e-05, not 0.000
        return f"{value:.{decimals}f}"
    return str(value)


__all__ = ["fmt"]
