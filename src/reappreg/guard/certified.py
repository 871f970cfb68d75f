"""The certificate reader: what a training stage needs of a guard certificate, and nothing else.

Every stage that trains on text (reward-model members, baselines and the ensemble, GRPO)
calls ``require_certified`` before it reads a text; cards and reports read the schema name.
None of them runs a detector, so this module imports no part of the guard's scan: only the
error types, the JSON reader and DVC's md5. That is what keeps the RM and policy stages'
code deps (``reappreg.dvcdeps``) free of the detectors: changing a detector re-runs the
guard stage and what scans text with the detectors, not every RM seed and GRPO, when the
guarded texts come out byte-identical (``tests/test_dvc_deps.py`` checks it).

What a certificate holds is documented in ``certificate`` (its writer's side).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reappreg.errors import GuardViolation, InputError
from reappreg.hashing import dvc_md5
from reappreg.io import read_json

CERTIFICATE_SCHEMA = "reappreg.guard.certificate/v2"


def read_certificate(certificate_path: str | Path) -> dict[str, Any]:
    """A guard certificate (InputError for anything else)."""
    raw = read_json(certificate_path)
    if not isinstance(raw, dict) or raw.get("schema") != CERTIFICATE_SCHEMA:
        raise InputError(f"{certificate_path}: not a guard certificate (expected schema '{CERTIFICATE_SCHEMA}')")
    return raw


def require_certified(certificate_path: str | Path, text_inputs: dict[str, str | Path]) -> dict[str, Any]:
    """Refuse to train unless the guard passed and certified these exact text files.

    Every training stage calls this. Each input's current md5 must equal the md5 of a
    guarded copy listed in the certificate (compared by content, so the check does not
    depend on where the files are). Returns the certificate.
    """
    raw = read_certificate(certificate_path)
    if raw.get("result") != "pass":
        raise GuardViolation(f"{certificate_path}: the separation guard did not pass (result {raw.get('result')!r}); not training")
    entries = raw.get("training")
    if not isinstance(entries, list):
        raise InputError(f"{certificate_path}: 'training' must list the guarded sources")
    certified = set()
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("guarded_md5"):
            raise InputError(f"{certificate_path}: a 'training' entry of a passing certificate lacks 'guarded_md5'")
        certified.add(str(entry["guarded_md5"]))
    for name, path in text_inputs.items():
        md5 = dvc_md5(path)
        if md5 not in certified:
            raise GuardViolation(
                f"{path} ({name}, md5 {md5}) is not a guarded copy certified by {certificate_path}; re-run the guard"
            )
    return raw
