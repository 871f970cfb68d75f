"""The registered detectors, in order, and the detector settings as recorded.

A new detector is one module with a ``detector.Detector`` subclass, listed here, plus its
params section (a field of ``settings.guard.GuardSettings`` named like the detector).
The scan, the hit rows, the sketch, the certificate and the audit go through ``REGISTERED``.

``settings_record`` is what the certificate and the sketch record under ``detectors``: the
normalisation version and, per detector, its settings (and what it derives from them);
``settings_from_record`` reads that back into ``GuardSettings`` for an audit or an outside
check, refusing settings that are incomplete or of another normalisation / detector version.
"""

from __future__ import annotations

from typing import Any

from reappreg.errors import InputError
from reappreg.guard.chars import CharsDetector
from reappreg.guard.detector import Detector
from reappreg.guard.edits import EditsDetector
from reappreg.guard.fragments import FragmentsDetector
from reappreg.guard.minhash import MinHashDetector
from reappreg.guard.ngram import NgramDetector
from reappreg.guard.normalise import NORMALISATION
from reappreg.settings.guard import GuardSettings

REGISTERED: tuple[Detector, ...] = (NgramDetector(), MinHashDetector(), CharsDetector(), FragmentsDetector(),
                                    EditsDetector())
DETECTORS = tuple(d.name for d in REGISTERED)
BY_NAME = {d.name: d for d in REGISTERED}


def detector(name: str) -> Detector:
    return BY_NAME[name]


def settings_record(settings: GuardSettings) -> dict[str, Any]:
    """The detector settings as the certificate and the sketch record them."""
    return {"normalisation": NORMALISATION, **{d.name: d.record(settings) for d in REGISTERED}}


def settings_from_record(record: Any, source: str = "certificate") -> GuardSettings:
    """``GuardSettings`` with exactly the recorded detector settings (the other knobs at their
    defaults: they do not change what is detected). InputError when the record lacks a
    detector or a setting, names an unknown one, or was made by another normalisation or
    detector version."""
    from pydantic import ValidationError

    if not isinstance(record, dict):
        raise InputError(f"{source}: guard detector settings missing")
    if record.get("normalisation") != NORMALISATION:
        raise InputError(f"{source}: guard detector settings of normalisation '{record.get('normalisation')}', "
                         f"not this version's '{NORMALISATION}'")
    sections = {d.name: d.read_record(record.get(d.name), source) for d in REGISTERED}
    try:
        return GuardSettings.model_validate(sections)
    except ValidationError as exc:
        raise InputError(f"{source}: guard detector settings malformed: {exc}") from exc
