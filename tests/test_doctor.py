"""`kg doctor --llm URL`: a short self-test of an endpoint on kg's real extraction path."""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from kg.cli.app import app
from kg.ingest.doctor import TURNS, diagnose
from kg.ingest.llm import LLMUnavailableError, Message, ScriptedLLM

runner = CliRunner()


def paraphrasing(messages: list[Message]) -> str:
    """A small model's kind of reply: one fact a turn, its quote not quite the turn's words."""
    turn = messages[-1]["content"].split("EPISODE:\n", 1)[1]
    speaker, _, text = turn.partition(": ")
    if text.startswith("Hi"):
        return '{"facts": []}'
    quoted = " ".join(text.rstrip(".").split()[:8])
    obj = re.findall(r"[A-Za-z0-9]+", quoted)[-1]
    quote = quoted + " now"
    return json.dumps(
        {
            "facts": [
                {
                    "quote": quote,
                    "subject": speaker,
                    "predicate": "SAID",
                    "object": obj,
                    "fact": f"{speaker} said: {text}",
                    "valid_at": None,
                }
            ]
        }
    )


async def test_a_usable_small_model_is_reported_with_its_counts() -> None:
    llm = ScriptedLLM([paraphrasing] * 5, model="smollm2-135m-instruct")
    report = await diagnose(llm)
    assert (report.profile, report.turns, report.calls, report.valid_replies) == ("small", 5, 5, 5)
    assert report.facts_proposed == 4 and report.facts_kept == 4  # "Hi Tom!" states none
    # Found: Priya's library and cello, Tom's puppy and running; not Jane's move (said as Tom's).
    assert (report.facts_found, report.facts_expected) == (4, 5)
    assert report.usable and report.verdict.startswith("usable")


async def test_an_endpoint_whose_replies_never_validate_is_unusable_not_an_error() -> None:
    llm = ScriptedLLM(["{not json"] * 10, model="smollm2-135m-instruct")
    report = await diagnose(llm)
    assert (report.calls, report.valid_replies, report.failed_turns) == (10, 0, 5)
    assert not report.usable and "0% of the replies" in report.verdict
    assert len(report.errors) == 5


async def test_an_unreachable_endpoint_raises() -> None:
    with pytest.raises(LLMUnavailableError):
        await diagnose(ScriptedLLM([], model="m"))


class Endpoint:
    """An OpenAI-compatible server on loopback: lists one model, answers with `reply`."""

    def __init__(self, model: str, reply: Callable[[list[Message]], str]) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _send(self, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                listed = {"id": model, "object": "model", "created": 0, "owned_by": "x"}
                self._send({"object": "list", "data": [listed]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                self._send(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": model,
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {
                                    "role": "assistant",
                                    "content": reply(body["messages"]),
                                },
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 300,
                            "completion_tokens": 40,
                            "total_tokens": 340,
                        },
                    }
                )

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def endpoint() -> Iterator[Callable[[str, Callable[[list[Message]], str]], Endpoint]]:
    made: list[Endpoint] = []

    def make(model: str, reply: Callable[[list[Message]], str]) -> Endpoint:
        made.append(Endpoint(model, reply))
        return made[-1]

    yield make
    for e in made:
        e.close()


def test_doctor_over_http_picks_the_served_model_and_its_profile(endpoint: Any) -> None:
    server = endpoint("smollm2-135m-instruct", paraphrasing)
    r = runner.invoke(app, ["doctor", "--llm", server.url, "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert (report["model"], report["profile"], report["usable"]) == (
        "smollm2-135m-instruct",
        "small",
        True,
    )
    assert report["valid_rate"] == 1.0 and report["facts_kept"] == 4
    assert report["json_mode"] == "json_schema" and len(server.bodies) == len(TURNS)
    assert {b["model"] for b in server.bodies} == {"smollm2-135m-instruct"}
    r = runner.invoke(app, ["doctor", "--llm", server.url, "--turns", "2"])
    assert r.exit_code == 0 and "usable:" in r.stdout and "small" in r.stdout


def test_doctor_says_unusable_and_exits_1(endpoint: Any) -> None:
    server = endpoint("gemma-3-270m", lambda _: "Sure! Here are the facts: Priya works.")
    r = runner.invoke(app, ["doctor", "--llm", server.url, "--turns", "2"])
    assert r.exit_code == 1 and "unusable" in r.stdout and "0 of 4" in r.stdout


def test_doctor_on_a_dead_endpoint_is_one_line() -> None:
    from tests.local_llm import free_port

    r = runner.invoke(
        app,
        [
            "doctor",
            "--llm",
            f"http://127.0.0.1:{free_port()}/v1",
            "--llm-model",
            "m",
            "--timeout",
            "2",
        ],
    )
    assert r.exit_code == 1
    [line] = [x for x in r.stderr.splitlines() if x.startswith("kg: error:")]
    assert line.startswith("kg: error: doctor http://127.0.0.1:") and "Connection error" in line
