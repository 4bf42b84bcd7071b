"""Documentation that shows Cypher must show Cypher that works."""

from __future__ import annotations

import re
from pathlib import Path

from kg import KG
from kg.store.falkordb import FalkorDBStore
from kg.store.neo4j import Neo4jStore
from tests.conftest import add, t
from tests.test_neo4j_offline import parse

DOC = Path(__file__).parents[1] / "docs" / "temporal-queries.md"


def cypher_blocks() -> list[str]:
    return re.findall(r"```cypher\n(.*?)```", DOC.read_text(), re.S)


async def test_documented_falkordb_as_of_query_runs_verbatim(falkor_kg: KG) -> None:
    kg = falkor_kg
    await add(kg, t(2021, 3, 2), ("Minji", "LIVES_IN", "Seoul"), ("Minji", "WORKS_AT", "Naver"))
    await add(kg, t(2024, 6, 1), ("Minji", "LIVES_IN", "Busan"))
    falkor_query = cypher_blocks()[0]
    assert isinstance(kg.store, FalkorDBStore)
    result = await kg.store.raw_query("default", falkor_query)
    rows = [tuple(list(r.values())[:3]) for r in result]
    assert rows == [("Minji", "LIVES_IN", "Seoul"), ("Minji", "WORKS_AT", "Naver")]


def test_documented_neo4j_query_parses() -> None:
    neo4j_query = cypher_blocks()[1]
    assert "datetime(" in neo4j_query
    parse(neo4j_query)


async def test_documented_neo4j_as_of_query_runs_verbatim(neo4j_kg: KG) -> None:
    await add(
        neo4j_kg, t(2021, 3, 2), ("Minji", "LIVES_IN", "Seoul"), ("Minji", "WORKS_AT", "Naver")
    )
    await add(neo4j_kg, t(2024, 6, 1), ("Minji", "LIVES_IN", "Busan"))
    assert isinstance(neo4j_kg.store, Neo4jStore)
    result = await neo4j_kg.store.raw_query("default", cypher_blocks()[1])
    rows = [(r["subject"], r["predicate"], r["object"]) for r in result]
    assert rows == [("Minji", "LIVES_IN", "Seoul"), ("Minji", "WORKS_AT", "Naver")]
