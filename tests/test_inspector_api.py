"""The API calls the inspector added, at the service layer every route goes through: the
entity list, why-with-statements, corrections through the timeline, and retrying a failed
extraction."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kg import KG
from kg.errors import ExtractionError, InputError
from kg.ingest.llm import ScriptedLLM
from kg.schemas.episode import Channel
from kg.schemas.keys import Role
from kg.server.keys import Principal
from kg.server.models import Correction
from kg.server.service import ForbiddenError, Memory, Scoped
from tests.conftest import t


@pytest.fixture
async def memory(home: Path) -> AsyncIterator[tuple[Memory, ScriptedLLM]]:
    llm = ScriptedLLM([])
    async with await KG.open(home=home, llm=llm) as kg:
        yield Memory(kg), llm


def reply(subject: str, predicate: str, object: str, quote: str) -> str:
    """The LLM's answer: one fact with its quote."""
    fact = {
        "subject": subject,
        "predicate": predicate,
        "object": object,
        "quote": quote,
        "fact": f"{subject} {predicate} {object}",
    }
    return json.dumps({"entities": [], "facts": [fact]})


def as_role(memory: Memory, role: Role, channel: Channel = Channel.user) -> Scoped:
    """The inspector's user: a key on the user channel unless said otherwise."""
    return memory.scoped(Principal(key_id="k", group_id="default", role=role, channel=channel))


async def said(kg: KG, when: object, *facts: tuple[str, str, str]) -> None:
    await kg.add_episode(
        source="facts",
        reference_time=when,
        facts=[{"subject": s, "predicate": p, "object": o} for s, p, o in facts],
    )


async def test_entities_most_described_first_and_by_part_of_the_name(
    memory: tuple[Memory, ScriptedLLM],
) -> None:
    m, _ = memory
    await said(m.kg, t(2024), ("Alice", "LIVES_IN", "Paris"), ("Alice", "LIKES", "Tea"))
    await said(m.kg, t(2024), ("Bob", "LIVES_IN", "Paris"))
    read = as_role(m, Role.read)
    everyone = await read.entities(contains="", limit=100)
    assert [(e.entity.name, e.as_subject, e.as_object) for e in everyone][:2] == [
        ("Alice", 2, 0),
        ("Bob", 1, 0),
    ]
    assert {e.entity.name: e.as_object for e in everyone}["Paris"] == 2
    assert [e.entity.name for e in await read.entities(contains="ALI", limit=100)] == ["Alice"]
    assert [e.entity.name for e in await read.entities(contains="", limit=1)] == ["Alice"]


async def test_a_correction_is_a_user_episode_that_closes_the_old_value(
    memory: tuple[Memory, ScriptedLLM],
) -> None:
    m, _ = memory
    await said(m.kg, t(2020), ("Alice", "LIVES_IN", "Paris"))
    [paris] = await m.kg.facts(subject="Alice")
    with pytest.raises(ForbiddenError, match="'write' role"):
        await as_role(m, Role.read).correct(
            paris.edge.uuid, Correction(object="Lyon", valid_at=t(2023))
        )
    write = as_role(m, Role.write)
    with pytest.raises(InputError, match="already the value"):
        await write.correct(paris.edge.uuid, Correction(object="paris", valid_at=t(2023)))
    r = await write.correct(paris.edge.uuid, Correction(object="Lyon", valid_at=t(2023)))
    assert (r.summary.facts_added, r.summary.facts_closed) == (1, 1)
    [ep] = await m.kg.store.episodes("default", [r.episode_uuid])
    assert (ep.channel.value, ep.source.value) == ("user", "facts")
    assert [f.object for f in await m.kg.facts(subject="Alice")] == ["Lyon"]
    assert [f.object for f in await m.kg.facts(subject="Alice", valid_at=t(2022))] == ["Paris"]
    # Undone by rolling back the correction's episode.
    await m.kg.rollback([r.episode_uuid], dry_run=False)
    assert [f.object for f in await m.kg.facts(subject="Alice")] == ["Paris"]


async def test_correcting_a_multi_valued_fact_ends_the_old_value_then(
    memory: tuple[Memory, ScriptedLLM],
) -> None:
    m, _ = memory
    await said(m.kg, t(2020), ("Alice", "LIKES", "Tea"))
    [tea] = await m.kg.facts(subject="Alice")
    write = as_role(m, Role.write)
    with pytest.raises(InputError, match="must start after it began"):
        await write.correct(tea.edge.uuid, Correction(object="Coffee", valid_at=t(2019)))
    await write.correct(tea.edge.uuid, Correction(object="Coffee", valid_at=t(2023)))
    assert [f.object for f in await m.kg.facts(subject="Alice")] == ["Coffee"]
    assert [f.object for f in await m.kg.facts(subject="Alice", valid_at=t(2022))] == ["Tea"]


async def test_why_shows_what_each_supporting_episode_said(
    memory: tuple[Memory, ScriptedLLM],
) -> None:
    m, llm = memory
    llm._replies.append(reply("Alice", "LIVES_IN", "Paris", "I live in Paris now"))
    await m.kg.add_episode(
        source="text", content="Hello.\nAlice: I live in Paris now.\nBye.", reference_time=t(2024)
    )
    await said(m.kg, t(2024, 2), ("Alice", "LIVES_IN", "Paris"))
    [paris] = await m.kg.facts(subject="Alice")
    why = await as_role(m, Role.read).why_said(paris.edge.uuid)
    assert len(why.episodes) == 2
    passages = sorted((s.passage or "-") for s in why.statements)
    assert passages == ["-", "Alice: I live in Paris now."]


async def test_a_failed_extraction_is_retried_from_what_was_stored(
    memory: tuple[Memory, ScriptedLLM],
) -> None:
    m, llm = memory
    llm._replies += ["not json", "still not json"]
    with pytest.raises(ExtractionError):
        await m.kg.add_episode(source="text", content="Minji likes tea.", reference_time=t(2024))
    [failed] = await m.kg.store.find_episodes("default", None, None, include_rolled_back=True)
    assert failed.status == "failed"
    with pytest.raises(ForbiddenError):
        await as_role(m, Role.read).retry(failed.uuid)
    llm._replies.append(reply("Minji", "LIKES", "Tea", "Minji likes tea"))
    write = as_role(m, Role.write)
    r = await write.retry(failed.uuid)
    assert r.status == "added" and r.summary.facts_added == 1
    [episode] = await m.kg.store.find_episodes("default", None, None, include_rolled_back=True)
    assert episode.status == "ingested" and episode.valid_at == t(2024)
    with pytest.raises(InputError, match="not failed"):
        await write.retry(episode.uuid)
