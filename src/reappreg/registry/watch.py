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

Acting (``--enforce``): each pending request (an alias that differs from the signed alias
state: set or removed in the MLflow UI) is accepted or restored from signed evidence only
(:mod:`.requests`), with a signed entry and the reason tagged on the model and the version; a
signed alias whose version shows tampered tags gets them back from its signed statement. The
watcher never moves a signed alias on the strength of unsigned state.
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
from reappreg.registry.audit import AliasFinding, check_alias
from reappreg.registry.history import read_history
from reappreg.registry.promotion import RegistrySession, current_target


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


def needs_attention(finding: AliasFinding) -> bool:
    """A pending request or a violation: what a watch reports (and, with --enforce, acts on)."""
    return finding.pending or finding.violation


def watch_poll(
    check: Callable[[], list[AliasFinding]],
    *,
    interval_s: float,
    max_polls: int,
    report: Callable[[AliasFinding], None],
    sleep: Callable[[float], None] = time.sleep,
) -> list[AliasFinding]:
    """Re-run ``check`` ``max_polls`` times, ``interval_s`` apart; report each pending request or violation
    when it appears (again after it was gone: a request made anew after a restore is reported anew)."""
    reported: list[AliasFinding] = []
    before: set[tuple[str, str, str]] = set()
    for poll in range(max_polls):
        now: set[tuple[str, str, str]] = set()
        for finding in check():
            key = (finding.name, finding.alias, finding.version)
            if needs_attention(finding):
                now.add(key)
                if key not in before:
                    reported.append(finding)
                    report(finding)
        before = now
        if poll + 1 < max_polls:
            sleep(interval_s)
    return reported


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
    check: Callable[[], list[AliasFinding]],
    on_ready: Callable[[str], None] | None = None,
) -> list[AliasFinding]:
    """Subscribe to ``model_version_alias.created`` and ``.deleted`` on an ``mlflow server`` and check each alias event.

    Runs ``check`` (the full audit) once after subscribing, then checks each new alias as it is set. Stops
    after ``listener.duration`` seconds or ``listener.max_events`` alias events, then deletes its
    webhook. ``report`` is called once per violating (model, alias, version); ``on_ready`` with
    the URL the server posts to, once the listener runs.
    """
    import queue
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    client = session.client
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
                                 events=["model_version_alias.created", "model_version_alias.deleted"], secret=secret,
                                 description="reappreg registry watch: checks every new alias against its signed gates")
    findings: list[AliasFinding] = []

    def found(finding: AliasFinding) -> None:
        # Each alias event is checked as the store stands now: a request already decided (by an
        # earlier event or the first full check) is the signed state again and is not reported.
        if needs_attention(finding):
            findings.append(finding)
            report(finding)

    try:
        # Aliases set before the webhook existed (or while the server's webhook cache was
        # stale) are caught by one full check once the subscription is in place.
        for finding in check():
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
            if event.get("entity") != "model_version_alias" or event.get("action") not in ("created", "deleted"):
                continue
            data = event.get("data", {})
            handled += 1
            # The alias as the store holds it now (the event may be stale by the time it is read).
            history = read_history(client, data["name"], session.chain)
            now = current_target(client, data["name"], data["alias"])
            if now is None and data["alias"] not in history.signed_state():
                continue  # removed, and never signed: nothing to decide
            found(check_alias(session, data["name"], data["alias"], now, history=history))
    finally:
        client.delete_webhook(hook.webhook_id)
        server.shutdown()
        server.server_close()
    return findings
