"""The `openai` judge backend against a loopback server that misbehaves on purpose.

The server speaks raw HTTP over a socket so that it can do what a well-behaved framework
would not: drip bytes, send a bad status line, lie about Content-Length, echo the key.
"""

from __future__ import annotations

import json
import math
import socket
import socketserver
import threading
import time
from pathlib import Path

import pytest

from reappreg.errors import InputError
from reappreg.io import read_json, read_jsonl
from reappreg.judge import CachedJudge, JudgeBackendError, OpenAICompatibleJudge, Redactor, redact_url, verdict_config
from reappreg.judge.http import parse_retry_after
from reappreg.settings.judge import JudgeSettings

# A fake key none of whose 6-character pieces can occur in a path, a port or a number the
# test prints (mixed case and punctuation, no digit runs): a hit is a leak, never a tmp folder.
SECRET = "sk-QvXz_KwJm.RtYp~HbNc-LgDf"
KEY_ENV = "REAPPREG_TEST_JUDGE_KEY"
MODEL = "llama-3.1-70b-instruct"
LABELS = ("A", "B", "tie")


def _fragments(text: str, secret: str = SECRET, n: int = 6) -> list[str]:
    """Every substring of >= n characters of the secret that occurs in text."""
    return [secret[i : i + n] for i in range(len(secret) - n + 1) if secret[i : i + n] in text]


def _chat(content: str | None = "[[A]]", logprobs: list[tuple[str, float]] | None = None) -> dict:
    choice: dict = {"index": 0, "message": {"role": "assistant", "content": content}}
    if logprobs is not None:
        choice["logprobs"] = {"content": [{"token": logprobs[0][0], "logprob": math.log(logprobs[0][1]),
                                           "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in logprobs]}]}
    return {"choices": [choice]}


class LoopbackServer:
    """An OpenAI-compatible server on 127.0.0.1; ``plan`` scripts the next POST responses.

    A plan entry is a callable ``(handler, request) -> None`` writing raw bytes, or a dict
    (a 200 JSON body). Without a plan, ``default(request)`` answers. GET /models lists
    ``models``. Every request is recorded as {method, path, headers, body}.
    """

    def __init__(self):
        self.requests: list[dict] = []
        self.plan: list = []
        self.default = lambda request: _chat("[[A]]")
        self.models = [{"id": MODEL, "object": "model", "root": "/models/Llama-3.1-70B-Instruct",
                        "created": time.time(), "owned_by": "vllm", "max_model_len": 8192}]
        server = self

        self.active = 0
        self.idle = threading.Condition()

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                with server.idle:
                    server.active += 1
                try:
                    self._serve()
                finally:
                    with server.idle:
                        server.active -= 1
                        server.idle.notify_all()

            def _serve(self):
                while True:  # keep-alive: several requests per connection
                    line = self.rfile.readline()
                    if not line:
                        return
                    method, path, _ = line.decode("latin-1").split(" ", 2)
                    headers = {}
                    while True:
                        h = self.rfile.readline().decode("latin-1")
                        if h in ("\r\n", "\n", ""):
                            break
                        k, _, v = h.partition(":")
                        headers[k.strip().lower()] = v.strip()
                    body = self.rfile.read(int(headers.get("content-length", 0) or 0))
                    request = {"method": method, "path": path, "headers": headers,
                               "body": json.loads(body) if body else None}
                    server.requests.append(request)
                    if method == "GET" and path.endswith("/models"):
                        send_json(self, {"object": "list", "data": server.models})
                        continue
                    action = server.plan.pop(0) if server.plan else server.default(request)
                    try:
                        if callable(action):
                            if action(self, request) == "close":
                                return
                        else:
                            send_json(self, action)
                    except (BrokenPipeError, ConnectionResetError):
                        return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def wait_idle(self, timeout: float = 120.0) -> None:
        """Block until no connection is being served (an event, not a sleep)."""
        with self.idle:
            assert self.idle.wait_for(lambda: self.active == 0, timeout), "a handler never finished"

    def posts(self) -> list[dict]:
        return [r for r in self.requests if r["method"] == "POST"]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def send_json(handler, obj, status: str = "200 OK", extra: str = "") -> None:
    body = json.dumps(obj).encode()
    handler.wfile.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                        f"{extra}\r\n".encode() + body)
    handler.wfile.flush()


def status(code: int, message: str = "", retry_after: str | None = None, echo_key: int | None = None):
    def act(handler, request):
        text = message
        if echo_key is not None:  # padding, then the header as received (253: a cut at 300 splits the key)
            text = "x" * echo_key + f" your header was {request['headers'].get('authorization')}"
        extra = f"Retry-After: {retry_after}\r\n" if retry_after is not None else ""
        send_json(handler, {"error": {"message": text}}, status=f"{code} Status", extra=extra)
    return act


DRIPPED: list[dict] = []  # per dripping response: bytes sent, whether it ever finished


def _drip(handler, data: bytes) -> str:
    """Send ``data`` one byte a second; record how far it got before the client hung up."""
    record = {"sent": 0, "of": len(data), "finished": False}
    DRIPPED.append(record)
    try:
        for byte in data:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            record["sent"] += 1
            time.sleep(1.0)
        record["finished"] = True
    except OSError:  # the client gave up and closed the connection: what the test wants
        pass
    return "close"


def drip_body(handler, request):
    body = json.dumps(_chat("[[A]]")).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    handler.wfile.write(head)
    handler.wfile.flush()
    return _drip(handler, body)


def drip_headers(handler, request):
    return _drip(handler, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 100)


def bad_status_line(handler, request):
    handler.wfile.write(b"HTTP/1.1 OKAY-ish\r\n\r\n")
    handler.wfile.flush()
    return "close"


def truncated(handler, request):
    body = json.dumps(_chat("[[A]]")).encode()
    handler.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body) + 50}\r\n\r\n"
                        .encode() + body[: len(body) // 2])
    handler.wfile.flush()
    return "close"


def not_json(handler, request):
    body = b"<html>upstream hiccup</html>"
    handler.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                        + body)
    handler.wfile.flush()


