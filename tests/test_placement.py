"""Groups placed on several store servers (kg.store.placed, kg.placement): each group's calls
reach the store its row names, a process with a stale placement finds a moved group, and a
move between servers loses and doubles nothing, with a writer running throughout, and leaves
every as-of answer as it was."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from kg import KG
from kg.cli import app
from kg.cli.config_file import defaults_for
from kg.errors import InputError
from kg.ingest.embeddings import embedder_named
from kg.placement import move_group
from kg.schemas.graph import Fact
from kg.schemas.store import Placement
from kg.store.placed import PlacedStore, parse_stores
from kg.transfer import export_lines, import_lines
from tests.conftest import add, fact, t
from tests.neo4j_server import Neo4jServer

runner = CliRunner()


def falkor_pair(tmp_path: Path) -> str:
    return f"a=embedded:{tmp_path / 'a'},b=embedded:{tmp_path / 'b'}"


def placed(kg: KG) -> PlacedStore:
    assert isinstance(kg.store, PlacedStore)
    return kg.store


def rows(facts: list[Fact]) -> list[dict[str, object]]:
    return sorted((f.as_row() for f in facts), key=lambda r: str(r["uuid"]))


# -- routing ----------------------------------------------------------------------------------


async def test_first_write_places_the_group_and_its_calls_go_there(tmp_path: Path) -> None:
    """A new group goes to the first store, its row in the directory (here the second): the
    directory holds the row and nothing of the group, and every read finds the group."""
    async with await KG.open(stores=falkor_pair(tmp_path), placement="b", group_id="g") as kg:
        store = placed(kg)
        await add(kg, t(2021), ("Minji", "LIVES_IN", "Seoul"))
        assert await store.directory.placements() == [Placement(group_id="g", store="a")]
        assert await store.stores["a"].has_group("g")
        assert not await store.stores["b"].has_group("g")
        assert [f.object for f in await kg.facts(subject="Minji")] == ["Seoul"]
        assert await store.groups() == ["g"]


async def test_a_stale_placement_finds_the_moved_group(tmp_path: Path) -> None:
    """Another process moves the group: this one, whose cache still names the old store,
    reads it and writes to it where it is now (the source says absent: the row is read)."""
    stores = falkor_pair(tmp_path)
    async with await KG.open(stores=stores, group_id="g") as mover:
        await add(mover, t(2021), ("Minji", "LIVES_IN", "Seoul"))
        async with await KG.open(stores=stores, group_id="g", attach=True) as other:
            assert [f.object for f in await other.facts(subject="Minji")] == ["Seoul"]
            assert await placed(other).where("g") == ("a", False)  # cached
            # Shared through the mover's embedded servers, and said so (kg.cli's notes).
            assert (placed(other).owner_pid, placed(mover).owner_pid) == (os.getpid(), None)
            await move_group(placed(mover), "g", "b")
            assert [f.object for f in await other.facts(subject="Minji")] == ["Seoul"]
            await add(other, t(2023), ("Minji", "LIVES_IN", "Busan"))
            assert await placed(other).where("g") == ("b", False)
        assert not await placed(mover).stores["a"].has_group("g")
        history = await mover.history(subject="Minji")
        assert [f.object for f in history] == ["Seoul", "Seoul", "Busan"]


def test_stores_list_errors() -> None:
    assert parse_stores("a=embedded:/x, b=bolt://h:7687") == {
        "a": "embedded:/x",
        "b": "bolt://h:7687",
    }
    for bad, says in [
        ("a", "is not NAME=URI"),
        ("a=x,a=y", "named twice"),
        ("a b=x", "letters, digits"),
        ("=x", "is not NAME=URI"),
    ]:
        with pytest.raises(InputError, match=says):
            parse_stores(bad)


# -- bad input: one line, nothing changed ---------------------------------------------------


def cli(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["--stores", falkor_pair(tmp_path), "--group", "g", *args])
    return r.exit_code, r.stdout, r.stderr


def test_bad_moves_are_one_line_errors_that_change_nothing(tmp_path: Path) -> None:
    row = {"subject": "Minji", "predicate": "LIVES_IN", "object": "Seoul"}
    episode = {"source": "facts", "reference_time": "2021-01-01", "facts": [row]}
    (tmp_path / "e.jsonl").write_text(json.dumps(episode) + "\n")
    assert cli(tmp_path, "ingest", str(tmp_path / "e.jsonl"))[0] == 0
    before = cli(tmp_path, "placement", "show", "--json")
    assert before[0] == 0 and '"store": "a"' in before[1]
    for args, says in [
        (("g", "--to", "zz"), "no store 'zz'; the stores are: a, b"),
        (("nope", "--to", "b"), "no group 'nope' on its store 'a'"),
        (("g", "--to", "a"), "group 'g' is on store 'a' already"),
    ]:
        code, _, err = cli(tmp_path, "placement", "move", *args)
        assert code == 1
        assert err.strip().count("\n") == 0 and says in err, err
    assert cli(tmp_path, "placement", "show", "--json") == before
    code, out, _ = cli(tmp_path, "facts", "--json")
    assert code == 0 and '"Seoul"' in out

    code, out, _ = cli(tmp_path, "placement", "move", "g", "--to", "b")
    assert code == 0 and "moved group 'g' from a to b" in out, out
    assert '"store": "b"' in cli(tmp_path, "placement", "show", "--json")[1]


def test_stores_and_placement_are_kg_toml_keys(tmp_path: Path) -> None:
    config = tmp_path / "kg.toml"
    config.write_text(f'stores = "{falkor_pair(tmp_path)}"\nplacement = "b"\n')
    args = ["--config", str(config), "placement", "show"]

    def show() -> tuple[int, str, str]:
        r = runner.invoke(app, args, default_map=defaults_for(get_command(app), args))
        return r.exit_code, r.stdout, r.stderr

    code, out, err = show()
    assert code == 0 and "no groups yet" in out, err
    config.write_text(f'stores = "{falkor_pair(tmp_path)}"\nplacement = "zz"\n')
    code, out, err = show()
    assert code == 1 and "KG_PLACEMENT: no store 'zz' in KG_STORES (a, b)" in err


def test_placement_without_stores_says_so(tmp_path: Path) -> None:
    r = runner.invoke(app, ["--home", str(tmp_path / "h"), "placement", "show"])
    assert r.exit_code == 1 and "needs several stores" in r.stderr


# -- the move, between FalkorDB and Neo4j, with a writer running ----------------------------


class Writer:
    """Writes one new fact an episode (subject `writer{i}`) until stopped; `acked`: the
    ones acknowledged."""

    prefix = "writer"

    def __init__(self, kg: KG) -> None:
        self.kg, self.acked, self.stop = kg, list[int](), False
        self.wrote = asyncio.Condition()

    async def run(self) -> None:
        i = 0
        while not self.stop:
            ref = datetime(2025, 1, 1, tzinfo=UTC)
            await add(self.kg, ref, (f"writer{i}", "LIVES_IN", f"town{i}"))
            await self.acknowledged(i)
            i += 1

    async def acknowledged(self, i: int) -> None:
        self.acked.append(i)
        async with self.wrote:
            self.wrote.notify_all()

    async def more(self, n: int) -> None:
        """Until `n` more writes are acknowledged."""
        want = len(self.acked) + n
        async with self.wrote:
            await self.wrote.wait_for(lambda: len(self.acked) >= want)


class ProcessWriter(Writer):
    """The same in a process of its own (tests/placement_writer.py, subjects `proc{i}`),
    sharing the test's embedded servers: stopped by closing its stdin."""

    prefix = "proc"

    def __init__(self, stores: str) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.stores = stores

    async def run(self) -> None:
        script = Path(__file__).with_name("placement_writer.py")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            self.stores,
            "g",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).parents[1],
        )
        assert proc.stdin is not None and proc.stdout is not None
        stopping = False
        while line := await proc.stdout.readline():
            await self.acknowledged(int(line))
            if self.stop and not stopping:
                stopping = True
                proc.stdin.close()
        assert await proc.wait() == 0


