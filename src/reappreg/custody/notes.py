"""What a stage says about its own run, signed into its link's ``byproducts``.

A link's ``environment`` records what the step ran with (params sections, trust version, packages);
some of what a run found out is evidence too and belongs beside its products, signed with them: the
stats step's looks (how many earlier evaluations of this policy against this bar the tracking store
held when its claims were drawn, ``reappreg.stats.looks``) are a fact about the run, not a setting.

:func:`reappreg.custody.step.begin_step` opens a step's notes, a stage calls :func:`note`, and
:meth:`reappreg.custody.step.StepRun.finish` takes them into the link it signs. Outside ``dvc repro``
no step is open and a note is dropped, as nothing else of custody is recorded there. This module
imports nothing, so any stage may note without depending on the signing code.
"""

from __future__ import annotations

from typing import Any

_open: dict[str, Any] | None = None
RESERVED = ("custody_seconds",)   # what custody itself writes into byproducts


def begin() -> None:
    """Open the notes of the step this process runs (any earlier, unfinished step's notes are dropped)."""
    global _open
    _open = {}


def note(name: str, value: Any) -> None:
    """Record ``value`` (JSON) as the byproduct ``name`` of the open step; nothing when none is open."""
    if name in RESERVED:
        raise ValueError(f"byproduct {name!r} is custody's own")
    if _open is not None:
        _open[name] = value


def take() -> dict[str, Any]:
    """The open step's notes; the step is closed."""
    global _open
    taken, _open = dict(_open or {}), None
    return taken


__all__ = ["begin", "note", "take"]
