"""The registry-wide audit behind ``registry verify``: every model, every alias, its version's signed gates, the history.

Aliases are derived, not read: the signed history, replayed, says where every alias of a
model points (``History.signed_state``). An alias in the store that differs from it (set or
removed in the MLflow UI, or by any store writer) is a *pending request*: not a violation,
not ok; the audit previews what the watcher will decide (:func:`~.requests.evaluate_request`).
A signed alias whose version no longer verifies is a violation. A history that does not
verify, or is shorter than (or diverges from) the head this clone remembers, is a history
problem.

Every registered model is read, page by page, and accounted for: declared models; the
registry's own locks and claims, recognised by structure (:func:`~.history.bookkeeping_kind`);
models named like a lock that are not one (they hold versions or aliases: a finding); and
undeclared models, listed and never counted as verified.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reappreg.registry.history import History, bookkeeping_kind, looks_like_bookkeeping, read_history
from reappreg.registry.promotion import Decision, RegistrySession
from reappreg.registry.verification import VersionCheck


@dataclass
class AliasFinding:
    name: str
    alias: str
    version: str                           # where the store's alias points ("" when the store has none)
    check: VersionCheck | None
    history_note: str
    declared: bool = True
    ungated: bool = False
    forced: bool = False
    # Where the signed history says this alias points (None: unset or removed); differs -> pending request.
    signed_to: str | None = None
    signed: bool = True
    # For a pending request: what the watcher will decide, previewed from the same signed evidence.
    request: Decision | None = None

    @property
    def failed_gates(self):
        return self.check.failed_gates if self.check is not None else []

    @property
    def pending(self) -> bool:
        """The store's alias differs from the signed state: a request nobody with a key decided yet."""
        return self.declared and not self.signed

    @property
    def violation(self) -> bool:
        """A signed alias whose version no longer verifies (tampering, bytes, or failing its gates)."""
        return self.declared and self.signed and (self.check is None or not self.check.ok)

    @property
    def ok(self) -> bool:
        return self.declared and self.signed and self.check is not None and self.check.ok

    def describe(self) -> str:
        head = f"{self.name}@{self.alias} -> {'v' + self.version if self.version else 'no version'}"
        if not self.declared:
            return f"{head}: model not declared in the registry; no gates known ({self.history_note})"
        if self.pending:
            said = f"v{self.signed_to}" if self.signed_to else "unset"
            what = (f"the watcher will ACCEPT it: {self.request.why}" if self.request and self.request.kind == "accept"
                    else f"the watcher will RESTORE {said}: {self.request.why}" if self.request else "")
            return (f"{head}: PENDING request (set in the store, not signed; the signed state is {said}); {what} "
                    f"({self.history_note})")
        signer = self.check.signer.describe() if self.check and self.check.signer and self.check.evidence is not None \
            else "no valid signature"
        gates = ", ".join(f"{c.gate}={'pass' if c.passed else 'FAIL'}" for c in self.check.gates) if self.check else ""
        kind = "ungated alias; " if self.ungated else ""
        if self.ok:
            return f"{head}: passes its signed gates [{gates}] ({kind}signed by {signer}; {self.history_note})"
        return f"{head}: FAILS {self.check.problems() if self.check else 'unchecked'} ({kind}{signer}; {self.history_note})"


@dataclass
class Audit:
    findings: list[AliasFinding] = field(default_factory=list)
    history_problems: list[str] = field(default_factory=list)
    models: int = 0                                          # every registered model, bookkeeping included
    bookkeeping: int = 0                                     # this registry's locks and claims (structure-checked)
    undeclared: list[str] = field(default_factory=list)
    model_problems: list[str] = field(default_factory=list)  # e.g. a "lock" that holds versions
    histories: dict[str, History] = field(default_factory=dict)

    @property
    def verified(self) -> list[AliasFinding]:
        """Aliases of declared models that equal the signed state and pass their signed gates."""
        return [f for f in self.findings if f.ok]

    @property
    def violations(self) -> list[AliasFinding]:
        return [f for f in self.findings if f.violation]

    @property
    def pending(self) -> list[AliasFinding]:
        return [f for f in self.findings if f.pending]

    @property
    def problems(self) -> int:
        return len(self.violations) + len(self.history_problems) + len(self.model_problems)


