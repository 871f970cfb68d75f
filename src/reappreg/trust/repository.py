"""The write side of the registry's keys: TUF metadata in a folder, edited with TUF's own ``Repository``.

A *trust repository* is a folder of TUF metadata with consistent snapshots, so every version
stays readable (an entry signed under targets v3 is checked against ``3.targets.json`` for
ever): ``<N>.root.json``, ``timestamp.json``, ``<N>.snapshot.json``, ``<N>.targets.json``.
The team's is ``registry/keys/`` (committed); a clone's local one-key root lives under
``work/registry/trust/local/`` (:mod:`.local`).

Roles. Root names who may sign root, targets, snapshot and timestamp (TUF's four). The
top-level targets metadata *delegates* the registry's own roles -- ``registration``,
``promotion``, ``acceptance`` (of UI requests), ``enforcement`` (restores), ``pipeline``
(in-toto links, one per stage) and ``layout`` (the in-toto layout) -- each with its keys
and threshold, so which key may sign what, and how many must, is TUF metadata too. The
targets metadata also records when it was published (``x-reappreg-published``, signed), so
an entry dated after a newer targets version replaced the one it names is refused.

Signing. :class:`TrustRepository` is ``tuf.repository.Repository``: ``edit_*`` bumps the
version and expiry, :meth:`close` signs with every key this session holds for the role (a
new root with those of the previous root too). A version that does not reach its
thresholds with the keys at hand is *staged* (``staged/`` under the folder) with the
signatures it has, and published once other holders add theirs (:meth:`sign_staged`):
clients never see metadata that does not verify.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reappreg.errors import InputError

# The registry's roles, delegated by the top-level targets metadata (see the module docstring).
ROLES = ("registration", "promotion", "acceptance", "enforcement", "pipeline", "layout")
TOP_ROLES = ("root", "targets", "snapshot", "timestamp")
PUBLISHED_FIELD = "x-reappreg-published"
STAGED = "staged"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def iso(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(dt.timezone.utc)


def tuf_key(public_key: Any, keyid: str) -> Any:
    """A TUF key for an EC public key, under the registry's key id (sha256 of its PEM: the same id
    model-signing writes into its bundles and DSSE envelopes carry)."""
    from securesystemslib.signer import SSlibKey

    return SSlibKey.from_crypto(public_key, keyid=keyid)


def _versioned(folder: Path, role: str) -> dict[int, Path]:
    out = {}
    for path in folder.glob(f"*.{role}.json"):
        head = path.name.split(".", 1)[0]
        if head.isdigit():
            out[int(head)] = path
    return out


def latest_version(folder: Path, role: str) -> int:
    """The newest version of ``role`` in ``folder`` (0 when there is none)."""
    if role == "timestamp":
        path = folder / "timestamp.json"
        if not path.is_file():
            return 0
        return int(json.loads(path.read_text(encoding="utf-8"))["signed"]["version"])
    return max(_versioned(folder, role), default=0)


def role_file(folder: Path, role: str, version: int) -> Path:
    return folder / ("timestamp.json" if role == "timestamp" else f"{version}.{role}.json")


@dataclass
class TrustRepository:
    """``tuf.repository.Repository`` over a folder (see the module docstring).

    ``signers``: ``CryptoSigner`` per key id this session holds; ``expiry``: how long each new
    version is valid; ``now``: the clock the expiry and the publication time are set by."""

    folder: Path
    signers: dict[str, Any]
    expiry: dt.timedelta
    now: dt.datetime = field(default_factory=utcnow)
    staged: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from tuf.repository import Repository

        # Mixed in at run time: tuf is imported only where keys are read or written.
        self._repo = type("_Repo", (Repository,), {
            "open": lambda _self, role: self.open(role),
            "close": lambda _self, role, md: self.close(role, md),
            "targets_infos": property(lambda _self: self.targets_infos),
            "snapshot_info": property(lambda _self: self.snapshot_info),
        })()

    # --- tuf.repository.Repository's storage methods

    def open(self, role: str) -> Any:
        from tuf.api.metadata import Metadata, Root, Snapshot, Targets, Timestamp

        version = latest_version(self.folder, role)
        if version == 0:
            signed = {"root": lambda: Root(consistent_snapshot=True), "targets": Targets, "snapshot": Snapshot,
                      "timestamp": Timestamp}[role]()
            signed.version = 0  # close() makes it 1
            return Metadata(signed)
        return Metadata.from_file(str(role_file(self.folder, role, version)))

    def close(self, role: str, md: Any) -> None:
        md.signed.version += 1
        md.signed.expires = self.now + self.expiry
        if role == "targets":
            md.signed.unrecognized_fields[PUBLISHED_FIELD] = iso(self.now)
        md.signatures.clear()
        for keyid in self._signing_keyids(role, md):
            md.sign(self.signers[keyid], append=True)
        self._store(role, md)

    @property
    def targets_infos(self) -> dict[str, Any]:
        from tuf.api.metadata import MetaFile

        return {"targets.json": MetaFile(latest_version(self.folder, "targets"))}

    @property
    def snapshot_info(self) -> Any:
        from tuf.api.metadata import MetaFile

        return MetaFile(latest_version(self.folder, "snapshot"))

    # --- signing and storing

    def root(self) -> Any:
        return self.open("root").signed

    def _role_keyids(self, role: str, root: Any) -> list[str]:
        return list(root.roles[role].keyids) if role in root.roles else []

    def _signing_keyids(self, role: str, md: Any) -> list[str]:
        """Every key this session holds that the new version must be signed by: the role's keys in
        the root in force (for a new root: its own root keys and the previous root's)."""
        wanted = set()
        if role == "root":
            wanted |= set(self._role_keyids("root", md.signed))
            if md.signed.version > 1:
                wanted |= set(self._role_keyids("root", self.open("root").signed))
        else:
            wanted |= set(self._role_keyids(role, self.open("root").signed))
        return sorted(wanted & set(self.signers))

    def _missing(self, role: str, md: Any) -> list[str]:
        """What keeps ``md`` from verifying: one line per unmet threshold (empty: it verifies)."""
        problems = []
        checks = [("its own root", md.signed)] if role == "root" else []
        if role != "root" or md.signed.version > 1:
            checks.append(("the root in force", self.open("root").signed))
        for what, root in checks:
            result = root.get_verification_result(role, md.signed_bytes, md.signatures)
            if not result.verified:
                holders = ", ".join(k[:12] for k in root.roles[role].keyids)
                problems.append(f"{role} v{md.signed.version} has {len(result.signed)} of the {result.threshold} signature(s) "
                                f"{what} asks for (keys {holders})")
        return problems

    def _store(self, role: str, md: Any) -> None:
        from tuf.api.serialization.json import JSONSerializer

        from reappreg.io import write_bytes

        data = md.to_bytes(JSONSerializer(compact=False))
        missing = self._missing(role, md)
        target = role_file(self.folder, role, md.signed.version)
        if missing:
            target = self.folder / STAGED / target.name
            self.staged.append(f"{target}: " + "; ".join(missing))
        write_bytes(target, data)

    def sign_staged(self) -> list[str]:
        """Add this session's signatures to every staged version; publish those that now verify.
        Returns what was published (and what is still missing, for the rest)."""
        from tuf.api.metadata import Metadata

        done = []
        staged_dir = self.folder / STAGED
        for role in ("root", "targets", "snapshot", "timestamp"):
            for path in sorted(staged_dir.glob(f"*{role}.json")) if staged_dir.is_dir() else []:
                md = Metadata.from_file(str(path))
                if md.signed.type != role:
                    continue
                for keyid in self._signing_keyids(role, md):
                    if keyid not in md.signatures:
                        md.sign(self.signers[keyid], append=True)
                from tuf.api.serialization.json import JSONSerializer

                from reappreg.io import write_bytes

                missing = self._missing(role, md)
                if missing:
                    write_bytes(path, md.to_bytes(JSONSerializer(compact=False)))
                    done.append(f"still staged {path.name}: " + "; ".join(missing))
                else:
                    write_bytes(role_file(self.folder, role, md.signed.version), md.to_bytes(JSONSerializer(compact=False)))
                    path.unlink()
                    done.append(f"published {role_file(self.folder, role, md.signed.version).name}")
        return done

    # --- what key holders do

    def publish(self) -> None:
        """A new snapshot and timestamp over the targets as they are (TUF's own do_snapshot/do_timestamp)."""
        self._repo.do_snapshot(force=True)
        self._repo.do_timestamp(force=True)

    def edit_root(self):
        return self._repo.edit_root()

    def edit_targets(self):
        return self._repo.edit_targets()


@dataclass(frozen=True)
class RoleKeys:
    """Who may sign for a role and how many must: key ids (each a public key below) and a threshold."""

    keyids: tuple[str, ...]
    threshold: int = 1


def init_repository(folder: Path, *, public_keys: dict[str, Any], signers: dict[str, Any],
                    top: dict[str, RoleKeys], roles: dict[str, RoleKeys], expiry: dt.timedelta,
                    now: dt.datetime | None = None) -> TrustRepository:
    """A new trust repository in ``folder``: root v1 naming ``top`` (root, targets, snapshot,
    timestamp), targets v1 delegating ``roles``, then snapshot and timestamp."""
    from tuf.api.metadata import DelegatedRole, Delegations

    if latest_version(folder, "root"):
        raise InputError(f"{folder}: already holds TUF root metadata ({latest_version(folder, 'root')}.root.json); "
                         "change it with `reappreg registry keys` commands, never by starting over")
    missing_roles = sorted(set(TOP_ROLES) - set(top)) + sorted(set(ROLES) - set(roles))
    if missing_roles:
        raise InputError(f"every role needs keys: none given for {', '.join(missing_roles)}")
    repo = TrustRepository(folder, signers, expiry, now or utcnow())
    with repo.edit_root() as root:
        for name, spec in top.items():
            for keyid in spec.keyids:
                root.add_key(tuf_key(public_keys[keyid], keyid), name)
            root.roles[name].threshold = spec.threshold
    with repo.edit_targets() as targets:
        keys = {kid: tuf_key(public_keys[kid], kid) for spec in roles.values() for kid in spec.keyids}
        targets.delegations = Delegations(keys=keys, roles={
            name: DelegatedRole(name=name, keyids=list(spec.keyids), threshold=spec.threshold, terminating=True,
                                paths=[f"{name}/*"]) for name, spec in roles.items()})
    repo.publish()
    return repo


def set_role_keys(repo: TrustRepository, role: str, spec: RoleKeys, public_keys: dict[str, Any]) -> None:
    """A new targets version in which ``role`` is ``spec`` (keys added or removed, threshold changed),
    then a new snapshot and timestamp. A key absent from the new version cannot sign under it."""
    from tuf.api.metadata import DelegatedRole

    if role not in ROLES:
        raise InputError(f"unknown role {role!r}; the registry's roles are {', '.join(ROLES)}")
    with repo.edit_targets() as targets:
        delegations = targets.delegations
        for keyid in spec.keyids:
            if keyid not in delegations.keys:
                delegations.keys[keyid] = tuf_key(public_keys[keyid], keyid)
        delegations.roles[role] = DelegatedRole(name=role, keyids=list(spec.keyids), threshold=spec.threshold,
                                                terminating=True, paths=[f"{role}/*"])
        used = {k for r in delegations.roles.values() for k in r.keyids}
        for keyid in [k for k in delegations.keys if k not in used]:
            del delegations.keys[keyid]
    repo.publish()


def set_top_role_keys(repo: TrustRepository, role: str, spec: RoleKeys, public_keys: dict[str, Any]) -> None:
    """A new root version in which TUF's top-level ``role`` is ``spec`` (a root rotation: signed by a
    threshold of the old root's keys and of the new one's), then snapshot and timestamp."""
    if role not in TOP_ROLES:
        raise InputError(f"unknown top-level role {role!r}; TUF's are {', '.join(TOP_ROLES)}")
    with repo.edit_root() as root:
        for keyid in list(root.roles[role].keyids):
            if keyid not in spec.keyids:
                root.revoke_key(keyid, role)
        for keyid in spec.keyids:
            root.add_key(tuf_key(public_keys[keyid], keyid), role)
        root.roles[role].threshold = spec.threshold
    if not repo.staged:
        repo.publish()


def renew(repo: TrustRepository) -> None:
    """New versions of targets, snapshot and timestamp (same content, new expiry)."""
    with repo.edit_targets():
        pass
    repo.publish()


__all__ = ["PUBLISHED_FIELD", "ROLES", "RoleKeys", "TOP_ROLES", "TrustRepository", "init_repository", "iso",
           "latest_version", "parse_time", "renew", "role_file", "set_role_keys", "set_top_role_keys", "tuf_key", "utcnow"]
