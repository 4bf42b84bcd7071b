"""Erasure deletes physically: afterwards nothing of the subject is in the graph or its indexes,
on both backends; on disk, nothing on FalkorDB, and on Neo4j what the receipt says remains
(its transaction logs and store files) until the procedure in docs/production.md runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kg import KG, InputError
from kg.schemas.store import PendingErasure
from kg.store import open_store
from kg.store.falkordb import FalkorDBStore
from kg.store.neo4j import Neo4jStore
from tests.conftest import Backend, add, objects, open_test_kg, t
from tests.disk import written_to_file
from tests.falkordb_server import falkordb_server
from tests.queue_llm import RuleLLM
from tests.store_probe import (
    QUERY_LOG_FLUSH_SECONDS,
    files_containing,
    fulltext_hits,
    graph_dump,
    query_logs,
)
from tests.test_neo4j_offline import FakeDriver, parse

SECRET = "Zebulon Quisling"


async def flushed(kg: KG) -> None:
    """FalkorDB: wait until acknowledged writes are in its files (tests.disk)."""
    if isinstance(kg.store, FalkorDBStore):
        await written_to_file(kg.store)


async def test_erasing_a_subject_leaves_no_trace(kg: KG, backend: Backend, home: Path) -> None:
    files = backend.files(home)
    await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"), (SECRET, "KNOWS", "Bob"))
    await add(kg, t(2021), ("Bob", "KNOWS", SECRET), ("Bob", "LIVES_IN", "Daegu"))
    await add(kg, t(2022), ("Bob", "LIVES_IN", "Daegu"), ("Carol", "KNOWS", "Bob"))
    await add(kg, t(2023), (SECRET, "WORKS_AT", "Acme"))
    rolled = await add(kg, t(2024), (SECRET, "LIVES_IN", "Busan"))
    await kg.rollback(rolled.episode_uuid, dry_run=False)  # rolled-back episodes hold text too
    # A turn naming the subject, and the reply after it: the reply's search key holds the
    # turn before it (kg.search_keys), so erasure must rebuild that key.
    for i, text in enumerate((f"Ann: I ran into {SECRET} at the market.", "Bo: Tell me more!")):
        await kg.add_episode(
            source="message",
            content=text,
            reference_time=t(2024, 2 + i),
            session_id="chat",
            extract=False,
        )
    # The searches below can find the subject: it is everywhere before erasure.
    assert "quisling" in await graph_dump(kg)
    assert await fulltext_hits(kg, "default", "Quisling") > 0
    await flushed(kg)
    assert files is None or files_containing(files, SECRET)

    receipt = await kg.erase_entity(SECRET.lower())
    assert receipt.subject == SECRET
    # 2020, 2021, 2023, the rolled-back 2024 one and the turn naming it
    assert receipt.episodes_deleted == 5
    assert "quisling" not in await graph_dump(kg)
    assert "zebulon" not in await graph_dump(kg)
    assert await fulltext_hits(kg, "default", "Quisling") == 0
    assert await fulltext_hits(kg, "default", "Zebulon") == 0
    reply = await kg.search("Tell me more", recipe="episodes_bm25")
    assert [h.episode.search_key for h in reply.episodes] == ["Bo: Tell me more!"]
    await files_after_erasure(backend, files, receipt.files_compacted, receipt.residue)
    if isinstance(kg.store, FalkorDBStore):  # nor in what the server keeps of its queries
        assert "quisling" not in await query_logs(kg.store.client.connection)

    # Other subjects keep what other episodes support, and lose only what the erased ones did.
    assert objects(await kg.facts(subject="Bob", predicate="LIVES_IN")) == ["Daegu"]
    assert objects(await kg.facts(subject="Carol")) == ["Bob"]
    assert await kg.facts(object=SECRET) == []
    assert await kg.facts(object="Acme") == []  # only the erased episode named it
    [event] = [e for e in await kg.log() if e.kind == "erasure"]
    assert "quisling" not in event.model_dump_json().lower()

    # And it stays gone across a restart (the AOF replays only the rewritten data set).
    await kg.close()
    async with await open_test_kg(backend, home) as again:
        assert "quisling" not in await graph_dump(again)


# Where a Neo4j 5.26 store keeps what it held (a path part), and what the receipt calls it.
RESIDUE_KINDS = (
    ("transactions/", "transaction logs"),
    ("neostore.", "store records"),
    ("fulltext", "full-text index"),
    ("range-", "range index"),
)


async def files_after_erasure(
    backend: Backend, files: Path | None, compacted: bool, residue: str | None
) -> None:
    """FalkorDB rewrites its files online: nothing remains. Neo4j cannot (its logs keep the
    bytes until pruned, freed records and index entries until reused or merged): the files
    hold the name, and the receipt names each kind of file that does."""
    if backend.name == "falkordb":
        assert compacted and residue is None
        assert files is not None and files_containing(files, "Quisling") == []
    else:
        assert not compacted and residue is not None
        assert "docs/production.md" in residue and "export every group" in residue
        if files is not None:  # a server this session started: its files can be read
            found = files_containing(files, "Quisling")
            assert found
            for path in found:  # the receipt names every kind of file that holds it
                assert any(kind in residue for where, kind in RESIDUE_KINDS if where in path), path


async def test_erasing_a_group_leaves_no_trace_and_spares_others(
    kg: KG, backend: Backend, home: Path
) -> None:
    files = backend.files(home)
    await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"), group_id="tenant-x")
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Busan"), group_id="tenant-y")
    await flushed(kg)  # acknowledged is not yet written under everysec
    assert files is None or files_containing(files, SECRET)
    receipt = await kg.erase_group("tenant-x")
    assert (receipt.episodes_deleted, receipt.entities_deleted) == (1, 2)
    assert await kg.groups() == ["tenant-y"]
    assert "quisling" not in await graph_dump(kg)
    await files_after_erasure(backend, files, receipt.files_compacted, receipt.residue)
    assert objects(await kg.facts(group_id="tenant-y", subject="Alice")) == ["Busan"]
    assert (await kg.stats("tenant-x")).episodes == 0


async def test_erasing_an_unknown_subject_is_an_error(kg: KG) -> None:
    with pytest.raises(InputError, match="no entity named 'Nobody'"):
        await kg.erase_entity("Nobody")


async def test_the_file_scan_sees_inside_compressed_rdb_strings(falkor_kg: KG, home: Path) -> None:
    """Why the scans above decompress: once compacted, text lives in the RDB base, where
    strings are LZF-compressed and a name can be split between a back reference and a literal
    run. Spelled after its first word, the name is always split so (its second "Zebulon" is a
    back reference). Where a literal run happens to end depends on what is compressed before
    the text (uuids, times), so a name split only by that was found whole now and then."""
    first = SECRET.split()[0]
    text = f"Entry: {first}, that is {SECRET}, chaired; " + "the agenda was read. " * 3
    kg = falkor_kg
    await kg.add_episode(source="text", content=text, reference_time=t(2020), extract=False)
    await kg.store.compact()
    base = ["falkordb/appendonlydir/appendonly.aof.2.base.rdb"]
    assert files_containing(home, SECRET) == base
    assert files_containing(home, SECRET, decompress=False) == []  # a plain scan is fooled


# Full-width letters (NFKC folds them), a double space, a newline, a no-break space, capitals.
FULL_WIDTH = "Minji Kim".translate({c: c + 0xFEE0 for c in range(0x21, 0x7F)})
SPELLINGS = [FULL_WIDTH, "Minji  Kim", "Minji\nKim", "Minji\u00a0Kim", "MINJI KIM"]


async def test_erasure_reaches_every_spelling_kg_folds_to_the_entity(
    kg: KG, backend: Backend, home: Path
) -> None:
    """On both backends in the graph; on disk, FalkorDB's files (Neo4j keeps a residue)."""
    disk = home if backend.name == "falkordb" else None
    await add(kg, t(2020), ("Minji Kim", "LIVES_IN", "Seoul"))
    for i, spelling in enumerate(SPELLINGS):
        await kg.add_episode(
            source="text",
            content=f"Note {i}: {spelling} called about the lease.",
            reference_time=t(2021, 1, i + 1),
            extract=False,
        )
    # JSON episodes carry escapes ("\u00a0", "\n") that stand for the same characters.
    await kg.add_episode(
        source="json",
        content=json.dumps({"who": "Minji\u00a0Kim"}),
        reference_time=t(2022),
        extract=False,
    )
    kept = ["Minjik Kimchi ordered lunch.", "Kim Minji is someone else's name order."]
    for i, text in enumerate(kept):
        await kg.add_episode(
            source="text", content=text, reference_time=t(2023, 1, i + 1), extract=False
        )

    on_disk = (
        FULL_WIDTH,
        "Minji Kim",
        "Minji  Kim",
        "Minji\nKim",
        "Minji\u00a0Kim",
        "u00a0Kim",
        "the lease",
    )
    await flushed(kg)
    if disk:
        assert [n for n in on_disk if not files_containing(disk, n)] == []  # the scan sees them

    receipt = await kg.erase_entity("minji kim")
    assert receipt.episodes_deleted == 1 + len(SPELLINGS) + 1
    dump = await graph_dump(kg)
    for needle in (
        FULL_WIDTH.lower(),
        "minji kim",
        "minji  kim",
        "minji\\nkim",
        "minji\u00a0kim",
        "minji\\u00a0kim",
        "lease",
    ):
        assert needle not in dump, needle
    for needle in on_disk if disk else ():
        assert files_containing(disk, needle) == [], needle
    assert "minjik kimchi" in dump and "kim minji" in dump  # not the same name: kept