def alias_rows(result: Audit) -> dict[str, Any]:
    """The audit as plain data (the registration receipt, the report): one row per alias, and the verdict
    `registry verify` would print (it fails on any violation, pending request, history or model problem,
    or when nothing verified)."""
    rows = [{"name": f.name, "alias": f.alias, "version": f.version or None, "declared": f.declared,
             "verified": f.ok, "pending": f.pending, "signed_state": f.signed, "signed_to": f.signed_to,
             "failed_gates": [c.gate for c in f.failed_gates], "detail": f.describe()} for f in result.findings]
    passes = bool(result.verified) and not result.problems and not result.pending
    return {"aliases": rows, "verify_passes": passes, "verified": len(result.verified),
            "violations": len(result.violations), "pending": len(result.pending),
            "history_problems": list(result.history_problems), "model_problems": list(result.model_problems),
            "undeclared_models": list(result.undeclared), "checked": "signature, bytes, tags against the signed copy, "
            "gates from the signed evidence, alias against the replayed signed history (as `reappreg registry verify`)"}


def history_note(history: History, alias: str) -> tuple[str, bool]:
    last = history.last_for(alias)
    if last is None:
        return "unset", False
    body = last.body
    forced = bool(body.get("forced"))
    what = ("forced promotion (recorded)" if forced else {"enforce": "enforced", "register": "registered",
                                                           "accept": "accepted UI request", "restore": "restored"}.get(
        str(body.get("kind")), "promoted"))
    return f"{what} by {body.get('by')} at {body.get('at')}, signed history #{last.seq}", forced


def check_alias(session: RegistrySession, name: str, alias: str, version: str | None, *, history: History,
                cache: dict | None = None) -> AliasFinding:
    """The finding for the store's ``alias`` of ``name`` -> ``version`` (None: the store has no such alias)."""
    from reappreg.registry.requests import evaluate_request

    decl = session.decl
    check = None
    if version is not None:
        key = (name, str(version), alias in decl.ungated_aliases)
        if cache is not None and key in cache:
            check = cache[key]
        else:
            check = session.verify(name, str(version), alias)
            if cache is not None:
                cache[key] = check
    note, forced = history_note(history, alias)
    state = history.signed_state()
    signed_to = state.get(alias)
    signed = alias in state and signed_to == (None if version is None else str(version)) or (
        alias not in state and version is None)
    if alias in decl.ungated_aliases and signed:
        note = f"ungated; {note}"
    finding = AliasFinding(name, alias, "" if version is None else str(version), check, note, declared=name in decl.models,
                           ungated=alias in decl.ungated_aliases, forced=forced, signed_to=signed_to, signed=signed)
    if finding.pending:
        finding.request = evaluate_request(session, name, alias, finding.version or None, history, check=check)
    return finding


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


def _has_versions(client: Any, name: str) -> bool:
    return bool(client.search_model_versions(f"name='{name}'", max_results=1))


def audit(session: RegistrySession) -> Audit:
    """Every alias of every registered model (UI-set ones included), each version fully verified,
    each declared model's aliases compared with its replayed signed history."""
    client, decl = session.client, session.decl
    result = Audit()
    cache: dict = {}
    declared = set(decl.models)
    for model in registered_models(client):
        result.models += 1
        if looks_like_bookkeeping(model.name):
            has_versions = _has_versions(client, model.name)
            if bookkeeping_kind(model, declared, has_versions=has_versions) is not None:
                result.bookkeeping += 1
                continue
            if has_versions or model.aliases:
                result.model_problems.append(
                    f"{model.name}: named like a registry lock or claim but holds "
                    f"{'versions' if has_versions else ''}{' and ' if has_versions and model.aliases else ''}"
                    f"{'aliases ' + ', '.join(sorted(model.aliases)) if model.aliases else ''}: not bookkeeping; "
                    "it is checked like any other model and never skipped")
        if model.name not in declared:
            result.undeclared.append(model.name)
        history = read_history(client, model.name, session.chain)
        result.histories[model.name] = history
        result.history_problems += [f"{model.name}: {p}" for p in history.problems]
        aliases = {a: str(v) for a, v in (model.aliases or {}).items()}
        for alias, version in sorted(aliases.items()):
            result.findings.append(check_alias(session, model.name, alias, version, history=history, cache=cache))
        if model.name in declared:
            for alias, signed_to in sorted(history.signed_state().items()):
                if signed_to is not None and alias not in aliases:
                    result.findings.append(check_alias(session, model.name, alias, None, history=history, cache=cache))
    return result


def remember_heads(session: RegistrySession, result: Audit) -> None:
    """Keep every verified chain's head in this clone's memory (never a shorter one)."""
    for history in result.histories.values():
        session.memory.remember(history)


__all__ = ["AliasFinding", "Audit", "alias_rows", "audit", "check_alias", "registered_models", "remember_heads"]
