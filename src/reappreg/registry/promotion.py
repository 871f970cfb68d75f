"""Atomic, gated promotion, and every signed decision that moves (or keeps) an alias.

Compare-and-set. MLflow has no conditional alias write, so a promotion takes a lock that
the registry itself makes atomic (:func:`reappreg.registry.history.acquire_lock`: creating a
registered model succeeds for exactly one caller, on sqlite and on a server alike). Holding
it, the promotion re-reads the alias; if it no longer points where the caller saw it
(``expected``), the promotion stops with :class:`AliasMoved` and writes nothing. Otherwise it
appends a signed history entry (:mod:`.history`), moves the alias and releases the lock; if
moving the alias fails, the entry is deleted again, so no record is left for a promotion
that did not happen.

Decisions (:func:`record_decision`) are the same sequence for the watcher: accepting a UI
request (the alias stays where the person set it, now signed) or restoring the signed state
(the alias goes back, and the reason is tagged on the model and the version for the UI).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from types import EllipsisType
from typing import Any

from reappreg.errors import GateFailed, InputError
from reappreg.evidence.declarations import RegistryDecl, declared
from reappreg.registry.history import (
    AliasMoved,
    Chain,
    HeadMemory,
    acquire_lock,
    append,
    history_tags_count,
    release_lock,
    retract_entry,
    settle,
)
from reappreg.trust.keys import SigningKey
from reappreg.trust import Trust
from reappreg.registry.verification import VersionCheck, gates_for, get_version, is_gated, verify_version

# The tag a person sees in the UI on the model and on the version a request named.
REQUEST_TAG_PREFIX = "reappreg.request."


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


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
    declarations (which models, aliases and gates there are), the trust that decides whose
    signatures count for what, this clone's memory of every chain's head at this store, the
    key(s) this session signs with (None: a session that only reads) and the promotion lock's patience
    (``registry.promotion_lock_timeout_s``) and lease (``registry.promotion_lock_stale_s``).
    Opened once per command and shared by every action it takes, so all of them check against
    the same trust and the same memory, and honour the same lock."""

    client: Any
    decl: RegistryDecl
    trust: Trust
    keys: list[SigningKey] | None
    tracking_uri: str
    lock_timeout_s: float
    lock_stale_s: float
    memory: HeadMemory

    @property
    def chain(self) -> Chain:
        return Chain(self.trust, self.memory)

    def verify(self, name: str, version: str, alias: str | None) -> VersionCheck:
        """The full check of ``name``/``version`` under ``alias``'s gates."""
        mv = self.client.get_model_version(name, version)
        return verify_version(mv, gates_for(self.decl, name, alias), self.trust, tracking_uri=self.tracking_uri,
                              gated=is_gated(self.decl, name, alias))


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


def _signers(session: RegistrySession) -> list[SigningKey]:
    if not session.keys:
        raise InputError("this registry session holds no signing key; it can only read")
    return session.keys


def promote(session: RegistrySession, request: PromotionRequest) -> Promotion:
    """Point the alias at the version if its signed evidence passes the gates (or ``request.force``),
    compare-and-set against ``request.expected``, with an entry signed by ``session.key``."""
    client, decl = session.client, session.decl
    name, version, alias, reason, actor = request.name, request.version, request.alias, request.reason, request.actor
    declared(decl, name)
    if not reason.strip():
        raise InputError("promote: --reason must say why (it is recorded in the signed history)")
    keys = _signers(session)
    mv = get_version(client, name, version=version)
    head = history_tags_count(client, name)  # the chain as this promotion saw it
    seen = current_target(client, name, alias) if request.expected is ... else request.expected
    check = verify_version(mv, gates_for(decl, name, alias), session.trust, tracking_uri=session.tracking_uri,
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
                 "at": _now(), "reason": reason, "forced": forced,
                 "gates": [c.as_dict() for c in check.gates], "tampering": check.tampering,
                 "signed_by_registration": check.signer.keyid if check.signer else None}
        tag = append(client, name, entry, keys, session.chain, stale_after_s=session.lock_stale_s, unmoved_since=head)
        try:
            client.set_registered_model_alias(name, alias, str(version))
        except BaseException:
            retract_entry(client, name, tag)
            raise
    finally:
        release_lock(client, lock)
    settle(client, name, session.chain)
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


@dataclass(frozen=True)
class Decision:
    """What the registry decided about an alias: ``kind`` is ``accept`` (a UI request becomes the
    signed state) or ``restore`` (the signed state is put back); ``requested`` is the version the
    store's alias named (None: the alias was removed), ``signed_to`` what the signed state says,
    ``why`` the reason shown in the UI and recorded in the signed entry, ``check`` the requested
    version's verification (None when there was nothing to verify)."""

    kind: str
    alias: str
    requested: str | None
    signed_to: str | None
    why: str
    check: VersionCheck | None = None


def record_decision(session: RegistrySession, name: str, decision: Decision, *, actor: str) -> str:
    """Carry out ``decision`` under the lock, with a signed history entry; returns a note for people.

    Compare-and-set: when the store's alias no longer names ``decision.requested`` (the person
    changed it again, or another watcher acted), nothing is written and the next cycle decides."""
    client = session.client
    keys = _signers(session)
    alias = decision.alias
    head = history_tags_count(client, name)
    lock = acquire_lock(client, name, alias, holder=actor, timeout_s=session.lock_timeout_s,
                        stale_after_s=session.lock_stale_s)
    try:
        if current_target(client, name, alias) != decision.requested:
            return f"{name}@{alias} moved meanwhile; left for the next check"
        at = _now()
        to = decision.requested if decision.kind == "accept" else decision.signed_to
        check = decision.check
        entry = {"kind": decision.kind, "alias": alias, "from": decision.signed_to, "to": to, "by": actor, "at": at,
                 "reason": decision.why, "forced": False, "requested": decision.requested,
                 "gates": [c.as_dict() for c in check.gates] if check is not None else [],
                 "tampering": list(check.tampering) if check is not None else [],
                 "signed_by_registration": check.signer.keyid if check is not None and check.signer else None}
        tag = append(client, name, entry, keys, session.chain, stale_after_s=session.lock_stale_s, unmoved_since=head)
        try:
            if decision.kind == "restore":
                if to is None:
                    client.delete_registered_model_alias(name, alias)
                else:
                    client.set_registered_model_alias(name, alias, to)
        except BaseException:
            retract_entry(client, name, tag)
            raise
    finally:
        release_lock(client, lock)
    settle(client, name, session.chain)
    if decision.kind == "accept":
        note = (f"accepted the UI request {name}@{alias} -> v{decision.requested} (was {_v(decision.signed_to)}) at {at} "
                f"by {actor}: {decision.why} ({tag})")
        for k, v in {"by": f"{actor} (accepted UI request)", "at": at, "reason": decision.why, "forced": "false",
                     "history": tag}.items():
            client.set_model_version_tag(name, str(decision.requested), f"promotion.{alias}.{k}", v)
    else:
        note = (f"restored {name}@{alias} to {_v(decision.signed_to)} (the UI request named "
                f"{_v(decision.requested)}) at {at} by {actor}: {decision.why} ({tag})")
    client.set_registered_model_tag(name, f"{REQUEST_TAG_PREFIX}{alias}", note)
    if decision.requested is not None:
        client.set_model_version_tag(name, decision.requested, f"{REQUEST_TAG_PREFIX}{alias}", note)
    return note


__all__ = ["AliasMoved", "Decision", "Promotion", "PromotionRequest", "REQUEST_TAG_PREFIX", "RegistrySession",
           "current_target", "promote", "record_decision"]