def _erase_until_compaction(home: Path, what: str) -> str:
    """A kg process that erases, then stops right after the graph delete, before the
    compaction: it prints its pids when there, and waits to be killed."""
    return textwrap.dedent(f"""
        import asyncio
        from kg import KG

        async def main():
            kg = await KG.open(home={str(home)!r})
            store = kg.store

            async def stop_here():
                while (await store.client.connection.info("persistence"))["aof_buffer_length"]:
                    await asyncio.sleep(0.01)  # the delete is in the file: kill now
                print(store.server.pid, flush=True)
                await asyncio.sleep(3600)

            store.compact = stop_here
            await {what}

        asyncio.run(main())
    """)


async def _kill_between_delete_and_compaction(home: Path, what: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _erase_until_compaction(home, what),
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[1],
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    server = int(line)
    os.kill(server, signal.SIGKILL)
    proc.kill()  # SIGKILL too: no close, no cleanup of any kind
    await proc.wait()
    assert proc.returncode == -signal.SIGKILL


async def _seed(home: Path) -> None:
    async with await KG.open(home=home) as kg:
        await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"), ("Bob", "KNOWS", SECRET))
        await add(kg, t(2021), ("Bob", "LIVES_IN", "Daegu"))


async def test_an_erasure_killed_before_compaction_is_finished_by_running_it_again(
    home: Path,
) -> None:
    await _seed(home)
    await _kill_between_delete_and_compaction(home, f"kg.erase_entity({SECRET!r})")
    assert files_containing(home, SECRET)  # the graph delete happened; the log still has it

    # Opened without finishing pending work (KG.open would), so the re-run is what finishes.
    store = await open_store(home=home)
    async with KG(store) as kg:
        assert await kg.facts(subject=SECRET) == []
        receipt = await kg.erase_entity(SECRET)
        assert receipt.resumed and receipt.files_compacted and receipt.compacted_at is not None
        assert receipt.episodes_deleted == 1 and receipt.subject == SECRET
        assert await kg.store.pending_erasures() == []
        assert "quisling" not in await graph_dump(kg)
        assert objects(await kg.facts(subject="Bob")) == ["Daegu"]
        with pytest.raises(InputError, match="no entity named"):  # done: nothing pending
            await kg.erase_entity(SECRET)
    assert files_containing(home, "Quisling") == []


async def test_an_interrupted_erasure_is_finished_on_the_next_open(home: Path) -> None:
    await _seed(home)
    await _kill_between_delete_and_compaction(home, f"kg.erase_entity({SECRET!r})")
    assert files_containing(home, SECRET)
    async with await KG.open(home=home) as kg:
        assert await kg.store.pending_erasures() == []
        assert "quisling" not in await graph_dump(kg)
    assert files_containing(home, "Quisling") == []


async def test_an_interrupted_group_erasure_is_finished_on_the_next_open(home: Path) -> None:
    async with await KG.open(home=home) as kg:
        await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"), group_id="tenant-x")
        await add(kg, t(2020), ("Alice", "LIVES_IN", "Busan"), group_id="tenant-y")
    await _kill_between_delete_and_compaction(home, 'kg.erase_group("tenant-x")')
    assert files_containing(home, SECRET)
    async with await KG.open(home=home) as kg:
        assert await kg.groups() == ["tenant-y"]
        assert await kg.store.pending_erasures() == []
    assert files_containing(home, "Quisling") == []


async def test_a_pending_erasure_record_holds_no_erased_text(kg: KG) -> None:
    await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"))
    seen: list[str] = []
    record = kg.store.record_erasure

    async def spy(erasure: PendingErasure) -> None:
        seen.append(erasure.model_dump_json())
        await record(erasure)

    kg.store.record_erasure = spy  # type: ignore[method-assign]
    await kg.erase_entity(SECRET)
    assert len(seen) == 2  # before the delete, and with exact counts after it
    assert not any(word in s.lower() for s in seen for word in ("zebulon", "quisling", "seoul"))


async def test_neo4j_keeps_erasure_records_outside_every_group() -> None:
    """Offline: the record is a node with no group_id (a group's drop deletes by group_id),
    and every statement parses."""
    driver = FakeDriver()
    store = Neo4jStore(driver, "neo4j", embedding_dim=None)
    record = PendingErasure(uuid="e1", group_id="g", kind="group", created_at=t(2024))
    await store.record_erasure(record)
    await store.clear_erasure("e1")
    assert await store.pending_erasures() == []
    [[(write, params)], [(clear, _)]] = driver.transactions
    assert "group_id" not in write and "group_id" not in params
    assert PendingErasure.model_validate_json(params["record"]) == record
    for query in (write, clear, *(q for q, _ in driver.reads)):
        parse(query)


async def test_a_killed_servers_temp_rewrite_file_is_removed_at_start(home: Path) -> None:
    """A rewrite child outlives a SIGKILLed server and leaves its temp file, a copy of the data
    from before the erasure (seen once in the interrupted-erasure test above): the next start
    removes it."""
    await _seed(home)
    dead = [home / "falkordb" / "temp-rewriteaof-bg-4242.aof", home / "falkordb" / "temp-4242.rdb"]
    for path in dead:
        path.write_text(f"SET x {SECRET}")
    async with await KG.open(home=home) as kg:
        await kg.erase_entity(SECRET)
    assert [p for p in dead if p.exists()] == []
    assert files_containing(home, "Quisling") == []


async def _named_then_erased(kg: KG) -> None:
    """Issue 23's sequence at the facade (the HTTP server adds nothing FalkorDB logs): the
    subject written, corrected, the correction rolled back, searched, then erased. Each step
    waits out FalkorDB's query-log task, as a longer session does: a server that logs queries
    has then moved them into its stream, where an erasure used to leave them."""
    await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"), (SECRET, "KNOWS", "Bob"))
    correction = await add(kg, t(2021), (SECRET, "LIVES_IN", "Busan"))
    await kg.add_episode(
        source="text",
        content=f"{SECRET} phoned about the lease.",
        reference_time=t(2022),
        extract=False,
    )
    await kg.rollback(correction.episode_uuid, dry_run=False)
    assert (await kg.search(SECRET)).facts
    await asyncio.sleep(QUERY_LOG_FLUSH_SECONDS)
    await kg.erase_entity(SECRET)
    await asyncio.sleep(QUERY_LOG_FLUSH_SECONDS)  # the erasure's own queries name it too
    await kg.store.compact()  # what the next fold would write from memory


async def test_the_embedded_server_keeps_no_query_log_an_erasure_misses(
    falkor_kg: KG, home: Path
) -> None:
    conn = falkor_kg.store.client.connection  # type: ignore[attr-defined]
    await _named_then_erased(falkor_kg)
    assert "quisling" not in await query_logs(conn)
    assert files_containing(home, "Quisling") == []


async def test_erasure_reaches_an_external_falkordbs_query_log(tmp_path: Path) -> None:
    """A server kg does not start keeps its operator's settings (query log on, FalkorDB's
    default): kg blocks its groups' streams and empties the slow logs; its files are
    compacted as the embedded server's are."""
    data = tmp_path / "external"
    with falkordb_server(data) as uri:
        async with await KG.open(uri) as kg:
            conn = kg.store.client.connection  # type: ignore[attr-defined]
            assert await conn.execute_command("GRAPH.CONFIG", "GET", "CMD_INFO") == [
                "CMD_INFO",
                True,
            ]
            await _named_then_erased(kg)
            assert "quisling" not in await query_logs(conn)
            assert await conn.type("telemetry{default}") == "string"
        assert files_containing(data, "Quisling") == []


async def test_erasure_reaches_hyphenated_and_joined_spellings(
    kg: KG, backend: Backend, home: Path
) -> None:
    """'Minji-Kim' and 'MinjiKim' name Minji Kim, in text and as entities of their own."""
    await add(kg, t(2020), ("Minji Kim", "LIVES_IN", "Seoul"))
    await add(kg, t(2021), ("Minji-Kim", "WORKS_AT", "Naver"), ("MinjiKim", "LIKES", "jazz"))
    for i, spelling in enumerate(("Minji-Kim", "MinjiKim", "minji_kim", "Minji \u2013 Kim")):
        await kg.add_episode(
            source="text",
            content=f"Note {i}: {spelling} called about the lease.",
            reference_time=t(2022, 1, i + 1),
            extract=False,
        )
    kept = [
        "Minjik Kimchi ordered lunch.",
        "Kim Minji is someone else's name order.",
        "MinjiKimchi is a dish.",
    ]
    for i, text in enumerate(kept):
        await kg.add_episode(
            source="text", content=text, reference_time=t(2023, 1, i + 1), extract=False
        )
    receipt = await kg.erase_entity("Minji Kim")
    assert receipt.episodes_deleted == 2 + 4 and receipt.entities_deleted >= 3
    dump = await graph_dump(kg)
    for needle in (
        "minji kim",
        "minji-kim",
        'minjikim"',
        "minji_kim",
        "minji \u2013 kim",
        "lease",
        "naver",
        "jazz",
    ):
        assert needle not in dump, needle
    assert all(text.lower() in dump for text in kept)  # other names: kept
    await flushed(kg)
    if backend.name == "falkordb":
        for needle in ("Minji-Kim", "MinjiKim called", "minji_kim"):
            assert files_containing(home, needle) == [], needle


async def _shared_episode(kg: KG) -> str:
    """Jun Park and Minji's pet in one episode (issue 23 item 10), and one only about Minji."""
    shared = await add(
        kg,
        t(2020),
        ("Jun Park", "KNOWS", "Minji"),
        ("Minji", "HAS_PET", "Mochi"),
        {
            "subject": "Minji",
            "predicate": "LIKES",
            "object": "tennis",
            "fact": "Minji plays tennis with Jun Park",
        },
        source_description="chat with Jun Park",
    )
    await add(kg, t(2021), ("Minji", "LIVES_IN", "Seoul"))
    return shared.episode_uuid


def _others(changes: list[Any]) -> list[str]:
    return sorted(f"{c.subject} {c.predicate} {c.object}" for c in changes)


async def test_an_erasure_dry_run_lists_other_subjects_facts_that_go(kg: KG) -> None:
    await _shared_episode(kg)
    before = await graph_dump(kg)
    preview = await kg.erase_entity("Jun Park", dry_run=True)
    assert preview.dry_run and not preview.files_compacted and preview.episodes_deleted == 1
    assert _others(preview.other_facts_removed) == ["Minji HAS_PET Mochi", "Minji LIKES tennis"]
    assert await graph_dump(kg) == before  # nothing erased
    receipt = await kg.erase_entity("Jun Park")  # the real one lists them too
    assert _others(receipt.other_facts_removed) == _others(preview.other_facts_removed)
    assert not receipt.dry_run and receipt.other_facts_kept == []
    assert await kg.facts(subject="Minji", predicate="HAS_PET") == []
    assert objects(await kg.facts(subject="Minji", predicate="LIVES_IN")) == ["Seoul"]


async def test_an_erasure_can_keep_other_subjects_facts_from_a_redacted_copy(kg: KG) -> None:
    shared = await _shared_episode(kg)
    preview = await kg.erase_entity("Jun Park", dry_run=True, keep_others=True)
    assert _others(preview.other_facts_kept) == ["Minji HAS_PET Mochi", "Minji LIKES tennis"]
    assert preview.other_facts_removed == [] and preview.redacted_copies == 1
    receipt = await kg.erase_entity("Jun Park", keep_others=True)
    assert _others(receipt.other_facts_kept) == _others(preview.other_facts_kept)
    assert receipt.redacted_copies == 1 and receipt.episodes_deleted == 1
    [pet] = await kg.facts(subject="Minji", predicate="HAS_PET")
    [tennis] = await kg.facts(subject="Minji", predicate="LIKES")
    assert pet.object == "Mochi" and tennis.edge.fact == "Minji plays tennis with [erased]"
    assert pet.edge.valid_at == t(2020)  # re-asserted as it was said
    [copy] = (await kg.why(pet.edge.uuid)).episodes
    assert copy.uuid != shared and copy.name.startswith(f"redacted copy of episode {shared}")
    assert "jun" not in copy.content.lower() and copy.source_description == "chat with [erased]"
    assert "jun park" not in await graph_dump(kg)
    assert await kg.facts(subject="Jun Park") == [] and await kg.facts(object="Jun Park") == []
    assert [
        e.uuid
        for e in await kg.store.episodes_mentioning("default", pet.edge.source_node_uuid)
        if e.uuid == copy.uuid
    ] == [copy.uuid]


async def test_a_redacted_message_loses_the_subjects_lines(backend: Backend, home: Path) -> None:
    """An extracted message: the copy keeps the other speaker's line and the fact from it;
    the subject's own line goes whole (its name cut, "I live in Quito" would still be his)."""
    async with await open_test_kg(backend, home, llm=RuleLLM()) as kg:
        await kg.add_episode(
            source="message",
            reference_time=t(2024, 1, 1),
            content="Jun Park: I live in Quito.\nMinji: I like jazz.",
        )
        receipt = await kg.erase_entity("Jun Park", keep_others=True)
        assert _others(receipt.other_facts_kept) == ["Minji LIKES jazz"]
        [jazz] = await kg.facts(subject="Minji")
        [copy] = (await kg.why(jazz.edge.uuid)).episodes
        assert copy.content == "Minji: I like jazz." and copy.status.value == "ingested"
        dump = await graph_dump(kg)
        assert "jun park" not in dump and "quito" not in dump
        found = await kg.search("jazz", recipe="episodes_bm25")
        assert [h.episode.uuid for h in found.episodes] == [copy.uuid]
