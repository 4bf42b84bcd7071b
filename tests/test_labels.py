"""kg's own node labels are never entity types: not given, not declared, not extracted, not
imported, not written by either backend."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from kg import KG, InputError
from kg.ingest.llm import ScriptedLLM
from kg.schemas import RESERVED_LABELS, EntityNode
from kg.schemas.ontology import EntityType, Ontology
from kg.store.cypher.writes import label_suffix
from kg.store.neo4j import Neo4jStore
from tests.conftest import add, objects, t

ROOT = Path(__file__).resolve().parents[1]


def typed(label: str, where: str = "object_type") -> dict[str, str]:
    return {"subject": "Minji", "predicate": "MEMBER_OF", "object": "Book Club", where: label}


@pytest.mark.parametrize("label", sorted(RESERVED_LABELS))
@pytest.mark.parametrize("where", ["subject_type", "object_type"])
async def test_a_given_fact_typed_with_an_internal_label_is_refused(
    kg: KG, label: str, where: str
) -> None:
    with pytest.raises(InputError, match=rf"facts\[0\]: entity type '{label}' is reserved"):
        await add(kg, t(2020), typed(label, where))
    assert await kg.groups() == []  # nothing written


async def test_the_issue_cases_cannot_happen_and_the_group_stays_healthy(kg: KG) -> None:
    """Community-, Episodic- and AuditEvent-typed facts broke community builds, replay,
    rollback, export, erasure and the log. Refused, they leave a group where all of those
    work."""
    for label in ("Community", "Episodic", "AuditEvent"):
        with pytest.raises(InputError, match="reserved"):
            await add(kg, t(2020), typed(label))
    first = await add(kg, t(2020), typed("Organization"))
    await add(kg, t(2021), ("Minji", "LIVES_IN", "Seoul"))
    await kg.build_communities()
    assert (await kg.replay()).identical
    assert (await kg.rollback(first.episode_uuid, dry_run=False)).applied
    assert [line async for line in kg.export_lines()]
    assert isinstance(await kg.log(), list)
    assert (await kg.erase_entity("Minji")).episodes_deleted == 2  # the rolled-back one too


def test_an_ontology_cannot_declare_an_internal_label() -> None:
    for label in sorted(RESERVED_LABELS):
        with pytest.raises(ValidationError, match="reserved"):
            EntityType(name=label)
    strict = Ontology(entity_types=[EntityType(name="Person")], strict=True)
    with pytest.raises(ValueError, match="reserved"):
        strict.resolve_entity_type("Episodic")
    assert strict.resolve_entity_type("Person") == "Person"


async def test_an_llm_typing_an_entity_with_an_internal_label_loses_that_fact(
    home: Path,
) -> None:
    text = "Minji: I joined the Seoul book club. I live in Seoul."
    reply = json.dumps(
        {
            "entities": [
                {"name": "Seoul book club", "type": "Community"},
                {"name": "Seoul", "type": "Place"},
            ],
            "facts": [
                {
                    "subject": "I",
                    "predicate": "MEMBER_OF",
                    "object": "Seoul book club",
                    "fact": "Minji joined the Seoul book club",
                    "quote": "I joined the Seoul book club",
                },
                {
                    "subject": "I",
                    "predicate": "LIVES_IN",
                    "object": "Seoul",
                    "fact": "Minji lives in Seoul",
                    "quote": "I live in Seoul",
                },
            ],
        }
    )
    async with await KG.open(home=home, llm=ScriptedLLM([reply])) as kg:
        r = await kg.add_episode(source="message", content=text, reference_time=t(2024))
        assert r.summary.facts_dropped == {"reserved_type": 1}
        assert objects(await kg.facts(subject="Minji")) == ["Seoul"]
        await kg.build_communities()  # and nothing of the group is taken for a community
        assert objects(await kg.facts(subject="Minji")) == ["Seoul"]


async def test_an_import_with_an_internal_label_on_an_entity_is_refused(kg: KG) -> None:
    await add(kg, t(2020), ("Minji", "LIVES_IN", "Seoul"))
    lines = [line async for line in kg.export_lines()]
    for i, line in enumerate(lines):
        row = json.loads(line)
        if row["record"] == "entities" and row["name"] == "Seoul":
            row["labels"] = ["Entity", "Community"]
            lines[i] = json.dumps(row)
            bad = i + 1
    with pytest.raises(InputError, match=rf"<input>:{bad}: entity type 'Community' is reserved"):
        await kg.import_lines(lines, into="copy")
    assert await kg.groups() == ["default"]


def _entity(labels: list[str]) -> EntityNode:
    return EntityNode(
        uuid="n", group_id="g", name="X", name_key="x", labels=labels, created_at=datetime.now(UTC)
    )


@pytest.mark.parametrize("label", sorted(RESERVED_LABELS - {"Entity"}))
def test_neither_backend_writes_an_internal_label_on_an_entity(label: str) -> None:
    """The last guard, in the Cypher both backends share, whatever the caller checked."""
    assert label_suffix(["Entity", "Person"]) == ":Person"
    with pytest.raises(ValueError, match="reserved"):
        label_suffix([label])
    store = Neo4jStore(driver=None, database="neo4j", embedding_dim=None)
    with pytest.raises(ValueError, match="reserved"):
        store.compile_load("g", [_entity([label])])


def test_every_label_the_stores_use_is_reserved() -> None:
    """A label someone adds to a query must join the list: scan the Cypher in the code."""
    used: set[str] = set()
    for path in [*(ROOT / "kg").rglob("*.py"), *(ROOT / "schemas").glob("*.py")]:
        if "tests" in path.parts:
            continue
        for match in re.finditer(r"\(\w*((?::[A-Z][A-Za-z0-9]*)+)[\s{)]", path.read_text()):
            used |= set(match.group(1).strip(":").split(":"))
    assert {"Entity", "Episodic", "Community", "AuditEvent", "QueryStats"} <= used
    assert used <= RESERVED_LABELS, sorted(used - RESERVED_LABELS)
