"""The registered detectors, in order, and the detector settings as recorded.

A new detector is one module with a ``detector.Detector`` subclass, listed here, plus its
params section (a ``settings.guard.DetectorSection`` model its class names as
``settings_model``, and a field of ``GuardSettings`` named like the detector, typed with it).
The scan, the hit rows, the sketch, the certificate, the audit and the report's detector
table (``certificate.detector_rows``: each detector's own ``label`` and ``shown``) go
through ``REGISTERED``, so a detector cannot be registered and left out of any of them.
``check_registered`` runs when this module loads: a detector without its params field, a
params field of a detector that is not registered, or a report row naming a setting the
detector does not record stops the import (and ``tests/guard/test_guard.py`` with it).

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
from reappreg.settings.guard import DetectorSection, GuardSettings, StockSettings

REGISTERED: tuple[Detector, ...] = (NgramDetector(), MinHashDetector(), CharsDetector(), FragmentsDetector(),
                                    EditsDetector())


def check_registered(detectors: tuple[Detector, ...], schema: type = GuardSettings) -> None:
    """Every detector declares its params section and report row, and every detector section
    of the params schema belongs to a registered detector (RuntimeError naming what is wrong)."""
    problems = []
    sections = {name: f.annotation for name, f in schema.model_fields.items()
                if isinstance(f.annotation, type) and issubclass(f.annotation, DetectorSection)}
    names = [d.name for d in detectors]
    if len(set(names)) != len(names):
        problems.append(f"detector names repeat: {names}")
    for d in detectors:
        model = getattr(d, "settings_model", None)
        if not (isinstance(model, type) and issubclass(model, DetectorSection)):
            problems.append(f"detector '{d.name}' names no params section (settings_model)")
        elif sections.get(d.name) is not model:
            problems.append(f"detector '{d.name}': GuardSettings has no field '{d.name}' of type {model.__name__}")
        if not getattr(d, "label", ""):
            problems.append(f"detector '{d.name}' has no report label")
        recorded = set(model.model_fields) | set(d.derived) if isinstance(model, type) else set()
        unknown = [k for k in getattr(d, "shown", ()) if k not in recorded]
        if unknown or not getattr(d, "shown", ()):
            problems.append(f"detector '{d.name}': its report row shows {list(getattr(d, 'shown', ()))}, not settings it "
                            f"records ({sorted(recorded)})")
    orphans = sorted(set(sections) - set(names))
    if orphans:
        problems.append(f"params sections of no registered detector: {orphans}")
    if problems:
        raise RuntimeError("guard detector registry: " + "; ".join(problems))


check_registered(REGISTERED)
DETECTORS = tuple(d.name for d in REGISTERED)
BY_NAME = {d.name: d for d in REGISTERED}


def detector(name: str) -> Detector:
    return BY_NAME[name]


def settings_record(settings: GuardSettings) -> dict[str, Any]:
    """The detector settings as the certificate and the sketch record them: the normalisation
    version, the stock weighting (``stock``: it changes every count of shared grams) and each
    detector's section."""
    return {"normalisation": NORMALISATION, "stock": settings.stock.model_dump(mode="json"),
            **{d.name: d.record(settings) for d in REGISTERED}}


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
    stock = record.get("stock")
    if not isinstance(stock, dict) or set(stock) != set(StockSettings.model_fields):
        raise InputError(f"{source}: guard detector settings incomplete: 'detectors.stock' is missing or not "
                         f"{sorted(StockSettings.model_fields)}")
    try:
        return GuardSettings.model_validate({**sections, "stock": stock})
    except ValidationError as exc:
        raise InputError(f"{source}: guard detector settings malformed: {exc}") from exc
