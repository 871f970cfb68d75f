"""The ``openai`` judge backend: any OpenAI-compatible ``/chat/completions`` server.

Serves ``vllm serve``, llama.cpp's server and hosted APIs alike. Built on httpx (async)
with tenacity for retries:

- **One overall deadline per request** (``timeout_s``) covers connect, headers and body
  together (``asyncio.timeout`` around the whole exchange), so a server that drips one byte
  a second cannot hold a request past it.
- **Retries** (``max_retries``, exponential ``backoff_s``) on connection errors, timeouts,
  protocol errors (a bad status line, a truncated body), malformed responses (not JSON, no
  ``choices``) and the transient statuses 408/409/425/429/5xx. A ``Retry-After`` (seconds or
  an HTTP date) is waited for when it is at most ``retry_after_max_s``; a longer one fails
  at once and says so. 400/422 mean the server refused a request field (see below); any
  other status (401, 403, 404...) fails at once.
- **Bounded response size**: more than ``max_response_bytes`` of body is an error.
- **Concurrency** ``concurrency`` requests in flight (one connection each).
- **The API key** is read from the environment variable whose *name* is configured and is
  redacted from every message, raw output and cache entry: every exact occurrence and every
  substring of 6 or more of its characters (prefixes, fragments) becomes ``[REDACTED]``.

Verdicts (``openai_verdict_methods``, tried in order; the first the server offers sticks,
and a prompt the sticky method cannot answer falls through to the next): ``logprob``
(``logprobs``/``top_logprobs`` of a one-token reply: label probabilities), ``guided``
(vLLM's choice over the labels), ``json_schema`` (``response_format``), ``free_text``
(regex parsing, the last resort). A method is *not offered* when the server refuses its
field (400/422) or ignores it (no logprobs, or a reply that is not exactly a label).
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import math
import os
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from reappreg.errors import InputError
from reappreg.judge.parse import JudgeBackendError, JudgeResult, from_label_probabilities, from_reply
from reappreg.judge.prompt import TIE, Messages
from reappreg.settings.judge import JudgeSettings

_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_REFUSED_FIELD_STATUS = {400, 422}
REDACTED = "[REDACTED]"
MIN_KEY_FRAGMENT = 6


def redact_url(url: str) -> str:
    """Drop user:password from a URL before it is logged."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        parts = parts._replace(netloc=host)
    return urllib.parse.urlunsplit(parts)


class Redactor:
    """Replaces a secret, and every substring of ``MIN_KEY_FRAGMENT``+ characters of it, in text."""

    def __init__(self, secret: str | None):
        self.secret = secret or ""
        n = MIN_KEY_FRAGMENT
        self._grams = {self.secret[i : i + n] for i in range(len(self.secret) - n + 1)}

    def __call__(self, text: str) -> str:
        if not self.secret or not text:
            return text
        masked = bytearray(len(text))
        start = text.find(self.secret)
        while start != -1:
            masked[start : start + len(self.secret)] = b"\1" * len(self.secret)
            start = text.find(self.secret, start + 1)
        n = MIN_KEY_FRAGMENT
        if self._grams:
            # Every substring of >= n key characters contains an n-character key substring, so
            # masking every n-window that is one covers them all (prefixes and fragments too).
            for i in range(len(text) - n + 1):
                if text[i : i + n] in self._grams:
                    masked[i : i + n] = b"\1" * n
        out, i = [], 0
        while i < len(text):
            if masked[i]:
                while i < len(text) and masked[i]:
                    i += 1
                out.append(REDACTED)
            else:
                j = i
                while j < len(text) and not masked[j]:
                    j += 1
                out.append(text[i:j])
                i = j
        return "".join(out)


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


class FieldRefused(JudgeBackendError):
    """The server answered 400/422: it refused a request field (or the request)."""


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None if absent/invalid."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _label_of_token(token: str, labels: tuple[str, ...]) -> str | None:
    stripped = token.strip()
    for label in labels:
        if stripped == label or (label == TIE and stripped.lower() == TIE):
            return label
    return None


def _check_chat_shape(data: Any, redact: Redactor) -> None:
    """A chat completion has choices[0].message as a mapping; anything else is a malformed response."""
    try:
        message = data["choices"][0]["message"]
        if not isinstance(message, dict) or not isinstance(data["choices"][0], dict):
            raise TypeError
    except (KeyError, IndexError, TypeError):
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise _Retryable(f"malformed response: no choices[0].message (keys: {redact(str(keys))[:200]})") from None


