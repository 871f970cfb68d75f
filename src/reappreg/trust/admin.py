"""What key holders do to the team's trust metadata (``reappreg registry keys ...``).

Every change is a new TUF version written with TUF's own ``Repository`` editing
(:class:`.repository.TrustRepository`), signed with the keys this session holds
(``$REAPPREG_SIGNING_KEY``, ``:``-separated for several). A change that the held keys cannot
sign to its thresholds is staged, and another holder completes it with :func:`sign`.
Commit the folder afterwards: clones verify the new versions from the root they pinned.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.trust.keys import SigningKey, crypto_signer, key_id, load_public
from reappreg.trust.repository import (
    ROLES,
    TOP_ROLES,
    RoleKeys,
    TrustRepository,
    init_repository,
    latest_version,
    renew,
    set_role_keys,
    set_top_role_keys,
)


def _public(paths: list[Path]) -> dict[str, Any]:
    keys = {}
    for path in paths:
        public = load_public(path)
        keys[key_id(public)] = public
    return keys


def _signers(keys: list[SigningKey]) -> dict[str, Any]:
    return {k.keyid: crypto_signer(k) for k in keys}


def _spec(paths: list[Path], threshold: int, what: str) -> RoleKeys:
    if not paths:
        raise InputError(f"{what}: give at least one public key")
    if not 1 <= threshold <= len(paths):
        raise InputError(f"{what}: threshold {threshold} must be between 1 and the number of keys ({len(paths)})")
    return RoleKeys(tuple(key_id(load_public(p)) for p in paths), threshold)


@dataclass(frozen=True)
class RoleSpec:
    """A role as a key holder types it: the public key files that hold it and how many must sign."""

    keys: list[Path]
    threshold: int = 1


def init(folder: Path, *, root: RoleSpec, online: RoleSpec, roles: dict[str, RoleSpec], signers: list[SigningKey],
         expiry_days: int) -> TrustRepository:
    """A new team root in ``folder``: ``root`` holds TUF's root role, ``online`` targets, snapshot and
    timestamp, and each registry role is ``roles[role]`` (default: ``online``)."""
    top = {"root": _spec(root.keys, root.threshold, "--root")}
    top.update({name: _spec(online.keys, online.threshold, "--online") for name in TOP_ROLES if name != "root"})
    delegated = {name: _spec(spec.keys, spec.threshold, f"--role {name}") for name, spec in roles.items()}
    unknown = sorted(set(delegated) - set(ROLES))
    if unknown:
        raise InputError(f"unknown role(s) {', '.join(unknown)}; the registry's roles are {', '.join(ROLES)}")
    for name in ROLES:
        delegated.setdefault(name, top["targets"])
    paths = [*root.keys, *online.keys, *(p for spec in roles.values() for p in spec.keys)]
    repo = init_repository(folder, public_keys=_public(paths), signers=_signers(signers), top=top, roles=delegated,
                           expiry=dt.timedelta(days=expiry_days))
    return repo


def _repo(folder: Path, signers: list[SigningKey], expiry_days: int) -> TrustRepository:
    if not latest_version(folder, "root"):
        raise InputError(f"{folder}: no TUF root metadata yet (`reappreg registry keys init` makes it)")
    return TrustRepository(folder, _signers(signers), dt.timedelta(days=expiry_days))


def set_role(folder: Path, role: str, spec: RoleSpec, *, signers: list[SigningKey], expiry_days: int) -> TrustRepository:
    """A registry role (or, for root/targets/snapshot/timestamp, a TUF top-level role: a root rotation)
    becomes ``spec``; a key left out can no longer sign under the new version."""
    repo = _repo(folder, signers, expiry_days)
    public = _public(spec.keys)
    if role in TOP_ROLES:
        set_top_role_keys(repo, role, _spec(spec.keys, spec.threshold, role), public)
    else:
        set_role_keys(repo, role, _spec(spec.keys, spec.threshold, role), public)
    return repo


def renew_all(folder: Path, *, signers: list[SigningKey], expiry_days: int, root: bool) -> TrustRepository:
    """New versions with a new expiry: targets, snapshot and timestamp (and root when ``root``)."""
    repo = _repo(folder, signers, expiry_days)
    if root:
        with repo.edit_root():
            pass
    if not repo.staged:
        renew(repo)
    return repo


def sign(folder: Path, *, signers: list[SigningKey], expiry_days: int) -> list[str]:
    """Add this session's signatures to the staged versions; publish those that now verify."""
    return _repo(folder, signers, expiry_days).sign_staged()


__all__ = ["RoleSpec", "init", "renew_all", "set_role", "sign"]
