"""How a stage reports progress without knowing the terminal.

A stage function (``reappreg.<concern>.stage``) counts units of work; how they are shown (a
rich bar, nothing in a test) is its command's choice. The command hands the stage a
:data:`ProgressBar`: called with a label and the number of units, it opens a display and
yields the callback the stage advances by the units it just finished.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

Advance = Callable[[int], None]
# (label, total units) -> a context that shows the display and yields its advance callback.
ProgressBar = Callable[[str, int], AbstractContextManager[Advance]]


def _ignore(_units: int) -> None:
    return None


def no_progress(_label: str, _total: int) -> AbstractContextManager[Advance]:
    """Show nothing (library callers and tests)."""
    return nullcontext(_ignore)


__all__ = ["Advance", "ProgressBar", "no_progress"]
