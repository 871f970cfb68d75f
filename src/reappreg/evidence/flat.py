"""The one flattener: nested evidence as ``{"a.b.c": value}``.

The dotted keys a card's metrics, a gate's evidence, a registry tag and an MLflow param are named
by all come from :func:`flatten`. Every stage's MLflow run flattens its params with it, so this
module imports nothing and stays small: a change here is a change to every stage's code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one ``{"a.b.c": value}`` mapping, keys under ``prefix`` (``"<prefix>.a.b"``).

    Every leaf is kept as it is (lists, ``None``, strings included): a caller that wants numbers
    only filters the result. An empty mapping contributes no key; a non-mapping ``obj`` is one
    leaf under ``prefix``."""
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: obj}


__all__ = ["flatten"]
