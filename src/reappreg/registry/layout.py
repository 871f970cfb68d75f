"""Where a registered version's signed parts live: the tag holding its envelope's digest, its
attestation artifact paths and its subjects (every file's sha256). Read by registration,
which writes them, and by verification, which checks them, so neither imports the other."""

from __future__ import annotations

from pathlib import Path

from reappreg.errors import InputError
from reappreg.hashing import sha256_file

ENVELOPE_TAG = "reappreg.provenance_sha256"


def attestation_paths(name: str, version: str) -> tuple[str, str]:
    """(provenance envelope, model-signing bundle) run-relative artifact paths of a version."""
    return f"{name}/attestations/v{version}.provenance.dsse.json", f"{name}/attestations/model.sig.json"


def subject_digests(folder: Path) -> dict[str, str]:
    """relpath -> sha256 of every file under ``folder`` (the statement's subjects)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise InputError(f"{path}: symlinks are not registered (the bytes behind them are not signed)")
        if path.is_file():
            out[path.relative_to(folder).as_posix()] = sha256_file(path)
    return out


__all__ = ["ENVELOPE_TAG", "attestation_paths", "subject_digests"]