def oversize(handler, request):
    body = json.dumps(_chat("x" * 50_000)).encode()
    handler.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                        .encode() + body)
    handler.wfile.flush()


def _settings(url: str, **kw) -> JudgeSettings:
    base = dict(backend="openai", model=MODEL, base_url=url, api_key_env=KEY_ENV, timeout_s=2.0, max_retries=2,
                backoff_s=0.0, retry_after_max_s=5.0, max_response_bytes=4096, concurrency=2, cache_dir=None,
                max_new_tokens=8)
    base.update(kw)
    return JudgeSettings(**base)


def _judge(url: str, **kw) -> OpenAICompatibleJudge:
    return OpenAICompatibleJudge(_settings(url, **kw), MODEL, LABELS)


def _messages(i: int = 0) -> list[dict]:
    return [{"role": "user", "content": f"[Reappraisal A]\nfoo {i}\n[End of Reappraisal A]\n\n"
                                        f"[Reappraisal B]\nbar\n[End of Reappraisal B]"}]


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with LoopbackServer() as srv:
        yield srv


# ----------------------------------------------------------------------------- verdict methods


def test_logprobs_are_used_when_offered(server):
    server.default = lambda r: _chat("A", [("A", 0.6), (" B", 0.2), ("tie", 0.1), ("The", 0.05)])
    results = _judge(server.url).complete([_messages(i) for i in range(3)])
    assert [r.verdict for r in results] == ["A"] * 3 and {r.verdict_method for r in results} == {"logprob"}
    assert (results[0].p_a, results[0].p_b, results[0].p_tie) == pytest.approx((0.6 / 0.9, 0.2 / 0.9, 0.1 / 0.9))
    body = server.posts()[0]["body"]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1
    assert body["model"] == MODEL and body["temperature"] == 0.0
    assert all(r["headers"]["authorization"] == f"Bearer {SECRET}" for r in server.requests)


def test_guided_choice_then_json_schema_then_free_text(server):
    # A server without logprobs that honours guided choice (vLLM): guided sticks after one probe.
    def guided_server(request):
        body = request["body"]
        if "structured_outputs" in body:
            return _chat("B")
        return _chat("Well, I would say [[A]] probably")  # ignores logprobs: free text

    server.default = guided_server
    judge = _judge(server.url)
    results = judge.complete([_messages(i) for i in range(3)])
    assert [(r.verdict, r.verdict_method) for r in results] == [("B", "guided")] * 3
    assert all(r.p_a is None for r in results) and judge.method == "guided"
    assert server.posts()[1]["body"]["structured_outputs"] == {"choice": ["A", "B", "tie"]}
    assert len(server.posts()) == 2 + 2  # the probe tried logprob once, then guided for every prompt

    # A server that refuses guided fields (400) but supports JSON schema.
    def schema_server(request):
        body = request["body"]
        if "structured_outputs" in body:
            return status(400, "unknown field structured_outputs")
        if "response_format" in body:
            return _chat(json.dumps({"verdict": "tie"}))
        return _chat("no logprobs here")

    server.default = schema_server
    results = _judge(server.url).complete([_messages(0)])
    assert (results[0].verdict, results[0].verdict_method) == ("tie", "json_schema")
    schema = server.posts()[-1]["body"]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["verdict"]["enum"] == ["A", "B", "tie"]

    # A plain server: free text, parsed, and recorded as such.
    server.default = lambda request: _chat("Verdict: B")
    results = _judge(server.url).complete([_messages(0)])
    assert (results[0].verdict, results[0].verdict_method) == ("B", "free_text")
    only_guided = _judge(server.url, openai_verdict_methods=["guided"])
    with pytest.raises(JudgeBackendError, match="no verdict method worked.*guided: not honoured"):
        only_guided.complete([_messages(0)])