async def test_move_falkordb_neo4j_falkordb_with_a_writer(
    tmp_path: Path, neo4j_server: Neo4jServer
) -> None:
    """The group moves twice while two writers (one in a process of its own) write to it and
    a reader asks it as of ten (valid, known) times: each with its own placement cache, stale
    after each move."""
    neo4j_server.empty()
    stores = f"{falkor_pair(tmp_path)},c={neo4j_server.kg_uri}"
    async with await KG.open(stores=stores, group_id="g") as kg:
        await add(kg, t(2020), fact("Alice", "WORKS_AT", "Acme", t(2020)))
        await add(kg, t(2020), fact("Alice", "LIVES_IN", "Paris", t(2020)))
        known_1 = datetime.now(UTC)
        await add(kg, t(2022), fact("Alice", "WORKS_AT", "Globex", t(2022)))
        await add(kg, t(2023), fact("Alice", "LIVES_IN", "Lyon", t(2023), t(2024)))
        known_2 = datetime.now(UTC)
        valid = (t(2019), t(2021), t(2022, 6), t(2023, 6), t(2025))
        asks = [(v, k) for v in valid for k in (known_1, known_2)]

        async def answers(on: KG) -> list[list[dict[str, object]]]:
            return [rows(await on.facts(valid_at=v, known_at=k)) for v, k in asks]

        before = await answers(kg)
        assert any(before) and before[0] != before[-1]
        counted = await kg.stats()

        async with (
            await KG.open(stores=stores, group_id="g", attach=True) as other,
            await KG.open(stores=stores, group_id="g", attach=True) as reader,
        ):
            writers = [Writer(other), ProcessWriter(stores)]
            writing = [asyncio.create_task(w.run()) for w in writers]
            seen: list[bool] = []  # each as-of read during the moves: the same answers?

            async def read() -> None:
                while not writers[0].stop:
                    seen.append(await answers(reader) == before)

            async def more() -> None:
                for w in writers:
                    await w.more(3)

            reading = asyncio.create_task(read())
            try:
                await more()
                first = await move_group(placed(kg), "g", "c")  # FalkorDB -> Neo4j
                await more()
                second = await move_group(placed(kg), "g", "b")  # Neo4j -> FalkorDB
                await more()
            finally:
                for w in writers:
                    w.stop = True
                await asyncio.gather(*writing, reading)
            assert seen and all(seen), f"{seen.count(False)} of {len(seen)} as-of reads differed"
            assert await placed(other).where("g") == ("b", False)
            assert await placed(reader).where("g") == ("b", False)
        acked = {w.prefix: w.acked for w in writers}

        assert (first.source, first.target, second.source, second.target) == ("a", "c", "c", "b")
        assert await answers(kg) == before
        store = placed(kg)
        assert [await store.stores[n].has_group("g") for n in "abc"] == [False, True, False]
        assert await store.directory.placements() == [Placement(group_id="g", store="b")]
        # Every acknowledged write is there, once; nothing else was written.
        now = [f.subject for f in await kg.facts(predicate="LIVES_IN")]
        for prefix, done in acked.items():
            assert sorted(int(s[len(prefix) :]) for s in now if s.startswith(prefix)) == done
        stats = await kg.stats()
        total = sum(len(done) for done in acked.values())
        assert stats.edge_versions == counted.edge_versions + total
        assert stats.episodes == counted.episodes + total


