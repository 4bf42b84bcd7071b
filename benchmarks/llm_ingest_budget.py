"""LLM budget of the conversation write path: calls, prompt tokens and engine time per episode.

    python benchmarks/llm_ingest_budget.py [DATA_DIR] [--conversations 2] [--bad-every 10]

Ingests LoCoMo dialogue turns (one message episode each, reference time = session time,
read as UTC) through the real extraction path: prompt building with context episodes,
validation, corrective retry, vetting, timeline planning, embedding-free atomic writes. The
LLM is a counting scripted client that answers instantly: for each turn it proposes one fact
quoted from the turn. Every `--bad-every`-th reply is malformed, so that the corrective retry
shows in the distribution. Engine time therefore excludes LLM latency. Prompt tokens are
estimated at 4 characters a token, on the real prompts kg builds.

Target (issue 3): at most 3 LLM calls per episode, whatever its size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.ingest.llm import Message, ScriptedLLM


class CountingLLM(ScriptedLLM):
    def __init__(self, bad_every: int) -> None:
        super().__init__([])
        self.bad_every = bad_every
        self.n = 0
        self.resolutions = 0

    async def _complete(self, messages: list[Message], schema: Any, name: str) -> Any:
        self.n += 1
        self._replies.append(self._answer(messages, name))
        return await super()._complete(messages, schema, name)

    def _answer(self, messages: list[Message], name: str) -> str:
        if self.bad_every and self.n % self.bad_every == 0:
            return '{"facts": [{"subject": 1}]}'  # invalid: forces the corrective retry
        if name == "Resolution":
            self.resolutions += 1
            return '{"entities": [], "facts": []}'  # nothing merged: the graph stays comparable
        episode = messages[1]["content"].split("EPISODE:\n", 1)[1]
        speaker, _, text = episode.partition(": ")
        words = text.split()
        quote = " ".join(words[:6]) or text
        topic = next((w.strip(".,!?") for w in words[1:] if w[:1].isupper()), "chat")
        fact = {
            "subject": speaker,
            "predicate": "MENTIONED",
            "object": topic or "chat",
            "fact": f"{speaker} mentioned {topic}",
            "quote": quote,
        }
        return json.dumps({"entities": [{"name": speaker, "type": "Person"}], "facts": [fact]})


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default=str(Path("../shared/data")))
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--bad-every", type=int, default=10)
    parser.add_argument(
        "--minilm", action="store_true", help="embed with MiniLM: cosine candidates for resolution"
    )
    args = parser.parse_args()
    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())
    convs = sorted({e["conv"] for e in data["episodes"]})[: args.conversations]
    turns = [e for e in data["episodes"] if e["conv"] in convs]

    llm = CountingLLM(args.bad_every)
    calls: Counter[int] = Counter()
    prompt_tokens: list[float] = []
    engine_ms: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kg-llm-bench-") as home:
        embedder = local_minilm() if args.minilm else None
        async with await KG.open(home=home, llm=llm, embedder=embedder) as kg:
            for e in turns:
                when = datetime.fromisoformat(e["valid_at"]).replace(tzinfo=UTC)
                t0 = time.perf_counter()
                r = await kg.add_episode(
                    source="message",
                    group_id=e["conv"],
                    content=f"{e['speaker']}: {e['text']}",
                    reference_time=when,
                    source_description=f"locomo {e['dia_id']}",
                )
                engine_ms.append((time.perf_counter() - t0) * 1000)
                calls[r.summary.llm_calls] += 1
                prompt_tokens.append(r.summary.prompt_tokens)
            facts = 0
            for c in convs:
                facts += (await kg.stats(c)).current_facts

    n = len(turns)
    print(
        f"# LLM budget on {n} LoCoMo turns ({', '.join(convs)}); every {args.bad_every}th "
        "reply malformed"
    )
    print("| LLM calls per episode | episodes | share |")
    print("|---|---|---|")
    for k in sorted(calls):
        print(f"| {k} | {calls[k]} | {100 * calls[k] / n:.1f}% |")
    print(f"\nmax calls per episode: {max(calls)} (target <= 3)")
    print(f"resolution calls: {llm.resolutions} ({100 * llm.resolutions / n:.1f}% of episodes)")
    print(
        f"prompt tokens per episode: mean {statistics.mean(prompt_tokens):.0f}, "
        f"p50 {pct(prompt_tokens, 50):.0f}, p95 {pct(prompt_tokens, 95):.0f}"
    )
    print(
        f"engine time per episode (no LLM latency): p50 {pct(engine_ms, 50):.1f} ms, "
        f"p95 {pct(engine_ms, 95):.1f} ms"
    )
    print(f"current facts after ingest: {facts}")
    if max(calls) > 3:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
