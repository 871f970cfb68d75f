"""The reward-model objectives: one class per module in this package, found by name.

A new objective is one new module here defining an ``Objective`` subclass with a unique
``name`` (plus its params, if it has knobs); nothing else lists the objectives.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from reappreg.errors import InputError
from reappreg.rm.objectives.base import Examples, Objective, ScoreMap


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, type[Objective]]:
    found: dict[str, type[Objective]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Objective) and value is not Objective \
                    and value.__module__ == module.__name__:
                if value.name in found:
                    raise RuntimeError(f"two reward-model objectives are named '{value.name}'")
                found[value.name] = value
    return dict(sorted(found.items()))


def names() -> list[str]:
    return list(registry())


def objective_class(name: str) -> type[Objective]:
    known = registry()
    if name not in known:
        raise InputError(f"rm: unknown objective '{name}' ({', '.join(known)})")
    return known[name]


def make_objective(name: str, settings, dimensions: list[str]) -> Objective:
    return objective_class(name)(settings, dimensions)


__all__ = ["Examples", "Objective", "ScoreMap", "make_objective", "names", "objective_class", "registry"]
