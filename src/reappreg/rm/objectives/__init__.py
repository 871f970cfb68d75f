"""The reward-model objectives: one class per module in this package, found by name.

A new objective is one new module here, named as the objective, defining one
``Objective`` subclass (``reappreg.rm.objectives.base``) whose ``name`` is the module's name,
plus its params if it has knobs; nothing else lists the objectives.

This ``__init__`` only names them (from the module files, importing none): the settings
validate ``rm.*.objective`` against :func:`names`, and every stage loads the settings, so
importing the objectives here would make every stage depend on every objective's code.
The classes are in :mod:`reappreg.rm.objectives.classes`, imported by the stages that train
or score.
"""

from __future__ import annotations

import pkgutil

# Modules of this package that hold no objective.
NOT_OBJECTIVES = frozenset({"base", "classes"})


def names() -> list[str]:
    """The objectives' names, sorted: the modules of this package (none is imported)."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__)
                  if info.name not in NOT_OBJECTIVES and not info.name.startswith("_"))


def check_objectives(rm) -> None:
    """Raise InputError naming every key of the ``rm`` settings that names no objective module."""
    from reappreg.errors import InputError

    known = names()
    keys = [("rm.ensemble.objective", rm.ensemble.objective),
            *((f"rm.baselines[{i}]", name) for i, name in enumerate(rm.baselines))]
    bad = [f"{key}: unknown objective '{name}' (known: {', '.join(known)})" for key, name in keys if name not in known]
    if bad:
        raise InputError("; ".join(bad))


__all__ = ["NOT_OBJECTIVES", "check_objectives", "names"]
