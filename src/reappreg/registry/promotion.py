"""Atomic, gated promotion and the signed, append-only promotion history.

Compare-and-set. MLflow has no conditional alias write, so a promotion takes a lock that
the registry itself makes atomic: creating a registered model named
``<name>.reappreg-lock`` succeeds for exactly one caller (a unique key in the store's
database, on sqlite and on a server alike, across hosts). Holding it, the promotion
re-reads the alias; if it no longer points where the caller saw it (``expected``), the
promotion stops with :class:`AliasMoved` ("alias moved under you") and writes nothing.
Otherwise it appends a signed history entry, moves the alias and releases the lock; if
moving the alias fails, the entry is deleted again, so no record is left for a
promotion that did not happen. A lock older than ``stale_after_s`` is the remains of a
killed process and is broken.

History. Each entry is a DSSE envelope (the promoter's key) over
``{seq, name, alias, from, to, by, at, reason, kind, forced, gates, prev}`` stored as the
registered-model tag ``reappreg.history.<seq>``; ``prev`` is the sha256 of the previous
envelope, so an entry cannot be edited, reordered or inserted without a key. The replayed chain IS the alias state
(:meth:`History.signed_state`): ``verify`` flags every alias that differs from it (another
version, an alias the chain never set, an alias the chain set that is gone), and a chain
shorter than, or diverging from, a head this clone has seen before (truncation).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any

from reappreg.errors import GateFailed, InputError, ReappregError
from reappreg.registry.declarations import RegistryDecl, declared
from reappreg.registry.keys import Keyring, SignatureInvalid, SigningKey, open_statement, sign_statement
from reappreg.registry.verification import VersionCheck, gates_for, get_version, is_gated, verify_version

HISTORY_PREFIX = "reappreg.history."
HISTORY_TYPE = "https://github.com/reappreg/reappreg/promotion/v1"
LOCK_SUFFIX = ".reappreg-lock"


class AliasMoved(ReappregError):
    """Another promotion (or a UI edit) moved the alias between our read and our write."""

    exit_code = 1


def lock_name(name: str) -> str:
    # One lock per model, not per alias: the history's entry numbers are per model.
    return f"{name}{LOCK_SUFFIX}"


def is_lock_model(name: str) -> bool:
    # The promotion lock and the per-entry claims (``<name>.reappreg-lock.entry-<seq>``): bookkeeping, not models.
    return name.endswith(LOCK_SUFFIX) or f"{LOCK_SUFFIX}.entry-" in name


def claim_name(name: str, seq: int) -> str:
    return f"{name}{LOCK_SUFFIX}.entry-{seq:06d}"


class ChainRace(ReappregError):
    """Another writer extended the signed history first: this entry would fork the chain."""

    exit_code = 1


def _age_s(model: Any) -> float:
    """Seconds since the store created ``model`` (its own clock, not a time the creator wrote: a lock
    whose description claims a far-future time is as old as the store says it is)."""
    created = getattr(model, "creation_timestamp", None)
    if not isinstance(created, (int, float)) or created <= 0:
        return float("inf")  # no store time at all: nothing says it is fresh
    return time.time() - created / 1000.0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def acquire_lock(client: Any, name: str, alias: str, *, holder: str, timeout_s: float, stale_after_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> str:
    """Create the lock model (atomic in the store); wait up to ``timeout_s``; break a lock older than ``stale_after_s``."""
    from mlflow.exceptions import MlflowException

    lock = lock_name(name)
    deadline = time.monotonic() + timeout_s
    pause = 0.05
    while True:
        try:
            client.create_registered_model(lock, description=json.dumps({"holder": holder, "pid": os.getpid(), "at": time.time()}),
                                           tags={"reappreg.kind": "promotion-lock"})
            return lock
        except MlflowException as exc:
            # Held by another promotion. (The sqlite store answers a lost race with "not found"
            # when the winner released the lock between its insert and its look-up.)
            contended = exc.error_code in ("RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST") or "database is locked" in str(exc)
            if not contended:
                raise ReappregError(f"{name}@{alias}: cannot take the promotion lock ({exc.error_code}: {exc.message}); "
                                    "nothing was changed") from exc
        try:
            # The lease runs on the store's creation time: the holder's own "at" is for people only.
            if _age_s(client.get_registered_model(lock)) > stale_after_s:
                client.delete_registered_model(lock)
                continue
        except MlflowException:
            pass  # released (or being replaced) meanwhile: try again
        if time.monotonic() > deadline:
            raise ReappregError(f"{name}@{alias}: another promotion has held the lock for more than {timeout_s:g}s; nothing was changed")
        sleep(pause)
        pause = min(pause * 2, 1.0)


def release_lock(client: Any, lock: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.delete_registered_model(lock)
    except MlflowException as exc:
        # Someone deleted our lock under us: the signed chain (entry claims) still decided the outcome,
        # so there is nothing left to release.
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise


# --------------------------------------------------------------------------- history


@dataclass
class HistoryEntry:
    seq: int
    body: dict[str, Any]
    digest: str
    signer: str


@dataclass
class History:
    entries: list[HistoryEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def last_for(self, alias: str) -> HistoryEntry | None:
        for entry in reversed(self.entries):
            if entry.body.get("alias") == alias:
                return entry
        return None

    def for_alias(self, alias: str) -> list[HistoryEntry]:
        return [e for e in self.entries if e.body.get("alias") == alias]

    def signed_state(self) -> dict[str, str | None]:
        """Every alias as the signed entries, replayed in order, leave it (None: removed).

        This is the alias state: an alias that differs from it was moved, set or deleted
        without a signature, however validly signed the version it points at is.
        """
        state: dict[str, str | None] = {}
        for entry in self.entries:
            to = entry.body.get("to")
            state[str(entry.body.get("alias"))] = None if to is None else str(to)
        return state

    @property
    def head(self) -> tuple[int, str]:
        return (self.entries[-1].seq, self.entries[-1].digest) if self.entries else (0, "")


def read_history(client: Any, name: str, keyring: Keyring) -> History:
    """Every history entry of ``name``, checked: trusted signature, contiguous numbers, hash chain, right model."""
    model = client.get_registered_model(name)
    raw = sorted((k, v) for k, v in (model.tags or {}).items() if k.startswith(HISTORY_PREFIX))
    history = History()
    prev = ""
    for i, (key, value) in enumerate(raw, start=1):
        seq_text = key.removeprefix(HISTORY_PREFIX)
        if not seq_text.isdigit() or int(seq_text) != i:
            history.problems.append(f"history entry {key}: expected number {i} (entries missing or inserted)")
        digest = hashlib.sha256(value.encode("utf-8")).hexdigest()
        try:
            body, signer = open_statement(value.encode("utf-8"), keyring)
        except SignatureInvalid as exc:
            history.problems.append(f"history entry {key}: {exc}")
            prev = digest
            continue
        if body.get("_type") != HISTORY_TYPE or body.get("name") != name or body.get("seq") != i:
            history.problems.append(f"history entry {key}: signed for {body.get('name')!r} #{body.get('seq')!r}, not {name} #{i}")
        if body.get("prev") != prev:
            history.problems.append(f"history entry {key}: chain broken (prev {str(body.get('prev'))[:12]} != {prev[:12]})")
        history.entries.append(HistoryEntry(i, body, digest, signer.describe()))
        prev = digest
    return history


def retract_entry(client: Any, name: str, tag: str) -> None:
    """Remove the entry just written (its alias move failed): no signed record of a move that did not happen."""
    client.delete_registered_model_tag(name, tag)


def append_entry(client: Any, name: str, body: dict[str, Any], key: SigningKey) -> str:
    """Sign and store the next history entry (callers hold the model's lock or, for a
    registration, own the version they create)."""
    return _append(client, name, body, key)


def _aliases_moved_since(tags: dict[str, str], after_seq: int) -> dict[int, str]:
    """``{seq: alias}`` of every history entry numbered above ``after_seq`` (read without verifying: any entry,
    signed or not, that names the alias means someone else acted on it)."""
    from securesystemslib.dsse import Envelope

    moved = {}
    for key, value in tags.items():
        number = key.removeprefix(HISTORY_PREFIX)
        if key.startswith(HISTORY_PREFIX) and number.isdigit() and int(number) > after_seq:
            try:
                moved[int(number)] = str(json.loads(Envelope.from_dict(json.loads(value)).payload).get("alias"))
            except (ValueError, KeyError, TypeError, AttributeError):
                moved[int(number)] = "(unreadable entry)"
    return moved


def _append(client: Any, name: str, body: dict[str, Any], key: SigningKey, *, stale_after_s: float = 300.0,
            unmoved_since: int | None = None) -> str:
    """Sign and store the next entry.

    The lock serialises promoters, but a lock can be deleted under them, and a registration
    appends without it. So the entry that extends the head is decided by the store itself:
    claiming entry ``seq`` creates the registered model ``<name>.reappreg-lock.entry-<seq>``,
    which succeeds for one writer at a time; holding it, the writer checks the number is
    still free, writes its entry, then lets the claim go. Whoever loses gets
    :class:`ChainRace` (exit 1) and writes nothing; the chain cannot fork.
    """
    from mlflow.exceptions import MlflowException

    seq = _next_seq(client, name)
    model = client.get_registered_model(name)
    prev_value = (model.tags or {}).get(f"{HISTORY_PREFIX}{seq - 1:06d}", "") if seq > 1 else ""
    body = {"_type": HISTORY_TYPE, "seq": seq, "name": name, "prev": hashlib.sha256(prev_value.encode()).hexdigest() if prev_value else "",
            **body}
    envelope = sign_statement(body, key).decode("utf-8")
    claim = claim_name(name, seq)
    try:
        client.create_registered_model(claim, description=hashlib.sha256(envelope.encode()).hexdigest(),
                                       tags={"reappreg.kind": "history-claim"})
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST") and "database is locked" not in str(exc):
            raise ReappregError(f"{name}: cannot claim history entry #{seq} ({exc.error_code}: {exc.message}); "
                                "nothing was recorded") from exc
        _break_orphan_claim(client, name, seq, claim, stale_after_s)
        raise ChainRace(f"{name}: another writer claimed history entry #{seq} first; nothing was recorded "
                        "(the alias is as that entry left it; re-run to act on the new state)") from None
    tag = f"{HISTORY_PREFIX}{seq:06d}"
    try:
        # Holding the claim, the number must still be free: a writer that claimed it before us wrote its
        # entry before it let the claim go, so a stale read of the head cannot overwrite that entry.
        tags = client.get_registered_model(name).tags or {}
        if tag in tags:
            raise ChainRace(f"{name}: another writer extended the signed history with entry #{seq} first; nothing was "
                            "recorded (re-run to act on the new state)")
        if unmoved_since is not None:
            # Compare-and-set on the signed state, not only on the alias (which its mover sets after its entry).
            moved = sorted(n for n, alias in _aliases_moved_since(tags, unmoved_since).items()
                           if alias in (body.get("alias"), "(unreadable entry)"))
            if moved:
                raise AliasMoved(f"alias moved under you: history entry #{moved[-1]} acted on {name}@{body.get('alias')} "
                                 "after this promotion read it; nothing was recorded. Re-run to act on the new state.")
        client.set_registered_model_tag(name, tag, envelope)
    finally:
        release_lock(client, claim)
    return tag


def _break_orphan_claim(client: Any, name: str, seq: int, claim: str, stale_after_s: float) -> None:
    """A claim whose entry never appeared (a writer killed between claim and tag, or a squatter) blocks the
    chain: once older than the lease by the store's clock, a key holder (we are about to sign) removes it."""
    from mlflow.exceptions import MlflowException

    try:
        tags = client.get_registered_model(name).tags or {}
        written = f"{HISTORY_PREFIX}{seq:06d}" in tags  # its writer died before letting the claim go
        if written or _age_s(client.get_registered_model(claim)) > stale_after_s:
            client.delete_registered_model(claim)
    except MlflowException:
        pass  # taken or removed meanwhile: the caller re-runs either way


