"""An OpenAI-compatible chat server on loopback that answers every request after a fixed delay.

    python benchmarks/llm_stub.py --port 8099 --latency 1.0

Real HTTP (uvicorn), any number of requests in flight, each answered `--latency` seconds after
it arrived, so a client's throughput is set by how many calls it keeps in flight. Replies are
scripted from the request's structured-output schema (`response_format`):

- kg's `Extraction`: one fact per message, read off the text by a fixed rule: the speaker
  ("I") LIKES the longest word of the turn, and about one turn in ten WORKS_AT an employer
  named by the turn's hash (a single-valued predicate, so later ones close earlier ones); the
  quote is the turn's first words, verbatim. `Resolution`: nothing to merge.
- any other schema (graphiti-core's): a generic reply that satisfies the JSON schema, its
  strings taken from the capitalised words of the request (names tend to repeat across
  Graphiti's calls, as real ones would), nullable times null, integers 0, one item per list.
  This is as close as a schema-driven script gets; Graphiti's pipeline runs every step on
  it, but what it extracts means little.

GET /stats returns the requests per schema name; POST /stats/reset zeroes them.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import time
from collections import Counter
from typing import Any

COUNTS: Counter[str] = Counter()
LATENCY = 1.0
ORGS = ("Acme", "Globex", "Initech", "Umbrella", "Hooli")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_CAPITAL = re.compile(r"\b[A-Z][a-z]{2,}\b")


def kg_extraction(messages: list[dict[str, Any]]) -> dict[str, Any]:
    user = messages[-1]["content"] if messages[-1]["role"] == "user" else messages[1]["content"]
    episode = user.split("EPISODE:\n", 1)[-1].strip()
    speaker, _, text = episode.partition(": ")
    words = _WORD.findall(text)
    if not text or not words:
        return {"entities": [], "facts": []}
    quote = " ".join(text.split()[:5])
    obj = max(words, key=lambda w: (len(w), w)).strip("'-").lower()
    h = int(hashlib.sha1(episode.encode()).hexdigest(), 16)
    facts = [
        {
            "subject": "I",
            "predicate": "LIKES",
            "object": obj,
            "fact": f"{speaker} likes {obj}",
            "quote": quote,
            "valid_at": None,
            "invalid_at": None,
        }
    ]
    if h % 10 == 0:
        org = ORGS[h // 10 % len(ORGS)]
        facts.append(
            {
                "subject": "I",
                "predicate": "WORKS_AT",
                "object": org,
                "fact": f"{speaker} works at {org}",
                "quote": quote,
                "valid_at": None,
                "invalid_at": None,
            }
        )
    return {"entities": [{"name": "I", "type": "Person"}], "facts": facts}


def generic(schema: dict[str, Any], messages: list[dict[str, Any]]) -> Any:
    text = " ".join(str(m.get("content", "")) for m in messages[-1:])
    pool = [w for w in _CAPITAL.findall(text) if w not in {"The", "You", "Your", "This"}]
    pool = list(dict.fromkeys(pool)) or ["Alice", "Bob"]
    defs = schema.get("$defs", {})
    counter = {"s": 0}

    def fill(node: dict[str, Any], key: str = "") -> Any:
        if "$ref" in node:
            return fill(defs[node["$ref"].split("/")[-1]], key)
        for alt in ("anyOf", "oneOf"):
            if alt in node:
                options = node[alt]
                nullable = any(o.get("type") == "null" for o in options)
                if nullable and (key.endswith("_at") or "date" in key or "time" in key):
                    return None
                return fill(next(o for o in options if o.get("type") != "null"), key)
        if "enum" in node:
            return node["enum"][0]
        kind = node.get("type")
        if kind == "object":
            props = node.get("properties", {})
            return {k: fill(v, k) for k, v in props.items()}
        if kind == "array":
            return [fill(node.get("items", {}), key)]
        if kind == "integer":
            return 0
        if kind == "number":
            return 0.5
        if kind == "boolean":
            return False
        if kind == "string":
            if "fact" in key or "summary" in key or "description" in key:
                return text[:120].strip() or "a fact"
            word = pool[counter["s"] % len(pool)]
            counter["s"] += 1
            return word
        return None

    return fill(schema)


def reply_for(body: dict[str, Any]) -> str:
    messages = body.get("messages", [])
    fmt = body.get("response_format") or {}
    spec = fmt.get("json_schema") or {}
    name = spec.get("name") or fmt.get("type") or "text"
    COUNTS[name] += 1
    if name == "Extraction":
        return json.dumps(kg_extraction(messages))
    if name == "Resolution":
        return json.dumps({"entities": [], "facts": []})
    schema = spec.get("schema") or fmt.get("schema")
    if schema is None:
        return "{}"
    return json.dumps(generic(schema, messages))


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path.endswith("/chat/completions"):
        t0 = time.monotonic()
        request = json.loads(body)
        text = reply_for(request)
        prompt = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
        await asyncio.sleep(max(0.0, LATENCY - (time.monotonic() - t0)))
        payload = {
            "id": "stub",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "stub"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {
                "prompt_tokens": prompt // 4,
                "completion_tokens": len(text) // 4,
                "total_tokens": prompt // 4 + len(text) // 4,
            },
        }
    elif path.endswith("/stats/reset"):
        COUNTS.clear()
        payload = {}
    elif path.endswith("/stats"):
        payload = dict(COUNTS)
    else:
        payload = {"data": [{"id": "stub", "object": "model"}], "object": "list"}
    data = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": data})


def main() -> None:
    global LATENCY
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    LATENCY = args.latency
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        backlog=2048,
        limit_concurrency=None,
    )


if __name__ == "__main__":
    main()
