"""The objective classes, imported by name (``reappreg.rm.objectives.<name>``).

Kept apart from the package's ``__init__`` (which only lists the names) so that loading the
settings imports no objective; see the package docstring.
"""

from __future__ import annotations

import functools
import importlib

from reappreg.errors import InputError
from reappreg.rm.objectives import names
from reappreg.rm.objectives.base import Objective

@functools.lru_cache(maxsize=1)
def registry() -> dict[str, type[Objective]]:
    """name -> class of every objective. Each module must define exactly one ``Objective``
    subclass, named as the module, so :func:`names` (which reads the file names) and the
    classes cannot disagree."""
    found: dict[str, type[Objective]] = {}
    for name in names():
        module = importlib.import_module(f"{__package__}.{name}")
        classes = [value for value in vars(module).values()
                   if isinstance(value, type) and issubclass(value, Objective) and value is not Objective
                   and value.__module__ == module.__name__]
        if len(classes) != 1 or classes[0].name != name:
            defined = ", ".join(f"{c.__name__} (name '{c.name}')" for c in classes) or "none"
            raise RuntimeError(f"{module.__name__}: must define one Objective subclass named '{name}' "
                               f"(found {defined})")
        found[name] = classes[0]
    return found


def objective_class(name: str) -> type[Objective]:
    known = registry()
    if name not in known:
        raise InputError(f"rm: unknown objective '{name}' ({', '.join(known)})")
    return known[name]


def make_objective(name: str, settings, dimensions: list[str]) -> Objective:
    return objective_class(name)(settings, dimensions)


__all__ = ["make_objective", "objective_class", "registry"]
