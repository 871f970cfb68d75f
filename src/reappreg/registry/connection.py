"""Connecting to the tracking/registry server with bounded patience, and the host-wide registration lock."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from reappreg.errors import ReappregError


class RegistryUnavailable(ReappregError):
    """The MLflow tracking/registry server did not answer within the bounded retries."""



@contextlib.contextmanager
def bounded_http(retries: int, timeout_s: int) -> Iterator[None]:
    """Cap MLflow's own per-request retries/timeout (its defaults retry for minutes)."""
    keys = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries),
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_s),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    }
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def connect(uri: str, *, attempts: int, backoff_s: float, sleep: Callable[[float], None] = time.sleep) -> Any:
    """An ``MlflowClient`` for ``uri`` that has answered a request.

    Tries ``attempts`` times with exponential backoff; then raises RegistryUnavailable,
    before the caller has written anything.
    """
    from mlflow import MlflowClient

    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    last: Exception | None = None
    for attempt in range(attempts):
        try:
            client.search_registered_models(max_results=1)
            return client
        except Exception as exc:  # any transport/server error counts as "not answering"
            refused = refused_credentials(exc, uri)
            if refused:
                raise RegistryUnavailable(refused) from exc  # retrying a wrong password only delays the answer
            last = exc
            if attempt + 1 < attempts:
                sleep(backoff_s * (2**attempt))
    raise RegistryUnavailable(
        f"MLflow registry at {uri} did not answer after {attempts} attempt(s): {short(last)}. "
        "Nothing was registered, promoted or verified; start the server (or fix MLFLOW_TRACKING_URI) and rerun."
    )


def refused_credentials(exc: Exception, uri: str) -> str | None:
    """The message for a server that answered 401/403 (MLflow's basic-auth app), else None.

    A team server (README "Working as a team") reads the account from the standard
    ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``; naming them is the fix, where
    "did not answer" would send the reader looking for a server that is up."""
    status = getattr(exc, "get_http_status_code", lambda: None)()
    if status not in (401, 403):
        return None
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    who = f"account '{user}'" if user else "no account (MLFLOW_TRACKING_USERNAME is unset)"
    what = "rejected the credentials of" if status == 401 else "refused read access to"
    return (f"MLflow registry at {uri} {what} {who} (HTTP {status}). Set MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD to an account the server's admin created; nothing was registered, promoted or verified.")


def short(exc: Exception | None) -> str:
    text = f"{type(exc).__name__}: {exc}" if exc else "no error"
    return text if len(text) < 300 else text[:300] + "..."


@contextlib.contextmanager
def registration_lock(lock_file: str | os.PathLike, timeout_s: float) -> Iterator[None]:
    """Serialise registrations on this host (a re-check inside makes the second a no-op)."""
    from filelock import FileLock, Timeout

    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout as exc:
        raise RegistryUnavailable(f"{lock_file}: another registration held the lock for more than {timeout_s:g}s") from exc
    try:
        yield
    finally:
        lock.release()
