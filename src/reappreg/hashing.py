"""Content hashes that match what DVC records in dvc.lock.

A file's hash is the md5 of its bytes (DVC 3). A folder's hash is DVC's ``.dir`` hash:
md5 of the JSON listing of (relpath, md5) entries, sorted by path, with a ``.dir`` suffix.
We recompute them with dvc-data's own hashing so provenance tags can be compared with
``dvc.lock`` and the DVC cache directly. :func:`sha256_file` is a file's sha256 (tokenizer
files in the guard's certificate, each file of a registered model).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from reappreg.errors import InputError


def _file_digest(path: str | os.PathLike, digest) -> str:  # noqa: ANN001 - a hashlib object
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_md5(path: str | os.PathLike) -> str:
    return _file_digest(path, hashlib.md5())


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    return _file_digest(path, hashlib.sha256())


def dir_entries(path: str | os.PathLike) -> list[dict[str, str]]:
    root = Path(path)
    entries = []
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        entries.append({"md5": file_md5(file), "relpath": rel})
    entries.sort(key=lambda e: e["relpath"])
    return entries


def dvc_md5(path: str | os.PathLike) -> str:
    """DVC-compatible md5 of a file or folder (folders end in ``.dir``)."""
    path = Path(path)
    if path.is_file():
        return file_md5(path)
    if path.is_dir():
        # Same serialisation as dvc-data's Tree.as_bytes(): json.dumps with sort_keys.
        listing = json.dumps(dir_entries(path), sort_keys=True).encode("utf-8")
        return hashlib.md5(listing).hexdigest() + ".dir"
    raise InputError(f"{path}: cannot hash, no such file or folder")

