"""The signed, append-only alias history of a registered model, and the store bookkeeping that serialises it.

History. Each entry is a DSSE envelope over ``{seq, name, alias, from, to, kind, by, at,
reason, ...}`` stored as the registered-model tag ``reappreg.history.<seq>``; ``prev`` is the
sha256 of the previous envelope, so an entry cannot be edited, reordered or inserted without
a key. The replayed chain IS the alias state (:meth:`History.signed_state`).

Memory. A chain cut back (its newest entries deleted) still verifies entry by entry; only a
reader that saw it longer can tell. :class:`HeadMemory` is this clone's memory of every
chain's head per store, shared by ``verify``, ``pull``, ``watch`` and every writer: a chain
shorter than, or diverging from, a remembered head is a problem for all of them, and a
chain with any problem is never extended (:func:`append` raises :class:`ChainBroken`).

Bookkeeping. Two kinds of registered models exist only to make the store serialise writers:
the promotion lock ``<name>.reappreg-lock`` and the per-entry claims
``<name>.reappreg-lock.entry-<seq>``. They are recognised by structure, not by name alone
(:func:`bookkeeping_kind`): a declared model's lock name, created with its kind tag, holding no
version and no alias. Anything else named like one is an ordinary model that ``verify`` counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reappreg.errors import ReappregError
from reappreg.trust.keys import SignatureInvalid, SigningKey, sign_statement
from reappreg.trust import Trust, TrustVersion, trust_version_of
from reappreg.trust.repository import parse_time, utcnow

HISTORY_PREFIX = "reappreg.history."
HISTORY_TYPE = "https://github.com/reappreg/reappreg/promotion/v1"
LOCK_SUFFIX = ".reappreg-lock"
KIND_TAG = "reappreg.kind"
LOCK_KIND = "promotion-lock"
CLAIM_KIND = "history-claim"
# The role whose keys sign each kind of entry (trust metadata: reappreg.trust).
KIND_ROLES = {"register": "registration", "promote": "promotion", "accept": "acceptance", "restore": "enforcement",
              "seal": "enforcement"}


class ChainRace(ReappregError):
    """Another writer extended the signed history first: this entry would fork the chain."""

    exit_code = 1


class ChainBroken(ReappregError):
    """The signed history does not verify (or is shorter than this clone saw): nothing is appended to it."""

    exit_code = 1


class AliasMoved(ReappregError):
    """Another promotion (or a UI edit) moved the alias between our read and our write."""

    exit_code = 1


def lock_name(name: str) -> str:
    # One lock per model, not per alias: the history's entry numbers are per model.
    return f"{name}{LOCK_SUFFIX}"


def claim_name(name: str, seq: int) -> str:
    return f"{name}{LOCK_SUFFIX}.entry-{seq:06d}"


def _lock_owner(name: str) -> tuple[str, str] | None:
    """(model, kind) when ``name`` is spelled like a lock or a claim of ``model``."""
    if name.endswith(LOCK_SUFFIX):
        return name[: -len(LOCK_SUFFIX)], LOCK_KIND
    head, sep, tail = name.rpartition(f"{LOCK_SUFFIX}.entry-")
    if sep and tail.isdigit():
        return head, CLAIM_KIND
    return None


def bookkeeping_kind(model: Any, declared: set[str], *, has_versions: bool) -> str | None:
    """``LOCK_KIND``/``CLAIM_KIND`` when ``model`` is a lock or claim this registry made (a
    declared model's lock name, its kind tag, no version, no alias); None for an ordinary model."""
    owner = _lock_owner(model.name)
    if owner is None or owner[0] not in declared:
        return None
    tags = dict(model.tags or {})
    if tags.get(KIND_TAG) != owner[1] or has_versions or (model.aliases or {}):
        return None
    return owner[1]


def looks_like_bookkeeping(name: str) -> bool:
    """Spelled like a lock or a claim (whether or not it is one: see :func:`bookkeeping_kind`)."""
    return _lock_owner(name) is not None


# --------------------------------------------------------------------------- the chain


@dataclass
class HistoryEntry:
    seq: int
    body: dict[str, Any]
    digest: str
    signer: str
    trust: TrustVersion | None = None


@dataclass
class History:
    name: str
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
            if entry.body.get("kind") == "seal":
                continue  # a key change sealed the chain; no alias moved
            to = entry.body.get("to")
            state[str(entry.body.get("alias"))] = None if to is None else str(to)
        return state

    @property
    def head(self) -> tuple[int, str]:
        return (self.entries[-1].seq, self.entries[-1].digest) if self.entries else (0, "")

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class HeadMemory:
    """This clone's memory of each model's signed-history head at one store (``uri``), kept in
    ``path`` (gitignored, beside the local key; None: remember nothing, e.g. a library caller).

    A chain shorter than the head remembered, or holding another entry at that position, is a
    problem (:meth:`problems`); a chain that verified is remembered when it is longer
    (:meth:`remember`), never shorter, under a file lock so concurrent commands merge."""

    path: Path | None
    uri: str
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None, uri: str) -> HeadMemory:
        if path is None or not path.is_file():
            return cls(path, uri)
        everything = json.loads(path.read_text(encoding="utf-8")) or {}
        return cls(path, uri, dict(everything.get(uri, {})))

    def problems(self, history: History) -> list[str]:
        before = self.seen.get(history.name)
        if not before:
            return []
        seq, digest = int(before["seq"]), str(before["digest"])
        entries = {e.seq: e.digest for e in history.entries}
        if len(history.entries) < seq:
            return [f"history has {len(history.entries)} signed entries, fewer than the {seq} this clone saw before "
                    f"(head #{seq} {digest[:12]}): entries were deleted (truncation)"]
        if entries.get(seq) != digest:
            return [f"history entry #{seq} is not the one this clone saw before ({digest[:12]}): the chain was rewritten"]
        return []

    def remember(self, history: History) -> None:
        """Keep ``history``'s head if it verified and is longer than the one remembered."""
        if self.path is None or history.problems or not history.entries:
            return
        from filelock import FileLock

        from reappreg.io import write_json

        seq, digest = history.head
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{self.path}.lock", timeout=60):
            everything = json.loads(self.path.read_text(encoding="utf-8")) if self.path.is_file() else {}
            heads = everything.setdefault(self.uri, {})
            if int(heads.get(history.name, {}).get("seq", 0)) < seq:
                heads[history.name] = {"seq": seq, "digest": digest}
                write_json(self.path, everything)
            self.seen = dict(heads)


