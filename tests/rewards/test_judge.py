"""LLMJudge against a local fake OpenAI-compatible server: parsing, garbage, timeouts, retries, cache, concurrency."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from posttrain.rewards import make_verifier, safe_verify, score_sync, verifier_id
from posttrain.rewards.judge import LLMJudge, parse_score
from posttrain.types import Task, VerdictStatus

T = Task(id="j", prompt="Explain why the sky is blue.", answer="Rayleigh scattering")


class FakeServer:
    """Replies from a script: each entry is (status, content, delay_s); the last entry repeats."""

    def __init__(self):
        self.script = [(200, "Score: 7/10", 0.0)]
        self.calls = 0
        self.bodies = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    index = min(fake.calls, len(fake.script) - 1)
                    fake.calls += 1
                    fake.bodies.append((self.path, body))
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                status, content, delay = fake.script[index]
                time.sleep(delay)
                with fake.lock:
                    fake.in_flight -= 1
                payload = ({"choices": [{"message": {"role": "assistant", "content": content}}]} if status == 200
                           else {"error": content})
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def judge(server, **kw):
    kw.setdefault("backoff_s", 0.01)
    return LLMJudge(base_url=server.url, model="fake-judge", **kw)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The response is fine.\nScore: 7/10", 0.7),
        ("**Score:** 8 / 10", 0.8),
        ("I'd give it 3 out of 5.", 0.6),
        ('{"score": 9, "reason": "good"}', 0.9),
        ('Verdict: {"score": 2.5}', 0.25),
        ("Score: 6", 0.6),
        ("10", 1.0),
        ("  4.\n", 0.4),
        ("Rating: 0", 0.0),
    ],
)
def test_parse_score(text, expected):
    assert parse_score(text, scale=10.0) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "I cannot grade this.", "Score: 12/10", "Score: -3", '{"score": "high"}', "Score: 5/0"])
def test_unparseable_scores(text):
    assert parse_score(text, scale=10.0) is None


def test_good_reply_sends_the_rubric_prompt(server):
    v = judge(server, rubric="Mention scattering.")
    out = safe_verify(v, T, "Because of Rayleigh scattering.")
    assert out.ok and out.score == pytest.approx(0.7) and out.passed
    path, body = server.bodies[0]
    assert path == "/v1/chat/completions" and body["model"] == "fake-judge"
    prompt = body["messages"][0]["content"]
    assert "Mention scattering." in prompt and "Because of Rayleigh scattering." in prompt and "Rayleigh scattering" in prompt
    assert out.verifier.startswith("judge@") and out.latency_s is not None


def test_garbage_reply_is_an_error_with_the_raw_text(server):
    server.script = [(200, "lorem ipsum \x00 no number", 0.0)]
    out = safe_verify(judge(server), T, "x")
    assert out.status is VerdictStatus.ERROR and "lorem ipsum" in out.details


def test_slow_server_times_out(server):
    server.script = [(200, "Score: 9/10", 2.0)]
    start = time.perf_counter()
    out = safe_verify(judge(server, request_timeout_s=0.2, max_retries=1), T, "x")
    assert out.status is VerdictStatus.TIMEOUT and "timed out" in out.details
    assert time.perf_counter() - start < 1.5 and server.calls == 2


def test_500_then_200_is_retried(server):
    server.script = [(500, "boom", 0.0), (429, "slow down", 0.0), (200, "Score: 5/10", 0.0)]
    out = safe_verify(judge(server, max_retries=3), T, "x")
    assert out.ok and out.score == pytest.approx(0.5) and server.calls == 3


def test_retries_exhausted_is_an_error(server):
    server.script = [(503, "down", 0.0)]
    out = safe_verify(judge(server, max_retries=2), T, "x")
    assert out.status is VerdictStatus.ERROR and "HTTP 503" in out.details and server.calls == 3


def test_client_errors_are_not_retried(server):
    server.script = [(400, "bad request", 0.0)]
    out = safe_verify(judge(server, max_retries=3), T, "x")
    assert out.status is VerdictStatus.ERROR and "400" in out.details and server.calls == 1


def test_connection_refused_is_an_error_not_a_crash():
    v = LLMJudge(base_url="http://127.0.0.1:9/v1", model="m", max_retries=1, backoff_s=0.01, request_timeout_s=1.0)
    out = safe_verify(v, T, "x")
    assert out.status in (VerdictStatus.ERROR, VerdictStatus.TIMEOUT) and "attempts" in out.details


def test_cache_hits_skip_the_server(server, tmp_path):
    path = str(tmp_path / "judge.sqlite")
    v = judge(server, cache_path=path)
    first = score_sync(v, [T, T], ["answer A", "answer B"])
    assert server.calls == 2
    again = score_sync(v, [T, T], ["answer A", "answer B"])
    assert server.calls == 2 and [o.score for o in again] == [o.score for o in first]
    fresh = judge(server, cache_path=path)  # a new process would find the replies on disk
    safe_verify(fresh, T, "answer A")
    assert server.calls == 2
    safe_verify(fresh, T, "answer C")
    assert server.calls == 3
    other_model = LLMJudge(base_url=server.url, model="other", cache_path=path)
    safe_verify(other_model, T, "answer A")
    assert server.calls == 4


def test_garbage_replies_are_not_cached(server):
    server.script = [(200, "no idea", 0.0), (200, "Score: 10/10", 0.0)]
    v = judge(server)
    assert safe_verify(v, T, "x").status is VerdictStatus.ERROR
    assert safe_verify(v, T, "x").score == pytest.approx(1.0) and server.calls == 2


def test_concurrency_limit(server):
    server.script = [(200, "Score: 6/10", 0.15)]
    v = judge(server, concurrency=2)
    start = time.perf_counter()
    out = score_sync(v, [T] * 6, [f"r{i}" for i in range(6)])
    assert all(o.ok for o in out) and server.max_in_flight == 2
    assert time.perf_counter() - start >= 0.4  # 6 requests, 2 at a time, 0.15 s each


def test_spec_registration_and_version():
    spec = {"type": "judge", "base_url": "http://127.0.0.1:1/v1", "model": "m"}
    a, b = make_verifier(spec), make_verifier(spec)
    assert verifier_id(a) == verifier_id(b)
    assert verifier_id(a) != verifier_id(make_verifier({**spec, "rubric": "Be strict."}))
    with pytest.raises(ValueError, match="template"):
        make_verifier({**spec, "template": "{nonsense}"})
    with pytest.raises(ValueError, match="scale"):
        make_verifier({**spec, "scale": 0})


def test_task_rubric_overrides_and_json_scores(server):
    server.script = [(200, 'Reasoning... {"score": 4}', 0.0)]
    task = Task(id="k", prompt="p", meta={"rubric": "Task-specific rubric."})
    out = safe_verify(judge(server, scale=5), task, "resp")
    assert out.score == pytest.approx(0.8)
    assert "Task-specific rubric." in server.bodies[0][1]["messages"][0]["content"]
