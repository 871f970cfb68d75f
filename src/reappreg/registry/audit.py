"""The registry-wide audit behind ``registry verify``: every alias, its version's signed gates, the history."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reappreg.registry.declarations import RegistryDecl
from reappreg.registry.keys import Keyring
from reappreg.registry.promotion import History, is_lock_model, read_history
from reappreg.registry.verification import VersionCheck, gates_for, verify_version


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

    @property
    def failed_gates(self):
        return self.check.failed_gates

    @property
    def violation(self) -> bool:
        return self.declared and not self.check.ok

    def describe(self) -> str:
        head = f"{self.name}@{self.alias} -> v{self.version}"
        if not self.declared:
            return f"{head}: model not declared in the registry; no gates known ({self.history_note})"
        signer = self.check.signer.describe() if self.check.signer and self.check.evidence is not None else "no valid signature"
        gates = ", ".join(f"{c.gate}={'pass' if c.passed else 'FAIL'}" for c in self.check.gates)
        kind = "ungated alias; " if self.ungated else ""
        if self.check.ok:
            return f"{head}: passes its signed gates [{gates}] ({kind}signed by {signer}; {self.history_note})"
        return f"{head}: FAILS {self.check.problems()} ({kind}{signer}; {self.history_note})"


@dataclass
class Audit:
    findings: list[AliasFinding] = field(default_factory=list)
    history_problems: list[str] = field(default_factory=list)
    models: int = 0

    @property
    def violations(self) -> list[AliasFinding]:
        return [f for f in self.findings if f.violation]


def history_note(history: History, alias: str, version: str) -> tuple[str, bool]:
    last = history.last_for(alias)
    if last is None:
        return "set outside `reappreg registry promote`: no signed history entry", False
    body = last.body
    if str(body.get("to")) != str(version):
        return f"set outside `reappreg registry promote`: signed history #{last.seq} says v{body.get('to')}", False
    forced = bool(body.get("forced"))
    what = "forced promotion (recorded)" if forced else ("enforced" if body.get("kind") == "enforce" else "promoted")
    return f"{what} by {body.get('by')} at {body.get('at')}, signed history #{last.seq}", forced


def check_alias(client: Any, decl: RegistryDecl, keyring: Keyring, name: str, alias: str, version: str, *,
                tracking_uri: str, history: History | None = None, cache: dict | None = None) -> AliasFinding:
    mv = client.get_model_version(name, version)
    gates = gates_for(decl, name, alias)
    key = (name, str(version), alias in decl.ungated_aliases)
    if cache is not None and key in cache:
        check = cache[key]
    else:
        check = verify_version(mv, gates, keyring, tracking_uri=tracking_uri)
        if cache is not None:
            cache[key] = check
    history = history if history is not None else read_history(client, name, keyring)
    note, forced = history_note(history, alias, str(version))
    if alias in decl.ungated_aliases:
        note = "ungated"
    return AliasFinding(name, alias, str(version), check, note, declared=name in decl.models,
                        ungated=alias in decl.ungated_aliases, forced=forced)


def audit(client: Any, decl: RegistryDecl, keyring: Keyring, *, tracking_uri: str) -> Audit:
    """Every alias of every registered model (UI-set ones included), each version fully verified."""
    result = Audit()
    cache: dict = {}
    for model in client.search_registered_models(max_results=1000):
        if is_lock_model(model.name):
            continue
        result.models += 1
        history = read_history(client, model.name, keyring)
        result.history_problems += [f"{model.name}: {p}" for p in history.problems]
        for alias, version in sorted((model.aliases or {}).items()):
            result.findings.append(check_alias(client, decl, keyring, model.name, alias, str(version), tracking_uri=tracking_uri,
                                               history=history, cache=cache))
    return result