@dataclass(frozen=True)
class Chain:
    """What reading and extending a model's signed history needs: the trust deciding whose
    signatures count for which kind of entry, and this clone's memory of the heads it saw."""

    trust: Trust
    memory: HeadMemory


def _unverified_kind(value: str) -> str:
    from securesystemslib.dsse import Envelope

    try:
        return str(json.loads(Envelope.from_dict(json.loads(value)).payload).get("kind"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "?"


def read_history(client: Any, name: str, chain: Chain) -> History:
    """Every history entry of ``name``, checked: signed by its kind's role under the trust version it
    names, contiguous numbers, hash chain, right model, versions and times that never go back (see
    :func:`order_problems`), and no shorter than (nor diverging from) the head this clone remembers."""
    model = client.get_registered_model(name)
    raw = sorted((k, v) for k, v in (model.tags or {}).items() if k.startswith(HISTORY_PREFIX))
    history = History(name)
    prev = ""
    for i, (key, value) in enumerate(raw, start=1):
        seq_text = key.removeprefix(HISTORY_PREFIX)
        if not seq_text.isdigit() or int(seq_text) != i:
            history.problems.append(f"history entry {key}: expected number {i} (entries missing or inserted)")
        digest = hashlib.sha256(value.encode("utf-8")).hexdigest()
        kind = _unverified_kind(value)
        if kind not in KIND_ROLES:
            history.problems.append(f"history entry {key}: unknown kind {kind!r}")
            prev = digest
            continue
        try:
            # The role is the signed kind's: a kind changed without a key breaks the signature.
            body, signers = chain.trust.open(value.encode("utf-8"), role=KIND_ROLES[kind])
        except SignatureInvalid as exc:
            history.problems.append(f"history entry {key} ({kind}): {exc}")
            prev = digest
            continue
        if body.get("_type") != HISTORY_TYPE or body.get("name") != name or body.get("seq") != i:
            history.problems.append(f"history entry {key}: signed for {body.get('name')!r} #{body.get('seq')!r}, not {name} #{i}")
        if body.get("prev") != prev:
            history.problems.append(f"history entry {key}: chain broken (prev {str(body.get('prev'))[:12]} != {prev[:12]})")
        history.problems += [f"history entry {key}: {p}" for p in order_problems(body, history.entries, chain.trust)]
        history.entries.append(HistoryEntry(i, body, digest, "; ".join(s.describe() for s in signers),
                                            trust_version_of(body)))
        prev = digest
    history.problems += chain.memory.problems(history)
    return history


def order_problems(body: dict[str, Any], before: list[HistoryEntry], trust: Trust, *,
                   now: Any = None) -> list[str]:
    """Why ``body`` cannot stand after ``before``: its trust version goes back from the entry before it
    (same origin), its signed time goes back or lies beyond this clock plus the allowed skew, it names
    a targets version a newer one had already replaced at the time it claims, or one that had expired."""
    problems: list[str] = []
    version = trust_version_of(body)
    try:
        at = parse_time(body.get("at"))
    except (TypeError, ValueError):
        return [f"its time {body.get('at')!r} is not a time"]
    now = now or utcnow()
    last = before[-1] if before else None
    if last is not None:
        if last.trust is not None and version is not None and last.trust.origin == version.origin and \
                (version.root, version.targets) < (last.trust.root, last.trust.targets):
            problems.append(f"signed under {version}, older than {last.trust} of entry #{last.seq}: trust versions never "
                            "go back along a chain")
        try:
            if at < parse_time(last.body.get("at")):
                problems.append(f"dated {body.get('at')} (position #{last.seq + 1}), before entry #{last.seq} "
                                f"({last.body.get('at')}): times never go back along a chain")
        except (TypeError, ValueError):
            pass
    if at > now + trust.skew:
        problems.append(f"dated {body.get('at')}, beyond this clock ({now.isoformat()}) plus the allowed skew "
                        f"({trust.skew.total_seconds():g} s)")
    if version is not None and version.origin in trust.origins:
        origin = trust.origins[version.origin]
        replaced = origin.published(version.targets + 1)
        if replaced is not None and at > replaced:  # same second: not after (times are kept to the second)
            problems.append(f"signed under {version} but dated {body.get('at')}, after targets v{version.targets + 1} "
                            f"replaced it ({replaced.isoformat()}): a key's authority ends with the version that drops it")
        try:
            expires = origin.expires(version.root, version.targets)
            if at > expires:
                problems.append(f"signed under {version}, which expired on {expires.isoformat()}, but dated {body.get('at')}")
        except SignatureInvalid:
            pass  # reported by the signature check
    return problems


def require_intact(history: History, action: str) -> None:
    """Refuse to act on a chain that does not verify: a writer must never sign on top of one."""
    if history.problems:
        raise ChainBroken(f"{history.name}: {action} refused: the signed history does not verify "
                          f"({'; '.join(history.problems[:5])}); nothing was written. A chain with a problem is "
                          "never extended: find out who changed it (`reappreg registry verify`) before acting")


# --------------------------------------------------------------------------- the store's serialisation


def _age_s(model: Any) -> float:
    """Seconds since the store created ``model`` (its own clock, not a time the creator wrote: a lock
    whose description claims a far-future time is as old as the store says it is)."""
    created = getattr(model, "creation_timestamp", None)
    if not isinstance(created, (int, float)) or created <= 0:
        return float("inf")  # no store time at all: nothing says it is fresh
    return time.time() - created / 1000.0


def _contended(exc: Any) -> bool:
    # The sqlite store answers a lost race with "not found" when the winner released the lock
    # between its insert and its look-up.
    return exc.error_code in ("RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST") or "database is locked" in str(exc)


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
                                           tags={KIND_TAG: LOCK_KIND})
            return lock
        except MlflowException as exc:
            if not _contended(exc):
                raise ReappregError(f"{name}@{alias}: cannot take the promotion lock ({exc.error_code}: {exc.message}); "
                                    "nothing was changed") from exc
        try:
            # The lease runs on the store's creation time: the holder's own "at" is for people only.
            if _age_s(client.get_registered_model(lock)) > stale_after_s:
                _delete_bookkeeping(client, lock)
                continue
        except MlflowException:
            pass  # released (or being replaced) meanwhile: try again
        if time.monotonic() > deadline:
            raise ReappregError(f"{name}@{alias}: another promotion has held the lock for more than {timeout_s:g}s; nothing was changed")
        sleep(pause)
        pause = min(pause * 2, 1.0)


def _delete_bookkeeping(client: Any, lock: str) -> None:
    """Delete a lock or claim, but never a model that holds versions (one an attacker named like a lock)."""
    if client.search_model_versions(f"name='{lock}'", max_results=1):
        raise ReappregError(f"{lock}: named like a registry lock but holds model versions; not deleted (it is a "
                            "finding of `reappreg registry verify`)")
    client.delete_registered_model(lock)


def release_lock(client: Any, lock: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.delete_registered_model(lock)
    except MlflowException as exc:
        # Someone deleted our lock under us: the signed chain (entry claims) still decided the outcome,
        # so there is nothing left to release.
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise


def retract_entry(client: Any, name: str, tag: str) -> None:
    """Remove the entry just written (its alias move failed): no signed record of a move that did not happen."""
    client.delete_registered_model_tag(name, tag)


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


def append(client: Any, name: str, body: dict[str, Any], keys: list[SigningKey], chain: Chain, *,
           stale_after_s: float = 300.0, unmoved_since: int | None = None) -> str:
    """Sign and store the next entry; returns its tag.

    Signed by ``keys`` under the current trust version in which they hold the role of the entry's
    kind (named in the entry), dated now. Refused (:class:`ChainBroken`) when the chain as it
    stands does not verify, or when this entry could not stand after it (its time or trust version
    would go back): a writer never signs on top of replayed, reordered or truncated entries. The lock serialises promoters, but a lock
    can be deleted under them, and a registration appends without it. So the entry that extends
    the head is decided by the store itself: claiming entry ``seq`` creates the registered model
    ``<name>.reappreg-lock.entry-<seq>``, which succeeds for one writer at a time; holding it, the
    writer checks the number is still free, writes its entry, then lets the claim go. Whoever
    loses gets :class:`ChainRace` (exit 1) and writes nothing; the chain cannot fork.
    ``unmoved_since``: compare-and-set on the signed state too (an entry numbered above it that
    acted on the same alias means the alias moved under the caller).
    """
    from mlflow.exceptions import MlflowException

    history = read_history(client, name, chain)
    action = f"a '{body.get('kind')}' entry for alias '{body.get('alias')}'"
    require_intact(history, action)
    chain.memory.remember(history)
    seq = history.head[0] + 1
    prev = history.entries[-1].digest if history.entries else ""
    version = chain.trust.current_for([k.keyid for k in keys], KIND_ROLES[str(body.get("kind"))])
    signed = {"_type": HISTORY_TYPE, "seq": seq, "name": name, "prev": prev, **body, "trust": version.as_dict()}
    late = order_problems(signed, history.entries, chain.trust)
    if late:
        raise ChainBroken(f"{name}: {action} refused: it could not stand after the chain ({'; '.join(late)}); nothing was written")
    envelope = sign_statement(signed, keys).decode("utf-8")
    claim = claim_name(name, seq)
    try:
        client.create_registered_model(claim, description=hashlib.sha256(envelope.encode()).hexdigest(),
                                       tags={KIND_TAG: CLAIM_KIND})
    except MlflowException as exc:
        if not _contended(exc):
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
            moved = sorted(n for n, alias in _aliases_moved_since(tags, unmoved_since).items()
                           if alias in (body.get("alias"), "(unreadable entry)"))
            if moved:
                raise AliasMoved(f"alias moved under you: history entry #{moved[-1]} acted on {name}@{body.get('alias')} "
                                 "after this promotion read it; nothing was recorded. Re-run to act on the new state.")
        client.set_registered_model_tag(name, tag, envelope)
    finally:
        release_lock(client, claim)
    # Not remembered here: the caller may still retract the entry (its alias move failed). Callers
    # call :func:`settle` once the whole operation succeeded.
    return tag


def settle(client: Any, name: str, chain: Chain) -> None:
    """Remember the chain's head after an operation that appended to it succeeded."""
    chain.memory.remember(read_history(client, name, chain))


def _break_orphan_claim(client: Any, name: str, seq: int, claim: str, stale_after_s: float) -> None:
    """A claim whose entry never appeared (a writer killed between claim and tag, or a squatter) blocks the
    chain: once older than the lease by the store's clock, a key holder (we are about to sign) removes it."""
    from mlflow.exceptions import MlflowException

    try:
        tags = client.get_registered_model(name).tags or {}
        written = f"{HISTORY_PREFIX}{seq:06d}" in tags  # its writer died before letting the claim go
        if written or _age_s(client.get_registered_model(claim)) > stale_after_s:
            _delete_bookkeeping(client, claim)
    except (MlflowException, ReappregError):
        pass  # taken or removed meanwhile, or not ours to delete: the caller re-runs either way


def history_tags_count(client: Any, name: str) -> int:
    tags = client.get_registered_model(name).tags or {}
    return sum(1 for k in tags if k.startswith(HISTORY_PREFIX))


__all__ = ["AliasMoved", "Chain", "ChainBroken", "ChainRace", "HISTORY_PREFIX", "HISTORY_TYPE", "HeadMemory", "History",
           "HistoryEntry", "LOCK_SUFFIX", "acquire_lock", "append", "bookkeeping_kind", "claim_name", "lock_name",
           "looks_like_bookkeeping", "read_history", "release_lock", "require_intact", "retract_entry", "settle"]