def _next_seq(client: Any, name: str) -> int:
    tags = client.get_registered_model(name).tags or {}
    return 1 + sum(1 for k in tags if k.startswith(HISTORY_PREFIX))


# --------------------------------------------------------------------------- promotion


@dataclass
class Promotion:
    name: str
    version: str
    alias: str
    previous: str | None
    forced: bool
    check: VersionCheck
    history_tag: str


def current_target(client: Any, name: str, alias: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


@dataclass(frozen=True)
class RegistrySession:
    """The registry one command acts on, as it opened it: the client and the URI it talks to, the
    declarations (which models, aliases and gates there are), the keyring that decides whose
    signatures count, the key this session signs its history entries with (None: a session that
    only reads, e.g. a watch without enforcement) and the promotion lock's patience
    (``registry.promotion_lock_timeout_s``) and lease (``registry.promotion_lock_stale_s``).
    Opened once per command and shared by every promotion and enforcement it makes, so all of
    them check against the same trust and honour the same lock."""

    client: Any
    decl: RegistryDecl
    keyring: Keyring
    key: SigningKey | None
    tracking_uri: str
    lock_timeout_s: float
    lock_stale_s: float


@dataclass(frozen=True)
class PromotionRequest:
    """One promotion as its requester states it (``registry promote``'s arguments), recorded as
    stated in the signed history. ``expected`` is the version the requester believes ``alias``
    points at now (None: unset), by default what it points at when the promotion starts;
    ``force`` promotes despite failing gates (recorded loudly)."""

    name: str
    version: str
    alias: str
    reason: str
    actor: str
    expected: str | None | EllipsisType = ...
    force: bool = False


def promote(session: RegistrySession, request: PromotionRequest) -> Promotion:
    """Point the alias at the version if its signed evidence passes the gates (or ``request.force``),
    compare-and-set against ``request.expected``, with an entry signed by ``session.key``."""
    client, decl = session.client, session.decl
    name, version, alias, reason, actor = request.name, request.version, request.alias, request.reason, request.actor
    declared(decl, name)
    if not reason.strip():
        raise InputError("promote: --reason must say why (it is recorded in the signed history)")
    mv = get_version(client, name, version=version)
    head = _next_seq(client, name) - 1  # the chain as this promotion saw it
    seen = current_target(client, name, alias) if request.expected is ... else request.expected
    check = verify_version(mv, gates_for(decl, name, alias), session.keyring, tracking_uri=session.tracking_uri,
                           gated=is_gated(decl, name, alias))
    forced = not check.ok
    if forced and not request.force:
        raise GateFailed(f"{name} version {version} fails its gates for alias '{alias}': {check.problems()}. "
                         "Not promoted (use --force to override; it is recorded).")
    lock = acquire_lock(client, name, alias, holder=actor, timeout_s=session.lock_timeout_s,
                        stale_after_s=session.lock_stale_s)
    try:
        now = current_target(client, name, alias)
        if now != seen:
            raise AliasMoved(f"alias moved under you: {name}@{alias} points at {_v(now)}, not {_v(seen)} as when this "
                             f"promotion started; nothing was recorded. Re-run to promote v{version} over {_v(now)}.")
        entry = {"kind": "promote", "alias": alias, "from": seen, "to": str(version), "by": actor,
                 "at": _now().isoformat(timespec="seconds"), "reason": reason, "forced": forced,
                 "gates": [c.as_dict() for c in check.gates], "tampering": check.tampering,
                 "signed_by_registration": check.signer.keyid if check.signer else None}
        tag = _append(client, name, entry, session.key, stale_after_s=session.lock_stale_s, unmoved_since=head)
        try:
            client.set_registered_model_alias(name, alias, str(version))
        except BaseException:
            retract_entry(client, name, tag)
            raise
    finally:
        release_lock(client, lock)
    # Readable copies for the UI (the signed history is what verify reads).
    prefix = f"promotion.{alias}"
    for k, v in {"by": actor, "at": entry["at"], "reason": reason, "forced": str(forced).lower(), "history": tag}.items():
        client.set_model_version_tag(name, str(version), f"{prefix}.{k}", v)
    if forced:
        client.set_model_version_tag(name, str(version), f"{prefix}.failed_gates", check.problems())
        client.set_registered_model_tag(name, f"FORCED.{alias}",
                                        f"version {version} forced by {actor} at {entry['at']}: {reason} -- failed: {check.problems()}")
    return Promotion(name, str(version), alias, seen, forced, check, tag)


def _v(version: str | None) -> str:
    return "no version" if version is None else f"v{version}"


def record_enforcement(session: RegistrySession, name: str, *, alias: str, from_version: str | None, to_version: str | None,
                       actor: str, why: str) -> str:
    """Move (or remove) an alias under the lock, with a history entry signed by ``session.key`` and a UI-visible tag."""
    client = session.client
    lock = acquire_lock(client, name, alias, holder=actor, timeout_s=session.lock_timeout_s, stale_after_s=session.lock_stale_s)
    try:
        if current_target(client, name, alias) != from_version:
            return f"{name}@{alias} moved meanwhile; left alone"
        at = _now().isoformat(timespec="seconds")
        entry = {"kind": "enforce", "alias": alias, "from": from_version, "to": to_version, "by": actor, "at": at,
                 "reason": why, "forced": False, "gates": [], "tampering": [], "signed_by_registration": None}
        tag = _append(client, name, entry, session.key, stale_after_s=session.lock_stale_s)
        if to_version is None:
            if from_version is not None:
                client.delete_registered_model_alias(name, alias)
            action = f"removed {name}@{alias} (was {_v(from_version)})"
        else:
            client.set_registered_model_alias(name, alias, to_version)
            action = f"moved {name}@{alias} back from {_v(from_version)} to v{to_version}"
    finally:
        release_lock(client, lock)
    note = f"{action} at {at} by {actor}: {why} ({tag})"
    client.set_registered_model_tag(name, f"reappreg.enforced.{alias}", note)
    if from_version is not None:
        client.set_model_version_tag(name, from_version, f"reappreg.enforced.{alias}", note)
    return note
