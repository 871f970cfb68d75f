"""The zero-setup default: this clone's local key as a one-key TUF root, made on first use.

A fresh clone has no team keys, yet ``dvc repro`` must register and ``verify`` must check.
So the clone's local key (``work/registry/keys/local-signing-key.pem``, gitignored) becomes a
one-key root of its own under ``work/registry/trust/local/``: the key holds every role with
threshold 1. It is the same TUF metadata, verified the same way, and every command says so
in its trust line ("this clone's local one-key root ... trusted by this clone only"): what
it signs proves only that someone holding this clone's key file signed it.

The local key is at hand whenever the local root is used, so its metadata is renewed before
it expires (a team root is renewed by its key holders, on purpose).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from reappreg.trust.client import Trust, TrustOrigin, load_origin
from reappreg.trust.repository import (
    ROLES,
    TOP_ROLES,
    RoleKeys,
    TrustRepository,
    init_repository,
    latest_version,
    renew,
    utcnow,
)

LOCAL_EXPIRY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
TEAM = "team"
LOCAL = "local"


def _signer(key) -> dict:
    from securesystemslib.signer import CryptoSigner

    from reappreg.trust.repository import tuf_key

    return {key.keyid: CryptoSigner(key.private_key, tuf_key(key.public_key, key.keyid))}


def ensure_local_root(folder: Path, key) -> None:
    """The one-key root of ``key`` (a ``SigningKey``) in ``folder``: made on first use, renewed when
    it is within :data:`RENEW_BEFORE` of expiring. Refuses a folder made by another key."""
    import json

    from reappreg.errors import InputError

    if not latest_version(folder, "root"):
        spec = RoleKeys((key.keyid,), 1)
        init_repository(folder, public_keys={key.keyid: key.public_key}, signers=_signer(key),
                        top={role: spec for role in TOP_ROLES}, roles={role: spec for role in ROLES}, expiry=LOCAL_EXPIRY)
        return
    targets = json.loads((folder / f"{latest_version(folder, 'targets')}.targets.json").read_text(encoding="utf-8"))["signed"]
    root = json.loads((folder / f"{latest_version(folder, 'root')}.root.json").read_text(encoding="utf-8"))["signed"]
    if key.keyid not in root["roles"]["root"]["keyids"]:
        raise InputError(f"{folder}: the local root there is another key's ({', '.join(root['roles']['root']['keyids'])}), "
                         f"not this clone's local key {key.keyid[:16]}: move it away to start a new local root")
    expires = min(dt.datetime.fromisoformat(str(s["expires"]).replace("Z", "+00:00"))
                  for s in (targets, root))
    if expires - utcnow() < RENEW_BEFORE:
        repo = TrustRepository(folder, _signer(key), LOCAL_EXPIRY)
        if dt.datetime.fromisoformat(str(root["expires"]).replace("Z", "+00:00")) - utcnow() < RENEW_BEFORE:
            with repo.edit_root():
                pass
        renew(repo)


def load_trust(team_dir: Path, work_dir: Path, *, local_key=None, skew_s: float = 300.0) -> Trust:
    """The team root in ``team_dir`` (when it holds ``1.root.json``) and, when ``local_key`` is given
    (a ``SigningKey``: the local key is trusted), this clone's local one-key root, each verified
    from the root this clone pinned under ``work_dir/trust/pin/<origin>``."""
    origins: dict[str, TrustOrigin] = {}
    if (team_dir / "1.root.json").is_file():
        origins[TEAM] = load_origin(TEAM, team_dir, work_dir / "trust" / "pin" / TEAM)
    if local_key is not None:
        local_folder = work_dir / "trust" / LOCAL
        ensure_local_root(local_folder, local_key)
        origins[LOCAL] = load_origin(LOCAL, local_folder, work_dir / "trust" / "pin" / LOCAL)
    return Trust(origins, dt.timedelta(seconds=skew_s))


def clone_trust(settings, keys_dir: Path, local_keys_dir: Path, *, create_local: bool = False) -> Trust:
    """The trust a clone uses: the team's root under ``keys_dir`` and, when ``settings.trust_local_key``
    (``settings``: the registry section of the params), this clone's local key as a one-key root (made
    here when ``create_local``: a command that signs, with no ``$REAPPREG_SIGNING_KEY``)."""
    import os

    from reappreg.trust.keys import SIGNING_KEY_ENV, local_key, signing_key

    local = None
    if settings.trust_local_key:
        if create_local and not os.environ.get(SIGNING_KEY_ENV):
            signing_key(local_keys_dir, create=True)  # this clone's key, made on first use by a command that signs
        local = local_key(local_keys_dir)
    return load_trust(keys_dir, local_keys_dir.parent, local_key=local, skew_s=settings.clock_skew_s)


__all__ = ["LOCAL", "TEAM", "clone_trust", "ensure_local_root", "load_trust"]