def test_fingerprint_is_the_served_identity_without_the_url(server):
    first = _judge(server.url).fingerprint()
    assert first.startswith(f"served:{MODEL}:") and "127.0.0.1" not in first
    server.models[0]["created"] += 100  # volatile: not part of the identity
    assert _judge(server.url).fingerprint() == first
    server.models[0]["root"] = "/models/other-weights"
    assert _judge(server.url).fingerprint() != first
    server.models = [{"id": "something-else"}]
    with pytest.raises(InputError, match=f"judge.model '{MODEL}' is not served .* something-else"):
        _judge(server.url).fingerprint()


def test_fingerprint_records_the_provider_and_model_id_the_bar_pins(server):
    """An API judge's identity is its provider and model id as the server reports them (owned_by, id):
    the fingerprint keeps both in clear, and the reference bar's pin reads them back."""
    from reappreg.evidence.reference import JudgeIdentity

    fingerprint = _judge(server.url).fingerprint()
    assert fingerprint.startswith(f"served:{MODEL}:vllm:")
    assert JudgeIdentity.of_fingerprint(fingerprint) == JudgeIdentity(provider="vllm", model_id=MODEL)
    server.models[0]["owned_by"] = "another-provider"
    assert JudgeIdentity.of_fingerprint(_judge(server.url).fingerprint()).provider == "another-provider"
    del server.models[0]["owned_by"]   # a server that names no provider: no identity to match a pin
    unnamed = _judge(server.url).fingerprint()
    assert unnamed.startswith(f"served:{MODEL}:") and JudgeIdentity.of_fingerprint(unnamed) is None


# ----------------------------------------------------------------------------- failures


