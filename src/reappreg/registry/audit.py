"""The registry-wide audit behind ``registry verify``: every alias, its version's signed gates, the history.

Aliases are derived, not read: the signed promotion history, replayed, says where every
alias of a model points (``History.signed_state``). An alias that points elsewhere, that the
history never set, or that the history set and is gone, is a violation however valid the
version it points at. A history shorter than, or diverging from, a head this clone saw
before is a history problem (truncation cannot be seen from the chain alone; the heads file
is this clone's memory of it). Every registered model is read, page by page; models not
declared in ``registry/models.yaml`` are listed and never counted as verified.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reappreg.registry.declarations import RegistryDecl
from reappreg.registry.keys import Keyring
from reappreg.registry.promotion import History, is_lock_model, read_history
from reappreg.registry.verification import VersionCheck, gates_for, is_gated, verify_version


@dataclass
class AliasFinding:
    name: str
    alias: str
    version: str
    check: VersionCheck
    history_note: str
    declared: bool = True
    ungated: bool = False
    forced: bool = False
    # Where the signed history says this alias points (None: removed); differs -> violation.
    signed_to: str | None = None
    signed: bool = True

    @property
    def failed_gates(self):
        return self.check.failed_gates if self.check is not None else []

    @property
    def violation(self) -> bool:
        return self.declared and (not self.signed or self.check is None or not self.check.ok)

    def describe(self) -> str:
        head = f"{self.name}@{self.alias} -> {'v' + self.version if self.version else 'no version'}"
        if not self.declared:
            return f"{head}: model not declared in the registry; no gates known ({self.history_note})"
        unsigned = ""
        if not self.signed:
            said = "no signed history entry" if self.signed_to is None and self.history_note == "unset" else (
                f"the signed history says {'v' + self.signed_to if self.signed_to else 'removed'}")
            unsigned = (f"NOT the signed alias state ({said}): only a signed promotion moves an alias, and "
                        "`registry watch --enforce` restores the signed state")
        if self.check is None:
            return f"{head}: {unsigned} ({self.history_note})"
        signer = self.check.signer.describe() if self.check.signer and self.check.evidence is not None else "no valid signature"
        gates = ", ".join(f"{c.gate}={'pass' if c.passed else 'FAIL'}" for c in self.check.gates)
        kind = "ungated alias; " if self.ungated else ""
        if self.check.ok and not unsigned:
            return f"{head}: passes its signed gates [{gates}] ({kind}signed by {signer}; {self.history_note})"
        failed = f"FAILS {self.check.problems()}" if not self.check.ok else f"passes its signed gates [{gates}]"
        return f"{head}: {failed}{'; ' + unsigned if unsigned else ''} ({kind}{signer}; {self.history_note})"


@dataclass
class Audit:
    findings: list[AliasFinding] = field(default_factory=list)
    history_problems: list[str] = field(default_factory=list)
    models: int = 0
    undeclared: list[str] = field(default_factory=list)
    # The signed history head of every model whose chain checked out (for the next audit).
    heads: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def verified(self) -> list[AliasFinding]:
        """Aliases of declared models that equal the signed state and pass their signed gates."""
        return [f for f in self.findings if f.declared and not f.violation]

    @property
    def violations(self) -> list[AliasFinding]:
        return [f for f in self.findings if f.violation]


def alias_rows(result: Audit) -> dict[str, Any]:
    """The audit as plain data (the registration receipt, the report): one row per alias, and the verdict
    `registry verify` would print (it exits 1 on any violation or history problem, or when nothing verified)."""
    rows = [{"name": f.name, "alias": f.alias, "version": f.version or None, "declared": f.declared,
             "verified": f.declared and not f.violation, "signed_state": f.signed,
             "failed_gates": [c.gate for c in f.failed_gates], "detail": f.describe()} for f in result.findings]
    passes = bool(result.verified) and not result.violations and not result.history_problems
    return {"aliases": rows, "verify_passes": passes, "verified": len(result.verified),
            "violations": len(result.violations), "history_problems": list(result.history_problems),
            "undeclared_models": list(result.undeclared), "checked": "signature, bytes, tags against the signed copy, "
            "gates from the signed evidence, alias against the replayed signed history (as `reappreg registry verify`)"}


def history_note(history: History, alias: str, version: str) -> tuple[str, bool]:
    last = history.last_for(alias)
    if last is None:
        return "unset", False
    body = last.body
    forced = bool(body.get("forced"))
    what = ("forced promotion (recorded)" if forced else {"enforce": "enforced", "register": "registered"}.get(
        str(body.get("kind")), "promoted"))
    return f"{what} by {body.get('by')} at {body.get('at')}, signed history #{last.seq}", forced


def check_alias(client: Any, decl: RegistryDecl, keyring: Keyring, name: str, alias: str, version: str, *,
                tracking_uri: str, history: History | None = None, cache: dict | None = None) -> AliasFinding:
    mv = client.get_model_version(name, version)
    gates = gates_for(decl, name, alias)
    key = (name, str(version), alias in decl.ungated_aliases)
    if cache is not None and key in cache:
        check = cache[key]
    else:
        check = verify_version(mv, gates, keyring, tracking_uri=tracking_uri, gated=is_gated(decl, name, alias))
        if cache is not None:
            cache[key] = check
    history = history if history is not None else read_history(client, name, keyring)
    note, forced = history_note(history, alias, str(version))
    state = history.signed_state()
    signed_to = state.get(alias)
    signed = alias in state and signed_to == str(version)
    if alias in decl.ungated_aliases and signed:
        note = f"ungated; {note}"
    return AliasFinding(name, alias, str(version), check, note, declared=name in decl.models,
                        ungated=alias in decl.ungated_aliases, forced=forced, signed_to=signed_to, signed=signed)


PAGE_SIZE = 1000  # MLflow's largest page; every page is read


def registered_models(client: Any) -> list[Any]:
    """Every registered model, page by page (a page of decoys must not hide the real ones)."""
    models, token = [], None
    while True:
        page = client.search_registered_models(max_results=PAGE_SIZE, page_token=token)
        models += list(page)
        token = getattr(page, "token", None)
        if not token:
            return models


def check_heads(history: History, name: str, seen: dict[str, Any]) -> list[str]:
    """Problems if the chain is shorter than, or diverges from, the head this clone saw before."""
    before = seen.get(name)
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


def audit(client: Any, decl: RegistryDecl, keyring: Keyring, *, tracking_uri: str,
          seen_heads: dict[str, Any] | None = None) -> Audit:
    """Every alias of every registered model (UI-set ones included), each version fully verified,
    each declared model's aliases compared with its replayed signed history."""
    result = Audit()
    cache: dict = {}
    seen_heads = {} if seen_heads is None else seen_heads
    for model in registered_models(client):
        if is_lock_model(model.name):
            continue
        result.models += 1
        if model.name not in decl.models:
            result.undeclared.append(model.name)
        history = read_history(client, model.name, keyring)
        result.history_problems += [f"{model.name}: {p}" for p in history.problems]
        result.history_problems += [f"{model.name}: {p}" for p in check_heads(history, model.name, seen_heads)]
        if history.entries and not history.problems:
            seq, digest = history.head
            result.heads[model.name] = {"seq": seq, "digest": digest}
        aliases = dict(model.aliases or {})
        for alias, version in sorted(aliases.items()):
            result.findings.append(check_alias(client, decl, keyring, model.name, alias, str(version), tracking_uri=tracking_uri,
                                               history=history, cache=cache))
        if model.name in decl.models:
            for alias, signed_to in sorted(history.signed_state().items()):
                if signed_to is not None and alias not in aliases:
                    last = history.last_for(alias)
                    result.findings.append(AliasFinding(model.name, alias, "", None,
                                                        f"alias missing; signed history #{last.seq if last else '?'}",
                                                        signed_to=signed_to, signed=False))
    return result
