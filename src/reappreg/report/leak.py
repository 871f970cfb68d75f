"""The report checks itself for held-out text before it is written."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from reappreg.errors import GuardViolation

if TYPE_CHECKING:
    from reappreg.settings.guard import GuardSettings


def scan_for_heldout(heldout: Path, settings: "GuardSettings", text: str, where: str) -> str:
    """Raise :class:`GuardViolation` naming the held-out answers ``text`` overlaps (the guard's detectors and
    thresholds, as the leak scan uses them); otherwise a sentence saying what was checked."""
    from reappreg.guard.leakscan import ScanTarget, heldout_index, scan

    index = heldout_index(heldout, settings)
    hits = scan(index, [(ScanTarget("report", where), text)])
    if hits:
        named = ", ".join(sorted({f"{h['answer_id']} ({h['detector']} {h['score']})" for h in hits}))
        raise GuardViolation(f"report: {where} would show held-out text: it overlaps {named}; nothing was written. "
                             "The page shows the policy's answers and the pipeline's numbers: find the sample or claim "
                             "that carries the answer (reports/samples.json is leak-scanned too)")
    return (f"Before writing, the page was checked against the {len(index.answers)} held-out answers with the guard's "
            "detectors: no overlap.")