async def test_a_neo4j_directory_keeps_the_row_of_a_group_moved_off_it(
    tmp_path: Path, neo4j_server: Neo4jServer
) -> None:
    """On Neo4j, dropping a group deletes every node with its group_id: the row of a group
    placed on the directory's own server survives its move away (and the drop after it).
    With embeddings, search finds the same facts in the same order, at the same cosines, on
    the new server (full-text scores are each engine's own: Lucene's on Neo4j)."""
    neo4j_server.empty()
    stores = f"c={neo4j_server.kg_uri},a=embedded:{tmp_path / 'a'}"
    minilm = embedder_named("minilm")
    async with await KG.open(stores=stores, group_id="g", embedder=minilm) as kg:
        await add(kg, t(2021), ("Minji", "LIVES_IN", "Seoul"))
        await add(kg, t(2022), ("Minji", "WORKS_AT", "Naver"))

        async def hits() -> list[tuple[str, float]]:
            found = await kg.search("where does Minji live")
            return [(h.fact.edge.uuid, h.branch_scores["cosine"]) for h in found.facts]

        before = await hits()
        assert await placed(kg).directory.placements() == [Placement(group_id="g", store="c")]
        await move_group(placed(kg), "g", "a")
        assert await placed(kg).directory.placements() == [Placement(group_id="g", store="a")]
        assert not await placed(kg).stores["c"].has_group("g")
        assert await hits() == before and len(before) == 2


async def test_an_interrupted_move_is_refused_then_restarted(tmp_path: Path) -> None:
    """A move whose process died left the row `moving`, the source held and a copy on the
    target: another move is refused (one line, naming --restart); with --restart the old
    move's state is undone first and the group moves whole."""
    async with await KG.open(stores=falkor_pair(tmp_path), group_id="g") as kg:
        store = placed(kg)
        await add(kg, t(2021), ("Minji", "LIVES_IN", "Seoul"))
        await add(kg, t(2023), ("Minji", "LIVES_IN", "Busan"))
        history = rows(await kg.history(subject="Minji"))
        a, b = store.stores["a"], store.stores["b"]
        await store.directory.set_placement(Placement(group_id="g", store="a", moving=True))
        await a.set_hold("g", await a.version("g"), "move to b (kg placement move)")
        await import_lines(b, [line async for line in export_lines(a, "g")])

        with pytest.raises(InputError, match="run this move again with --restart"):
            await move_group(store, "g", "b")
        await move_group(store, "g", "b", restart=True)
        assert await store.directory.placements() == [Placement(group_id="g", store="b")]
        assert (await a.has_group("g"), await b.has_group("g")) == (False, True)
        assert rows(await kg.history(subject="Minji")) == history
        await add(kg, t(2024), ("Minji", "LIVES_IN", "Jeju"))  # not held on b