def test_drip_feeding_server_is_cut_off_by_the_overall_deadline(server):
    # Each byte arrives within a per-read timeout (1 s < 1.5 s), so only an overall deadline
    # can cut the exchange: the client must hang up long before the ~100-byte drip ends. No
    # wall-clock bound is asserted (a loaded machine only makes the cut later, never absent).
    DRIPPED.clear()
    server.plan = [drip_body, drip_body]
    with pytest.raises(JudgeBackendError, match="gave up after 2 attempts.*within timeout_s=1.5"):
        _judge(server.url, timeout_s=1.5, max_retries=1, openai_verdict_methods=["free_text"]).complete([_messages()])
    server.plan = [drip_headers]
    with pytest.raises(JudgeBackendError, match="within timeout_s=1.5 \\(connect, headers and body\\)"):
        _judge(server.url, timeout_s=1.5, max_retries=0, openai_verdict_methods=["free_text"]).complete([_messages()])
    server.wait_idle()
    assert len(DRIPPED) == 3 and not any(d["finished"] for d in DRIPPED), DRIPPED
    assert all(d["sent"] < d["of"] // 2 for d in DRIPPED), DRIPPED


def _recording_judge(url: str, waits: list[float], **kw) -> OpenAICompatibleJudge:
    """A judge whose waits between attempts are recorded, not slept: no clock in the test."""
    judge = _judge(url, **kw)

    async def record(seconds: float) -> None:
        waits.append(seconds)

    judge.sleep = record
    return judge


def test_retry_after_is_honoured_up_to_the_cap(server):
    waits: list[float] = []
    server.plan = [status(429, "slow down", retry_after="2")]
    results = _recording_judge(server.url, waits, openai_verdict_methods=["free_text"]).complete([_messages()])
    assert results[0].verdict == "A" and waits == [2.0]  # waited as asked, not the 0 s backoff
    assert len(server.posts()) == 2

    waits.clear()
    server.plan = [status(503, "maintenance", retry_after="30")]  # beyond retry_after_max_s=5
    with pytest.raises(JudgeBackendError, match="Retry-After 30 s, more than judge.retry_after_max_s=5; not retried"):
        _recording_judge(server.url, waits, openai_verdict_methods=["free_text"]).complete([_messages()])
    assert waits == [] and len(server.posts()) == 3
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0 and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == pytest.approx(30.0)


@pytest.mark.parametrize("broken, reason", [
    (bad_status_line, "RemoteProtocolError"),
    (truncated, "RemoteProtocolError|ReadError"),
    (not_json, "not JSON"),
    (lambda h, r: send_json(h, {"object": "error"}), "no choices\\[0\\].message"),
])
def test_protocol_errors_and_malformed_responses_are_retried(server, broken, reason):
    server.plan = [broken]
    results = _judge(server.url, openai_verdict_methods=["free_text"]).complete([_messages()])
    assert results[0].verdict == "A" and len(server.posts()) == 2  # one failure, then a good answer

    server.plan = [broken] * 3
    with pytest.raises(JudgeBackendError, match=f"gave up after 3 attempts; last error: .*({reason})") as info:
        _judge(server.url, openai_verdict_methods=["free_text"]).complete([_messages()])
    assert "Traceback" not in str(info.value)


def test_oversized_response_is_refused(server):
    server.plan = [oversize]
    with pytest.raises(JudgeBackendError, match="larger than max_response_bytes=4096"):
        _judge(server.url, openai_verdict_methods=["free_text"]).complete([_messages()])
    assert len(server.posts()) == 1  # not retried: the same request would be as large again


def test_401_fails_at_once_and_500_is_retried(server):
    server.plan = [status(401, echo_key=253)]
    with pytest.raises(JudgeBackendError, match="HTTP 401") as info:
        _judge(server.url, openai_verdict_methods=["free_text"]).complete([_messages()])
    assert len(server.posts()) == 1 and not _fragments(str(info.value))
    server.plan = [status(500, "boom"), status(500, "boom")]
    results = _judge(server.url, openai_verdict_methods=["free_text"]).complete([_messages()])
    assert results[0].verdict == "A" and len(server.posts()) == 1 + 3
    server.plan = [status(500, echo_key=200)] * 3
    with pytest.raises(JudgeBackendError, match="gave up after 3 attempts; last error: HTTP 500") as info:
        _judge(server.url, openai_verdict_methods=["free_text"]).complete([_messages()])
    assert not _fragments(str(info.value)) and "[REDACTED]" in str(info.value)


# ----------------------------------------------------------------------------- the key


def test_the_key_check_fires_on_a_leak_and_never_on_paths_ports_or_numbers(tmp_path):
    # What the outputs of these tests hold besides a leak: pytest's first-run folders
    # (pytest-0, test_x0), loopback URLs with ports, counts and hashes.
    honest = (f"{tmp_path} /tmp/pytest-of-root/pytest-0/test_calibrate_cli_over_http0/calibration.json "
              "http://127.0.0.1:65535/v1 sk-test-0123456789 n_pairs=6 sha256:0123456789abcdef")
    assert _fragments(honest) == []
    for leak in (SECRET, SECRET[:6], SECRET[7:13], f"Bearer {SECRET[-8:]}"):
        assert _fragments(f"{honest} {leak}"), leak


@pytest.mark.parametrize("echo", [
    SECRET, f"padding {SECRET[:6]}", f"{SECRET[:-1]}", f"...{SECRET[4:14]}...", f"Bearer {SECRET}",
    f"{'=' * 297}{SECRET}", f"{SECRET[3:9]} and {SECRET[-6:]}",
])
def test_key_fragments_of_six_or_more_characters_never_survive(echo):
    redacted = Redactor(SECRET)(f"server said: {echo} (end)")
    assert not _fragments(redacted) and "[REDACTED]" in redacted and redacted.endswith("(end)")
    assert Redactor(SECRET)("nothing to hide") == "nothing to hide"
    assert Redactor(None)(SECRET) == SECRET


def test_echoed_key_stays_out_of_messages_outputs_and_the_cache(server, tmp_path):
    server.default = lambda request: _chat(f"[[A]] {'.' * 50} {request['headers']['authorization']} "
                                           f"{SECRET[2:12]}")
    judge = CachedJudge(inner=_judge(server.url, openai_verdict_methods=["free_text"]),
                        config=verdict_config(_settings(server.url)), cache_dir=tmp_path / "cache")
    results = judge.complete([_messages(i) for i in range(3)])
    assert [r.verdict for r in results] == ["A"] * 3
    assert all(not _fragments(r.raw_output) for r in results)
    cached = "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
    assert cached and not _fragments(cached)

    # the model list echoes the key too
    server.models = [{"id": f"x-{SECRET}"}]
    with pytest.raises(InputError) as info:
        _judge(server.url).fingerprint()
    assert not _fragments(str(info.value))


def test_unreachable_server_and_configuration_errors(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(JudgeBackendError, match="gave up after 2 attempts; last error: ConnectError"):
        _judge(f"http://127.0.0.1:{port}/v1", max_retries=1).complete([_messages()])
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(InputError, match=f"'{KEY_ENV}' but that environment variable is not set"):
        _judge("http://127.0.0.1:9/v1")
    assert redact_url("https://user:pw@host.example:8443/v1") == "https://host.example:8443/v1"
    with pytest.raises(InputError, match="embeds credentials") as info:
        _judge("https://user:hunter2@host.example/v1", api_key_env=None)
    assert "hunter2" not in str(info.value)


def test_concurrency_is_bounded_by_the_param(server):
    # Each request is held until three are in flight at once (an event, not a sleep), so the
    # peak is 3 whatever the machine's load; a client that allowed more would exceed it.
    active, peak, lock, three = [0], [0], threading.Lock(), threading.Event()

    def held(handler, request):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            if active[0] == 3:
                three.set()
        assert three.wait(60), "three requests were never in flight together"
        with lock:
            active[0] -= 1
        send_json(handler, _chat("[[B]]"))

    server.default = lambda request: held
    results = _judge(server.url, concurrency=3, openai_verdict_methods=["free_text"]).complete(
        [_messages(i) for i in range(10)])
    assert [r.verdict for r in results] == ["B"] * 10
    assert peak[0] == 3


# ----------------------------------------------------------------------------- the stage


def test_calibrate_cli_over_http_keeps_the_key_out_of_mlflow(server, tmp_path, split_data, tracking_uri):
    import mlflow
    from typer.testing import CliRunner

    from reappreg.cli import app

    train_dir, _ = split_data
    server.default = lambda r: _chat(f"A {SECRET}", [("A", 0.7), ("B", 0.3)])
    params = tmp_path / "params.yaml"
    params.write_text(
        "judge:\n  backend: openai\n"
        f"  model: {MODEL}\n  base_url: {server.url}\n  api_key_env: {KEY_ENV}\n  calibration_pairs: 6\n"
        f"  calibration_min_pairs: 6\n  backoff_s: 0\n  cache_dir: {tmp_path / 'cache'}\n",
        encoding="utf-8",
    )
    out, rows = tmp_path / "calibration.json", tmp_path / "calibration.jsonl"
    prompt = Path(__file__).resolve().parents[2] / "pipelines" / "prompts" / "judge_prompt.yaml"
    args = ["judge", "calibrate", "--train", str(train_dir), "--prompt-file", str(prompt), "--out", str(out),
            "--rows", str(rows), "--params", str(params)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(server.posts()) == 12 and not _fragments(result.output)
    assert not _fragments(out.read_text()) and not _fragments(str(params))
    metrics = read_json(out)
    assert metrics["n_pairs"] == 6 and metrics["position_bias_A"] == 1.0 and metrics["trusted"] is False
    assert metrics["unparseable_rate"] == 0.0 and metrics["verdict_method_rate"] == {"logprob": 1.0}
    assert metrics["judge_fingerprint"].startswith(f"served:{MODEL}:")
    assert len(read_jsonl(rows)) == 12 and not _fragments(rows.read_text())

    result = CliRunner().invoke(app, args)  # rerun: answered from the cache
    assert result.exit_code == 0 and len(server.posts()) == 12

    runs = mlflow.search_runs(experiment_names=["reappraisal-registry"], output_format="list")
    assert len(runs) == 2
    for run in runs:
        logged = json.dumps({**run.data.params, **run.data.tags, **run.data.metrics})
        assert not _fragments(logged)
        assert run.data.params["api_key_env"] == KEY_ENV
        assert run.data.tags["judge.trusted"] == "false"
        client = mlflow.MlflowClient()
        for artifact in client.list_artifacts(run.info.run_id):
            path = client.download_artifacts(run.info.run_id, artifact.path, str(tmp_path / "dl"))
            if Path(path).is_file():
                assert not _fragments(Path(path).read_text(errors="replace"))
