"""Watching aliases, and enforcing gates on aliases set outside ``registry promote`` (e.g. in the MLflow UI).

The installed MLflow (3.17) has registry webhooks (``MlflowClient.create_webhook``, event
``model_version_alias.created``), delivered by ``mlflow server`` only and signed with
HMAC-SHA256. :func:`watch_webhook` registers one, receives the events on a local HTTP
listener, checks each signature and each new alias, and deletes its webhook when done. The
server's SSRF policy accepts only public https URLs unless it runs with
``MLFLOW_WEBHOOK_ALLOWED_SCHEMES=http,https`` and ``MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS=true``,
and it caches each event's webhook list for ``MLFLOW_WEBHOOK_CACHE_TTL`` seconds (60), so a
new webhook may miss events in its first minute; the watcher runs one full check after
subscribing to cover that gap. A sqlite store has no server to send webhooks, so
:func:`watch_poll` re-runs the audit at a bounded interval, a bounded number of times.

Enforcement (``--enforce``): an alias that differs from the signed alias state (the replayed
promotion history) is restored to it; one pointing at a version that fails its gates (or
whose evidence was tampered with) is moved back to the newest version the signed history
put there that still passes, or removed when there is none; the reason goes into the signed
history and into the tag ``reappreg.enforced.<alias>`` on the model and on the version.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reappreg.errors import InputError
from reappreg.registry.audit import AliasFinding, audit, check_alias
from reappreg.registry.promotion import (
    RegistrySession,
    read_history,
    record_enforcement,
)
from reappreg.registry.verification import gates_for, is_gated, verify_version


@dataclass(frozen=True)
class WebhookListener:
    """Where a webhook watch listens (``listen``: HOST:PORT, port 0 for any free one), the URL the
    server posts to (``public_url``; None: http://HOST:PORT/) and when it stops: after ``duration``
    seconds or ``max_events`` alias events. Kept as the user typed ``listen`` and split only when
    a webhook watch starts: a polling watch never reads it, so a bad value must not stop one."""

    listen: str
    public_url: str | None
    duration: float
    max_events: int

    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        if not host or not port.isdigit():
            raise InputError(f"--listen must be HOST:PORT, got {self.listen!r}")
        return host, int(port)


def watch_poll(
    check: Callable[[], list[AliasFinding]],
    *,
    interval_s: float,
    max_polls: int,
    report: Callable[[AliasFinding], None],
    sleep: Callable[[float], None] = time.sleep,
) -> list[AliasFinding]:
    """Re-run ``check`` ``max_polls`` times, ``interval_s`` apart; report each violation once."""
    seen: dict[tuple[str, str, str], AliasFinding] = {}
    for poll in range(max_polls):
        for finding in check():
            key = (finding.name, finding.alias, finding.version)
            if finding.violation and key not in seen:
                seen[key] = finding
                report(finding)
        if poll + 1 < max_polls:
            sleep(interval_s)
    return list(seen.values())


def enforce(session: RegistrySession, finding: AliasFinding, *, actor: str) -> str:
    """Restore ``finding``'s alias to the signed state, or, when the signed target itself fails its
    gates now, to the newest signed target that passes (else remove it). Never to a state taken
    from the current tags: an attacker who edits tags must not steer the enforcer."""
    client, decl, keyring = session.client, session.decl, session.keyring
    history = read_history(client, finding.name, keyring)
    gates = gates_for(decl, finding.name, finding.alias)
    from_version = finding.version or None
    tried: set[str] = {finding.version} if finding.signed else set()
    candidates = [finding.signed_to] if not finding.signed and finding.signed_to else []
    candidates += [str(e.body.get("to")) for e in reversed(history.for_alias(finding.alias)) if e.body.get("to")]
    target = None
    for candidate in candidates:
        if candidate in tried:
            continue
        tried.add(candidate)
        try:
            mv = client.get_model_version(finding.name, candidate)
        except Exception:  # deleted since: not a place to go back to
            continue
        if verify_version(mv, gates, keyring, tracking_uri=session.tracking_uri,
                          gated=is_gated(decl, finding.name, finding.alias)).ok:
            target = candidate
            break
    if not finding.signed:
        why = (f"{'v' + finding.version if finding.version else 'no version'} is not the signed alias state "
               f"({'v' + finding.signed_to if finding.signed_to else 'unset or removed'})")
        if finding.check is not None and not finding.check.ok:
            why += f", and it fails its gates: {finding.check.problems()}"
        if target == from_version:
            return f"{finding.name}@{finding.alias}: already at v{target}"
    else:
        why = f"v{finding.version} fails its gates: {finding.check.problems()}"
    return record_enforcement(session, finding.name, alias=finding.alias, from_version=from_version, to_version=target,
                              actor=actor, why=why)


def verify_signature(secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    """MLflow's webhook signature: HMAC-SHA256 over ``delivery_id.timestamp.payload`` (v1, base64)."""
    from mlflow.webhooks.constants import WEBHOOK_DELIVERY_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER

    lower = {k.lower(): v for k, v in headers.items()}
    signature = lower.get(WEBHOOK_SIGNATURE_HEADER.lower(), "")
    delivery = lower.get(WEBHOOK_DELIVERY_ID_HEADER.lower(), "")
    stamp = lower.get(WEBHOOK_TIMESTAMP_HEADER.lower(), "")
    signed = f"{delivery}.{stamp}.{body.decode('utf-8')}".encode("utf-8")
    expected = "v1," + base64.b64encode(hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).digest()).decode("ascii")
    return hmac.compare_digest(expected, signature)