class OpenAICompatibleJudge:
    """POST /chat/completions on an OpenAI-compatible server; GET /models identifies the model."""

    backend = "openai"

    def __init__(self, settings: JudgeSettings, model: str, labels: tuple[str, ...]):
        base_url = settings.base_url
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"judge.base_url must start with http:// or https://, got {redact_url(base_url)!r}")
        parts = urllib.parse.urlsplit(base_url)
        if parts.username or parts.password:
            raise InputError(f"judge.base_url {redact_url(base_url)!r} embeds credentials; put the key in the "
                             "environment variable named by judge.api_key_env instead")
        self.base_url = base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)
        self.model = model
        self.settings = settings
        self.labels = labels
        self._api_key: str | None = None
        if settings.api_key_env:
            key = os.environ.get(settings.api_key_env)
            if not key:
                raise InputError(f"judge.api_key_env is {settings.api_key_env!r} but that environment variable "
                                 "is not set")
            self._api_key = key
        self.redact = Redactor(self._api_key)
        self.method: str | None = None  # the first verdict method the server was found to offer
        self.requests_sent = 0
        # The wait between attempts; a test injects its own to see the waits without a clock.
        self.sleep = asyncio.sleep

    # ------------------------------------------------------------------ transport

    def _headers(self) -> dict[str, str]:
        # identity: no compressed body, so max_response_bytes bounds what is held in memory
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _detail(self, body: bytes) -> str:
        # Redact before truncating: a cut must never expose the part of a key it splits.
        return self.redact(body.decode("utf-8", "replace")).strip()[:300]

    async def _attempt(self, client: Any, method: str, url: str, payload: dict | None) -> Any:
        import httpx2 as httpx

        limit = self.settings.max_response_bytes
        self.requests_sent += 1
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                async with client.stream(method, url, json=payload, headers=self._headers()) as response:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body.extend(chunk)
                        if len(body) > limit:
                            raise JudgeBackendError(f"judge endpoint {self.shown_url}: response larger than "
                                                    f"max_response_bytes={limit}")
                    status, retry_after = response.status_code, response.headers.get("retry-after")
        except TimeoutError:
            raise _Retryable(f"no complete response within timeout_s={self.settings.timeout_s:g} "
                             "(connect, headers and body)") from None
        except httpx.HTTPError as exc:  # connect/read errors, bad status line, truncated body, bad encoding
            raise _Retryable(self.redact(f"{type(exc).__name__}: {exc}")[:300]) from None
        if 200 <= status < 300:
            try:
                data = json.loads(bytes(body).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise _Retryable(f"malformed response: HTTP {status} body is not JSON ({exc.__class__.__name__}: "
                                 f"{self.redact(str(exc))[:120]})") from None
            if url.endswith("/chat/completions"):
                _check_chat_shape(data, self.redact)
            return data
        detail = f"HTTP {status}: {self._detail(bytes(body))}"
        if status in _RETRYABLE_STATUS:
            wait = parse_retry_after(retry_after)
            if wait is not None and wait > self.settings.retry_after_max_s:
                raise JudgeBackendError(f"judge endpoint {self.shown_url}: {detail} with Retry-After {wait:g} s, "
                                        f"more than judge.retry_after_max_s={self.settings.retry_after_max_s:g}; "
                                        "not retried")
            raise _Retryable(detail, retry_after=wait)
        if status in _REFUSED_FIELD_STATUS:
            raise FieldRefused(f"judge endpoint {self.shown_url}: {detail}")
        raise JudgeBackendError(f"judge endpoint {self.shown_url}: {detail}")

    def _wait(self, state: Any) -> float:
        exc = state.outcome.exception()
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return exc.retry_after
        return self.settings.backoff_s * 2 ** (state.attempt_number - 1)

    async def _request(self, client: Any, method: str, path: str, payload: dict | None = None) -> Any:
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

        attempts = self.settings.max_retries + 1
        retrying = AsyncRetrying(stop=stop_after_attempt(attempts), wait=self._wait, sleep=self.sleep,
                                 retry=retry_if_exception_type(_Retryable), reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(client, method, f"{self.base_url}{path}", payload)
        except _Retryable as exc:
            raise JudgeBackendError(f"judge endpoint {self.shown_url}: gave up after {attempts} attempts; "
                                    f"last error: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _client(self):
        import httpx2 as httpx

        n = self.settings.concurrency
        return httpx.AsyncClient(timeout=httpx.Timeout(self.settings.timeout_s), follow_redirects=False,
                                 limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))

    # ------------------------------------------------------------------ identity

    async def _fingerprint(self) -> str:
        async with self._client() as client:
            data = await self._request(client, "GET", "/models")
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise JudgeBackendError(f"judge endpoint {self.shown_url}: GET /models has no 'data' list")
        served = [e for e in entries if isinstance(e, dict) and "id" in e]
        match = [e for e in served if e["id"] == self.model]
        if not match:
            ids = self.redact(", ".join(str(e["id"]) for e in served)[:300])
            raise InputError(f"judge.model {self.model!r} is not served by {self.shown_url} (it serves: {ids})")
        # What the server reports about the model, less volatile fields (created = request time in vLLM).
        identity = {k: match[0].get(k) for k in ("id", "root", "parent", "owned_by", "max_model_len")}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
        # The provider (the entry's owned_by) is kept in clear: an API judge is pinned beside the
        # reference bar by provider and model id (reappreg.evidence.reference.JudgeIdentity). A server
        # that reports none, or one with a colon, records no provider and so matches no pin.
        provider = match[0].get("owned_by")
        named = isinstance(provider, str) and provider.strip() and ":" not in provider
        return self.redact(f"served:{self.model}:{provider.strip()}:{digest}" if named
                           else f"served:{self.model}:{digest}")

    def fingerprint(self) -> str:
        return asyncio.run(self._fingerprint())

    # ------------------------------------------------------------------ verdicts

    def _payload(self, messages: Messages, method: str) -> dict[str, Any]:
        s = self.settings
        payload: dict[str, Any] = {"model": self.model, "messages": list(messages), "temperature": s.temperature,
                                   "seed": s.seed, "max_tokens": s.max_new_tokens}
        if method == "logprob":
            payload.update(max_tokens=1, logprobs=True, top_logprobs=s.top_logprobs)
        elif method == "guided":
            if s.openai_guided_field == "structured_outputs":
                payload["structured_outputs"] = {"choice": list(self.labels)}
            else:
                payload["guided_choice"] = list(self.labels)
        elif method == "json_schema":
            payload["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "verdict", "strict": True,
                "schema": {"type": "object", "properties": {"verdict": {"type": "string", "enum": list(self.labels)}},
                           "required": ["verdict"], "additionalProperties": False}}}
        return payload

    def _read(self, data: Any, method: str) -> JudgeResult | None:
        """The verdict in a response; None when the server did not honour ``method``."""
        choice = data["choices"][0]  # shape checked by _check_chat_shape
        message = choice["message"]
        content = self.redact(str(message.get("content") or ""))
        if method == "logprob":
            logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
            tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
            if not isinstance(tokens, list) or not tokens or not isinstance(tokens[0], dict):
                return None
            mass: dict[str, float] = {}
            shown = []
            for entry in tokens[0].get("top_logprobs") or []:
                token, logprob = str(entry.get("token", "")), entry.get("logprob")
                if not isinstance(logprob, (int, float)) or not math.isfinite(logprob):
                    continue
                shown.append(f"{token!r} {math.exp(logprob):.4f}")
                label = _label_of_token(token, self.labels)
                if label is not None:
                    mass[label] = mass.get(label, 0.0) + math.exp(logprob)
            if not mass:
                return None  # no label among the top tokens: no probabilities to read
            raw = self.redact(f"top_logprobs: {', '.join(shown)}")
            return from_label_probabilities(mass, self.labels, "logprob", raw)
        return from_reply(method, content, self.labels)

    async def _judge_one(self, client: Any, messages: Messages) -> JudgeResult:
        methods = list(self.settings.openai_verdict_methods)
        start = methods.index(self.method) if self.method in methods else 0
        refused: list[str] = []
        for method in methods[start:]:
            try:
                data = await self._request(client, "POST", "/chat/completions", self._payload(messages, method))
            except FieldRefused as exc:
                refused.append(f"{method}: {exc}")
                continue
            result = self._read(data, method)
            if result is not None:
                if self.method is None:
                    self.method = method
                return result
            refused.append(f"{method}: not honoured by the server")
        raise JudgeBackendError(f"judge endpoint {self.shown_url}: no verdict method worked "
                                f"(tried {', '.join(methods[start:])}): " + "; ".join(refused)[:600])

    async def _complete_all(self, prompts: Sequence[Messages]) -> list[JudgeResult]:
        results: list[JudgeResult | None] = [None] * len(prompts)
        async with self._client() as client:
            first = 0
            if self.method is None and prompts:  # find the server's method once, then fan out
                results[0] = await self._judge_one(client, prompts[0])
                first = 1
            gate = asyncio.Semaphore(self.settings.concurrency)

            async def one(i: int) -> None:
                async with gate:
                    results[i] = await self._judge_one(client, prompts[i])

            async with asyncio.TaskGroup() as group:
                for i in range(first, len(prompts)):
                    group.create_task(one(i))
        return [r for r in results if r is not None]

    def complete(self, prompts: Sequence[Messages]) -> list[JudgeResult]:
        try:
            return asyncio.run(self._complete_all(prompts))
        except ExceptionGroup as group:  # TaskGroup wraps failures: surface the first one
            first: BaseException = group
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
