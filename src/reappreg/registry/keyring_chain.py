"""The team keyring is trusted only as a signed chain: every change signed by a key the keyring already trusted.

``registry/keys/keyring.yaml`` is what people edit. ``registry/keys/keyring.chain.jsonl`` holds,
one per line and in order, a DSSE envelope (the same signing as the provenance statements)
over each keyring the team agreed on: its keys (key id, holder, status and the public key
itself), its sequence number, the sha256 of the line before it, and a reason.

Replaying the chain (:func:`replay`): the first entry is signed by one of its own active keys
(the team's root of trust, fixed when it is committed); every later entry must name the line
before it and be signed by a key that is **active in the entry before it**. The keyring
``load_keyring`` returns is ``keyring.yaml`` only when it equals the chain's last entry, key
for key; otherwise nothing is trusted and the difference is named. So one insider commit can
neither add a key (no active key signed it), nor un-revoke one, nor swap a key file; adding
a key takes a signature by someone who already holds one (``reappreg registry sign-keyring``).

What it cannot tell: a chain rewritten wholesale from a new first entry by someone who can
commit, or cut back to before a change (a revocation deleted) -- except by a clone that has
seen the chain: it remembers the first entry and the newest it saw (``remember``), and refuses
a chain that starts elsewhere or no longer holds that entry. Every version's signed statement
records the chain head it was signed under (``keyring_head``): ``verify`` names a version whose
keyring is not in today's chain.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reappreg.errors import InputError
from reappreg.registry.keys import (
    LOCAL_PUBLIC_FILE,
    Keyring,
    SignatureInvalid,
    TrustedKey,
    key_id,
    listed_keys,
    load_public,
    open_statement,
    public_pem,
    sign_statement,
)

CHAIN_FILE = "keyring.chain.jsonl"
KEYRING_TYPE = "https://reappreg.dev/keyring/v1"
SEEN_MEMO = "keyring-seen.json"


@dataclass(frozen=True)
class SignedKeyring:
    sequence: int
    digest: str                       # sha256 of this entry's line (what the next entry names)
    keys: dict[str, dict[str, str]]   # keyid -> {holder, status, public_pem}
    signer: str                       # key id that signed this entry
    reason: str


def _line_digest(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def _signers(keys: dict[str, dict[str, str]]) -> Any:
    """A Keyring of the active keys of one signed keyring: who may sign the next entry."""
    from cryptography.hazmat.primitives import serialization


    trusted = {}
    for kid, entry in keys.items():
        try:
            public = serialization.load_pem_public_key(entry["public_pem"].encode("utf-8"))
        except (ValueError, TypeError) as exc:
            raise InputError(f"signed keyring entry lists key {kid[:16]} with an unreadable public key ({exc})") from exc
        if key_id(public) != kid:
            raise InputError(f"signed keyring entry lists key {kid[:16]} whose public key has id {key_id(public)[:16]}")
        if entry["status"] == "active":
            trusted[kid] = TrustedKey(kid, public, "team", entry["holder"], "active", Path(CHAIN_FILE))
    return Keyring(trusted, {})


def replay(chain_path: Path) -> list[SignedKeyring]:
    """Every entry of the chain, each verified against the one before it (see the module docstring)."""

    if not chain_path.is_file():
        return []
    chain: list[SignedKeyring] = []
    lines = [line for line in chain_path.read_bytes().splitlines() if line.strip()]
    for n, line in enumerate(lines):
        where = f"{chain_path} entry {n + 1}"
        try:
            payload = json.loads(base64.b64decode(json.loads(line)["payload"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{where}: not a signed keyring entry ({type(exc).__name__}: {exc})") from exc
        fields = ("keyid", "holder", "status", "public_pem")
        entries = payload.get("keys") if isinstance(payload, dict) else None
        if not isinstance(entries, list) or not all(isinstance(k, dict) and all(isinstance(k.get(f), str) for f in fields)
                                                    for k in entries):
            raise InputError(f"{where}: its keys must each name {', '.join(fields)} as text")
        keys = {k["keyid"]: {"holder": k["holder"], "status": k["status"], "public_pem": k["public_pem"]} for k in entries}
        if payload.get("_type") != KEYRING_TYPE or payload.get("sequence") != n:
            raise InputError(f"{where}: type {payload.get('_type')!r}, sequence {payload.get('sequence')!r}; expected "
                             f"{KEYRING_TYPE!r}, {n}")
        previous = chain[-1] if chain else None
        if payload.get("previous") != (previous.digest if previous else None):
            raise InputError(f"{where}: names previous entry {payload.get('previous')!r}, but the entry before it has "
                             f"sha256 {previous.digest if previous else None!r} (entries removed, reordered or rewritten)")
        # The first entry is signed by one of its own active keys; every later one by a key the entry before trusted.
        allowed = _signers(previous.keys if previous else keys)
        try:
            _, signer = open_statement(line, allowed)
        except SignatureInvalid as exc:
            who = "one of its own active keys" if previous is None else f"a key active in entry {n} (the keyring before it)"
            raise InputError(f"{where}: not signed by {who}: {exc}") from exc
        chain.append(SignedKeyring(n, _line_digest(line), keys, signer.keyid, str(payload.get("reason", ""))))
    return chain


def check_keyring(chain_path: Path, listed: dict[str, tuple[str, str]], *, remember: Path | None = None) -> list[str]:
    """Raise InputError unless ``listed`` (keyring.yaml: keyid -> (holder, status)) is exactly the chain's
    last signed keyring. Returns the digest of every entry, oldest first (empty: no keys listed, no chain)."""
    chain = replay(chain_path)
    if not chain:
        if listed:
            raise InputError(f"{chain_path.parent / 'keyring.yaml'} lists {len(listed)} key(s) but {chain_path} holds no signed "
                             "keyring: a team key is trusted only once a key holder signed the keyring "
                             "(`reappreg registry sign-keyring --reason ...`; the first key signs itself)")
        return []
    signed = {kid: (k["holder"], k["status"]) for kid, k in chain[-1].keys.items()}
    if signed != listed:
        diffs = [f"{kid[:16]} {listed[kid]} is not in the signed keyring (no key it already trusted signed its addition)"
                 for kid in sorted(set(listed) - set(signed))]
        diffs += [f"{kid[:16]} {signed[kid]} is signed but missing from keyring.yaml" for kid in sorted(set(signed) - set(listed))]
        diffs += [f"{kid[:16]}: keyring.yaml says {listed[kid]}, the signed keyring {signed[kid]}"
                  for kid in sorted(set(signed) & set(listed)) if signed[kid] != listed[kid]]
        raise InputError(f"{chain_path.parent / 'keyring.yaml'} differs from the last signed keyring (entry "
                         f"{chain[-1].sequence + 1} of {chain_path}): " + "; ".join(diffs) + ". Nothing is trusted until "
                         "a key holder signs the change (`reappreg registry sign-keyring`).")
    if remember is not None:
        _check_seen(chain, chain_path, remember / SEEN_MEMO)
    return [entry.digest for entry in chain]


def _check_seen(chain: list[SignedKeyring], chain_path: Path, memo: Path) -> None:
    """The chain must start where the one this clone saw before started, and still hold the newest entry it
    saw: a chain rewritten from a new root, or cut back to before a revocation, is refused."""
    from reappreg.io import write_json

    seen = json.loads(memo.read_text(encoding="utf-8")) if memo.is_file() else None
    if seen is not None:
        if chain[0].digest != seen.get("genesis"):
            raise InputError(f"{chain_path}: its first entry has sha256 {chain[0].digest[:16]}…, but the chain this clone "
                             f"trusted before starts {str(seen.get('genesis'))[:16]}… ({memo}): the keyring was rewritten from "
                             "a new root. Remove the memo only if the team re-rooted its keys on purpose.")
        n = int(seen.get("sequence", -1))
        if n >= len(chain) or chain[n].digest != seen.get("head"):
            raise InputError(f"{chain_path}: this clone saw entry {n + 1} ({str(seen.get('head'))[:16]}…), which the chain no "
                             f"longer holds ({len(chain)} entries): signed keyring changes were removed (a revocation "
                             "undone by deleting it)")
    if seen is None or len(chain) - 1 > int(seen.get("sequence", -1)):
        write_json(memo, {"genesis": chain[0].digest, "sequence": len(chain) - 1, "head": chain[-1].digest})


def sign_keyring(team_dir: Path, key: Any, reason: str) -> SignedKeyring:
    """Append keyring.yaml, as it is now, to the chain, signed with ``key``; refuses a signer the chain
    would not accept (a key not active in the last signed keyring, or, for the first entry, not active in it)."""

    chain_path = team_dir / CHAIN_FILE
    chain = replay(chain_path)
    keys = listed_keys(team_dir)
    if not keys:
        raise InputError(f"{team_dir / 'keyring.yaml'} lists no keys: nothing to sign")
    body = [{"keyid": kid, "holder": k.holder, "status": k.status, "public_pem": public_pem(k.public_key).decode("ascii")}
            for kid, k in sorted(keys.items())]
    allowed = chain[-1].keys if chain else {e["keyid"]: e for e in body}
    if allowed.get(key.keyid, {}).get("status") != "active":
        where = f"the last signed keyring (entry {len(chain)})" if chain else "the keyring it would start"
        raise InputError(f"signing key {key.keyid[:16]} ({key.path}) is not an active key of {where}: "
                         "only a key the keyring already trusts can sign a change to it")
    statement = {"_type": KEYRING_TYPE, "sequence": len(chain), "previous": chain[-1].digest if chain else None,
                 "keys": body, "reason": reason,
                 "signed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")}
    line = json.dumps(json.loads(sign_statement(statement, key)), sort_keys=True, separators=(",", ":")).encode("utf-8")
    from reappreg.io import write_text

    before = chain_path.read_text(encoding="utf-8") if chain_path.is_file() else ""
    write_text(chain_path, before + line.decode("utf-8") + "\n")  # temp file + rename: never half an entry
    return replay(chain_path)[-1]


def load_keyring(team_dir: str | os.PathLike, local_dir: str | os.PathLike | None, *,
                 remember: str | os.PathLike | None = None) -> Keyring:
    """Team keys from ``team_dir/keyring.yaml`` -- only when they are exactly the signed keyring chain's last
    entry (``check_keyring``) -- plus this clone's local public key if ``local_dir``.
    ``remember``: this clone's folder for what it saw of the chain (refuses a rewritten or cut-back chain)."""
    team_dir = Path(team_dir)
    listed = listed_keys(team_dir)
    chain = check_keyring(team_dir / CHAIN_FILE, {kid: (k.holder, k.status) for kid, k in listed.items()},
                          remember=Path(remember) if remember is not None else None)
    keys = {kid: k for kid, k in listed.items() if k.status != "revoked"}
    revoked = {kid: k for kid, k in listed.items() if k.status == "revoked"}
    if local_dir is not None:
        local_public = Path(local_dir) / LOCAL_PUBLIC_FILE
        if local_public.exists():
            public = load_public(local_public)
            kid = key_id(public)
            if kid not in revoked:
                keys.setdefault(kid, TrustedKey(kid, public, "local", "this clone", "active", local_public))
    return Keyring(keys, revoked, tuple(chain))
