"""A tiny OpenAI-compatible chat server on loopback, for the rehearsal's judge (backend `openai`).

It answers ``POST /v1/chat/completions`` with a verdict derived from a hash of the request's
messages ("[[A]]", "[[B]]" or, rarely, "[[tie]]"): deterministic, so a rerun hits the same
verdicts, and position-blind, so it says nothing about quality -- it exercises the transport,
the both-orders bookkeeping and the parsing, not judging. ``GET /v1/models`` lists the one
served model. It binds 127.0.0.1 only and serves until stopped.

    python tests/openai_loopback.py --port 8000 --model rehearsal-judge
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERDICTS = ("[[A]]", "[[B]]", "[[A]]", "[[B]]", "[[tie]]")


def verdict_for(messages: list) -> str:
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode("utf-8")).digest()
    return VERDICTS[digest[0] % len(VERDICTS)]


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackServer

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        if body.get("model") != self.server.model:
            self._send(404, {"error": {"message": f"model {body.get('model')!r} is not served (serving {self.server.model!r})"}})
            return
        messages = body.get("messages") or []
        n = int(body.get("n") or 1)
        text = verdict_for(messages)
        with self.server.lock:
            self.server.requests += 1
        self._send(200, {
            "id": f"chatcmpl-{self.server.requests}", "object": "chat.completion", "created": int(time.time()),
            "model": self.server.model,
            "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                        for i in range(n)],
            "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
        })


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, model: str = "rehearsal-judge"):
        super().__init__(("127.0.0.1", port), _Handler)
        self.model = model
        self.requests = 0
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def start(self) -> LoopbackServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible loopback judge for the rehearsal profile")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="rehearsal-judge")
    args = parser.parse_args()
    server = LoopbackServer(args.port, args.model)
    print(f"serving {args.model} at {server.base_url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
