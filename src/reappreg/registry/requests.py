"""Promotion where people promote: an alias set in the MLflow UI is a request the registry decides.

People set aliases in the MLflow UI (or with ``MlflowClient.set_registered_model_alias``). Such
an alias differs from the signed alias state (the replayed history), so it is *pending*:
``verify`` lists it as pending, ``pull NAME@ALIAS`` refuses it. A watcher holding a key
(``registry watch --enforce``) decides each request from signed evidence only
(:func:`evaluate_request`):

* **accept**: the requested version passes its gates and the alias's UI policy
  (``ui_requests`` in ``registry/models.yaml``: ``never``, ``forward``, ``gated``) allows the
  move: a signed "accept" entry makes the alias where the person set it the signed state;
* **restore**: otherwise the signed state is put back, with a signed "restore" entry, and
  the reason is tagged on the model and the version (``reappreg.request.<alias>``), where
  the person who asked sees it in the UI.

Nothing unsigned decides an action (:func:`act`): a tag that differs from its signed value is
restored from the signed statement and reported as tampering; it never moves an alias. A
signed alias whose version stopped verifying (bytes replaced in the artifact store, a gate
added in git) is reported, and left where the signed history put it: only a key holder moves
it (``registry promote --reason``).
"""

from __future__ import annotations

from typing import Any

from reappreg.evidence.declarations import ui_policy
from reappreg.registry.history import History, read_history
from reappreg.registry.promotion import Decision, RegistrySession, record_decision
from reappreg.registry.verification import VersionCheck


def _v(version: str | None) -> str:
    return "no version" if version is None else f"v{version}"


def evaluate_request(session: RegistrySession, name: str, alias: str, requested: str | None, history: History,
                     check: VersionCheck | None = None) -> Decision:
    """Accept or restore the store's ``alias`` -> ``requested`` (None: removed), from signed evidence
    and the alias's declared UI policy only. ``check``: the requested version's verification when the
    caller has it already."""
    signed_to = history.signed_state().get(alias)
    policy = ui_policy(session.decl, alias)
    if requested is None:
        return Decision("restore", alias, None, signed_to,
                        f"removing an alias is not a request the registry accepts; the signed state is {_v(signed_to)} "
                        "(a key holder changes it with `reappreg registry promote --reason`)")
    if policy == "never":
        return Decision("restore", alias, requested, signed_to,
                        f"alias '{alias}' is set by the registry only (ui_requests: never, registry/models.yaml)")
    check = check if check is not None else session.verify(name, requested, alias)
    if not check.ok:
        return Decision("restore", alias, requested, signed_to, f"v{requested} fails its gates: {check.problems()}", check)
    if policy == "forward" and signed_to is not None and int(requested) <= int(signed_to):
        return Decision("restore", alias, requested, signed_to,
                        f"v{requested} is not newer than v{signed_to}: a UI request may only move '{alias}' forward "
                        f"(ui_requests: forward); a rollback needs `reappreg registry promote {name} {requested} "
                        f"--alias {alias} --reason ...`", check)
    gates = ", ".join(c.gate for c in check.gates)
    return Decision("accept", alias, requested, signed_to,
                    f"v{requested} passes its signed gates [{gates}] (ui_requests: {policy})", check)


def restore_signed_tags(session: RegistrySession, name: str, version: str, check: VersionCheck) -> list[str]:
    """Put back every readable tag that differs from (or was deleted from) its signed copy, and the
    description when it is not the signed card; returns what was restored. The signed statement is
    the source; the store's value never is."""
    for key, value in sorted(check.tag_changes.items()):
        session.client.set_model_version_tag(name, version, key, value)
    restored = sorted(check.tag_changes)
    if check.description_restore is not None:
        session.client.update_model_version(name, version, description=check.description_restore)
        restored.append("description")
    return restored


def act(session: RegistrySession, finding: Any, *, actor: str) -> list[str]:
    """What the watcher does about one finding (an ``AliasFinding``); returns notes for people.

    A pending request is decided (:func:`evaluate_request`, then :func:`record_decision`). A signed
    alias whose version shows tampered tags gets its tags back from the signed statement. Any other
    problem of a signed alias is reported and left: the enforcer never moves an alias on the
    strength of unsigned state."""
    notes: list[str] = []
    name, alias = finding.name, finding.alias
    if finding.pending:
        history = read_history(session.client, name, session.chain)  # fresh: the request may have moved
        requested = finding.version or None
        decision = evaluate_request(session, name, alias, requested, history,
                                    check=finding.check if requested is not None else None)
        if decision.check is not None and (decision.check.tag_changes or decision.check.description_restore):
            keys = restore_signed_tags(session, name, requested, decision.check)
            notes.append(f"TAMPERING {name} v{requested}: {', '.join(keys)} restored from its signed statement")
        notes.append(record_decision(session, name, decision, actor=actor))
        return notes
    check = finding.check
    if check is None:
        return notes
    if check.tag_changes or check.description_restore:
        keys = restore_signed_tags(session, name, finding.version, check)
        notes.append(f"TAMPERING {name} v{finding.version}: {', '.join(keys)} restored from its signed statement; "
                     f"{name}@{alias} stays on v{finding.version} (a tag never moves an alias)")
    restorable = ("TAMPERING: tag ",) + (("TAMPERING: the version's description",) if check.description_restore else ())
    left = [p for p in check.problem_list() if not p.startswith(restorable)]
    if left:
        notes.append(f"{name}@{alias} -> v{finding.version} (the signed state) fails: {'; '.join(left)}. Left in place: "
                     "the watcher does not move a signed alias; a key holder decides with `reappreg registry promote "
                     "--reason`")
    return notes


__all__ = ["act", "evaluate_request", "restore_signed_tags"]
