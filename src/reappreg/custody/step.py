"""One stage run under ``dvc repro`` as one custody step: :func:`begin_step` before the command
(consumption verified, materials hashed), :meth:`StepRun.finish` after it succeeded (products hashed,
link signed and written). See :mod:`reappreg.custody.links` for what each step checks and signs; this
module sits above it and :mod:`reappreg.custody.layout` (a local root signs its layout on first use)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from reappreg.custody import notes
from reappreg.custody.layout import ensure_local_layout
from reappreg.custody.links import (
    ROOT_ENV,
    STAGE_ENV,
    Signing,
    _environment,
    _in,
    _log_to_run,
    check_consumed,
    pipeline_signing,
    record,
    sign_link,
)
from reappreg.custody.plan import StepPlan, link_path, load_template


@dataclass
class StepRun:
    """One stage run under ``dvc repro``: begun (consumption verified, materials hashed), then finished
    (products hashed, link signed and written) only when the command succeeded."""

    root: Path
    step: StepPlan
    signing: Signing
    materials: dict[str, dict[str, str]]
    argv: list[str]
    begin_s: float = 0.0  # seconds spent before the command: trust, consumption check, materials

    def finish(self) -> Path:
        import time

        from reappreg.io import write_bytes

        started = time.perf_counter()
        with _in(self.root):
            products = record(self.step.products)
        environment = _environment(self.root, self.step, self.signing.version)
        # What the stage noted about its run (custody.notes: the stats step's looks), and what custody
        # cost this step (benchmarks/custody_bench.py adds them up against the stages' time).
        byproducts = {**notes.take(), "custody_seconds": round(self.begin_s + time.perf_counter() - started, 3)}
        data = sign_link(self.signing, self.step.name, materials=self.materials, products=products,
                         command=["reappreg", *self.argv], environment=environment, byproducts=byproducts)
        path = self.root / link_path(self.step.name)
        write_bytes(path, data)
        _log_to_run(path)
        return path


def begin_step(argv: list[str]) -> StepRun | None:
    """Before a stage command: verify what it consumes and hash its materials (see the module docstring).
    None outside ``dvc repro``."""
    import time

    stage = os.environ.get(STAGE_ENV)
    if not stage:
        return None
    started = time.perf_counter()
    root = Path(os.environ.get(ROOT_ENV) or ".").resolve()
    template = load_template(root)
    step = template.step(stage)
    signing = pipeline_signing(root)
    if signing.version.origin == "local":
        ensure_local_layout(root, signing)
    with _in(root):
        materials = record(step.materials)
    check_consumed(root, template, step, materials, signing.trust, signing.version.origin)
    notes.begin()
    return StepRun(root, step, signing, materials, list(argv), time.perf_counter() - started)


__all__ = ["StepRun", "begin_step"]