def watch_webhook(
    session: RegistrySession,
    listener: WebhookListener,
    *,
    report: Callable[[AliasFinding], None],
    on_ready: Callable[[str], None] | None = None,
) -> list[AliasFinding]:
    """Subscribe to ``model_version_alias.created`` on an ``mlflow server`` and check each new alias.

    Audits every alias once after subscribing, then checks each new alias as it is set. Stops
    after ``listener.duration`` seconds or ``listener.max_events`` alias events, then deletes its
    webhook. ``report`` is called once per violating (model, alias, version); ``on_ready`` with
    the URL the server posts to, once the listener runs.
    """
    import queue
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    client, decl, keyring, tracking_uri = session.client, session.decl, session.keyring, session.tracking_uri
    host, port = listener.address()
    secret = secrets.token_hex(16)
    events: queue.Queue = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server API)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if not verify_signature(secret, dict(self.headers.items()), body):
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            events.put(json.loads(body))

        def log_message(self, *args: Any) -> None:  # keep the console for findings
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    url = listener.public_url or f"http://{host}:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hook = client.create_webhook(name=f"reappreg-watch-{secrets.token_hex(4)}", url=url,
                                 events=["model_version_alias.created"], secret=secret,
                                 description="reappreg registry watch: checks every new alias against its signed gates")
    findings: list[AliasFinding] = []
    seen: set[tuple[str, str, str]] = set()

    def found(finding: AliasFinding) -> None:
        key = (finding.name, finding.alias, finding.version)
        if finding.violation and key not in seen:
            seen.add(key)
            findings.append(finding)
            report(finding)

    try:
        # Aliases set before the webhook existed (or while the server's webhook cache was
        # stale) are caught by one full check once the subscription is in place.
        for finding in audit(client, decl, keyring, tracking_uri=tracking_uri).findings:
            found(finding)
        if on_ready:
            on_ready(url)
        deadline = time.monotonic() + listener.duration
        handled = 0
        while handled < listener.max_events:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                event = events.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if (event.get("entity"), event.get("action")) != ("model_version_alias", "created"):
                continue
            data = event.get("data", {})
            handled += 1
            found(check_alias(client, decl, keyring, data["name"], data["alias"], str(data["version"]), tracking_uri=tracking_uri))
    finally:
        client.delete_webhook(hook.webhook_id)
        server.shutdown()
        server.server_close()
    return findings
