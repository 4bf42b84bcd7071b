"""Build golden sets for `kg eval` from ../shared/data, or the small example committed here.

    python benchmarks/eval_set.py --out /work/cache/kg-eval/locomo_updates.jsonl [--convs all]
    python benchmarks/eval_set.py --example benchmarks/data/eval_example.jsonl

The LoCoMo set: each LoCoMo conversation is a haystack (its turns, with the observation facts
drawn from each turn as the turn's structured facts). Into it are planted, at increasing
session times, value chains whose latest value is the answer and whose earlier values are
stale:
- SituatedQA answer versions ("who has the most Olympic medals": Latynina, then Phelps) and
  YAGO11k chains (a player's clubs, a politician's parties, a spouse, an employer), said as
  news in the conversation: `knowledge_update` items;
- YAGO chains told as dated history ("back in 1999, ... joined ..."), asked of a year
  ("... in 2001?"): `temporal` items, which need the query's time words;
- YAGO chains delivered as a tool's JSON output: `tool_result` items.
LoCoMo's own questions become `single` (its single-hop), `multi` (multi-hop) and `temporal`
items, and its answerable questions of another conversation, speakers renamed, become
`abstain` items (locomo_data.foreign_questions). LoCoMo is CC BY-NC: the set is written
outside the repository (default /work/cache/kg-eval) and never committed. SituatedQA states
no licence, so it stays out of the repository too.

The example (`--example`) uses YAGO11k chains only (CC BY, via TILP, MIT; attribution in the
set's meta record) planted into synthetic small talk written for it: no LoCoMo text.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools

import locomo_data as L

from kg.eval.golden import GoldenSet, Haystack, Item, ItemType, Meta, Session, Supersedes, Turn
from kg.schemas.episode import Channel, StructuredFact
from kg.schemas.ontology import DEFAULT_ONTOLOGY, Ontology, Predicate

DATA = Path(__file__).resolve().parents[1] / "../shared/data"
OUT = Path("/work/cache/kg-eval/locomo_updates.jsonl")

# relation -> (predicate, news, dated history, question now, question of a year, tool field)
RELATIONS: dict[str, tuple[str, str, str, str, str]] = {
    "playsFor": (
        "PLAYS_FOR",
        "{s} plays for {o} now.",
        "Back in {y}, {s} started playing for {o}.",
        "Which team does {s} play for?",
        "Which team did {s} play for in {y}?",
    ),
    "isAffiliatedTo": (
        "AFFILIATED_WITH",
        "{s} is affiliated with {o} now.",
        "In {y}, {s} became affiliated with {o}.",
        "What is {s} affiliated with?",
        "What was {s} affiliated with in {y}?",
    ),
    "isMarriedTo": (
        "MARRIED_TO",
        "{s} is married to {o} now.",
        "In {y}, {s} married {o}.",
        "Who is {s} married to?",
        "Who was {s} married to in {y}?",
    ),
    "worksAt": (
        "WORKS_AT",
        "{s} works at {o} now.",
        "In {y}, {s} started working at {o}.",
        "Where does {s} work?",
        "Where did {s} work in {y}?",
    ),
}
ANSWER_PREDICATE = "CURRENT_ANSWER"
ONTOLOGY = Ontology(
    name="eval-updates",
    entity_types=DEFAULT_ONTOLOGY.entity_types,
    predicates=[
        *(p for p in DEFAULT_ONTOLOGY.predicates if p.name not in {"WORKS_AT", "MARRIED_TO"}),
        *(Predicate(name=r[0], cardinality="one") for r in RELATIONS.values()),
        Predicate(
            name=ANSWER_PREDICATE,
            cardinality="one",
            description="The current answer to a question whose answer changes.",
        ),
    ],
)
YAGO_LICENSE = "Planted chains: YAGO11k (YAGO, CC BY; via xiongsiheng/TILP, MIT). "


# -- sources ------------------------------------------------------------------------------


@dataclass
class Chain:
    """Values in time order: (value, alternatives, start year, end year or None)."""

    kind: str  # a RELATIONS key, or "situated"
    subject: str
    values: list[tuple[str, list[str], int, int | None]]


def yago_name(raw: str) -> str:
    return re.sub(r"\s+", " ", raw.strip("<>").replace("_", " ")).strip()


def yago_chains(path: Path) -> list[Chain]:
    """Chains whose values never overlap and never repeat: one value at a time."""
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        rel = r["relation"].strip("<>")
        fs = sorted(r["facts"], key=lambda f: f["valid_from"])
        objs = [yago_name(f["object"]) for f in fs]
        if (
            rel not in RELATIONS
            or len(fs) < 2
            or len(set(objs)) < len(objs)
            or len({f["valid_from"] for f in fs}) < len(fs)
            or any(fs[i]["valid_to"] > fs[i + 1]["valid_from"] for i in range(len(fs) - 1))
        ):
            continue
        values = [(o, [o], f["valid_from"], f["valid_to"]) for o, f in zip(objs, fs, strict=True)]
        out.append(Chain(rel, yago_name(r["subject"]), values))
    return out


def _year(text: str | None) -> int | None:
    m = re.search(r"\b(1[5-9]\d\d|20\d\d)\b", text or "")
    return int(m[1]) if m else None


def situated_chains(path: Path) -> list[Chain]:
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        vs = [(v["answer"], _year(v["valid_from"])) for v in r["versions"] if v["answer"]]
        vs = sorted((v for v in vs if v[1] is not None), key=lambda v: v[1])  # type: ignore[arg-type,return-value]
        answers = [a[0] for a, _ in vs]
        if len(vs) < 2 or len(set(answers)) < len(answers) or len({y for _, y in vs}) < len(vs):
            continue
        values = [(a[0], list(a), y, None) for a, y in vs]  # type: ignore[misc]
        out.append(Chain("situated", r["key"].strip().rstrip("?"), values))
    return out


# -- planting -----------------------------------------------------------------------------


def _slots(sessions: list[Session], n: int, rng: random.Random) -> list[int]:
    """n session indexes in increasing order, spread over the conversation."""
    picks = sorted(rng.sample(range(len(sessions)), n))
    return picks


def _append(sessions: list[Session], i: int, turn: Turn) -> None:
    s = sessions[i]
    sessions[i] = Session(id=s.id, turns=[*s.turns, turn])


def _after(session: Session, minutes: int = 1) -> datetime:
    return session.turns[-1].at + timedelta(minutes=minutes)


def plant(
    sessions: list[Session],
    chain: Chain,
    kind: ItemType,
    speakers: list[str],
    asked_at: datetime,
    rng: random.Random,
    tag: str,
) -> Item | None:
    """Plant `chain` into `sessions` (in place) and return the item that asks about it."""
    values = chain.values[-min(len(chain.values), 4, len(sessions)) :]
    if len(values) < 2:
        return None
    slots = _slots(sessions, len(values), rng)
    ids: list[str] = []
    if chain.kind == "situated":
        pred = ANSWER_PREDICATE
    else:
        pred, news, dated, ask_now, ask_year = RELATIONS[chain.kind]
    for n, ((value, _, start, end), slot) in enumerate(zip(values, slots, strict=True)):
        at = _after(sessions[slot], minutes=n + 1)
        tid = f"{tag}:{n + 1}"
        speaker = speakers[n % len(speakers)]
        fact: dict[str, Any] = {"subject": chain.subject, "predicate": pred, "object": value}
        channel, source, said = Channel.user, "message", speaker
        if chain.kind == "situated":
            text = f"I looked it up: {chain.subject}? It's {value} these days."
            fact["fact"] = f"{chain.subject}: {value}"
        elif kind is ItemType.temporal:
            text = dated.format(s=chain.subject, o=value, y=start)
            fact["valid_at"] = datetime(start, 1, 1, tzinfo=UTC)
            nxt = values[n + 1][2] if n + 1 < len(values) else None
            stop = end if end is not None and end > start else start + 1
            stop = min(stop, nxt) if nxt is not None else stop
            fact["invalid_at"] = datetime(stop, 1, 1, tzinfo=UTC) if n + 1 < len(values) else None
        elif kind is ItemType.tool_result:
            channel, source, said = Channel.tool, "json", None
            text = json.dumps(
                {
                    "tool": "people_lookup",
                    "subject": chain.subject,
                    "relation": pred.lower(),
                    "value": value,
                    "as_of": at.date().isoformat(),
                }
            )
        else:
            text = news.format(s=chain.subject, o=value)
        _append(
            sessions,
            slot,
            Turn(
                id=tid,
                at=at,
                text=text,
                speaker=said,
                channel=channel,
                source=source,  # type: ignore[arg-type]
                facts=[StructuredFact.model_validate(fact)],
            ),
        )
        ids.append(tid)
    last = values[-1]
    if kind is ItemType.temporal:
        k = rng.randrange(1, len(values))  # not the first: something before it is stale
        value, alts, year = values[k][0], values[k][1], values[k][2]
        question = ask_year.format(s=chain.subject, y=year)
        stale = [v for j, (v, *_rest) in enumerate(values) if j != k]
        evidence = [ids[k]]
    else:
        value, alts = last[0], last[1]
        question = (
            f"{chain.subject}?" if chain.kind == "situated" else ask_now.format(s=chain.subject)
        )
        stale = [v for v, *_rest in values[:-1]]
        evidence = [ids[-1]]
    return Item(
        id=tag,
        type=kind,
        question=question,
        asked_at=asked_at,
        haystack="?",
        subject=chain.subject,
        evidence=evidence,
        answers=list(dict.fromkeys([value, *alts])),
        stale_answers=[s for s in stale if s not in alts],
        supersedes=[Supersedes(turn=b, old=a) for a, b in itertools.pairwise(ids)],
    )


# -- haystacks ------------------------------------------------------------------------------


def locomo_sessions(data: dict[str, Any], conv: str) -> list[Session]:
    facts: dict[str, list[StructuredFact]] = {}
    for f in data["observation_facts"]:
        if f["conv"] == conv:
            sf = StructuredFact(
                subject=f["speaker"], predicate="OBSERVED", object=f["fact"][:500], fact=f["fact"]
            )
            facts.setdefault(f["source_dia_ids"][0], []).append(sf)
    by_session: dict[int, list[Turn]] = {}
    for e in data["episodes"]:
        if e["conv"] != conv:
            continue
        text = e["text"] + (
            f" [shares an image: {e['image_caption']}]" if e.get("image_caption") else ""
        )
        by_session.setdefault(e["session"], []).append(
            Turn(
                id=e["dia_id"],
                at=datetime.fromisoformat(e["valid_at"]).replace(tzinfo=UTC),
                text=text,
                speaker=e["speaker"],
                facts=facts.get(e["dia_id"], []),
            )
        )
    return [Session(id=f"S{k}", turns=v) for k, v in sorted(by_session.items())]


FILLER = [
    "How was your weekend?",
    "Pretty quiet, I mostly read and cooked.",
    "I tried a new bakery near the station.",
    "Was it any good?",
    "The sourdough was great, the coffee less so.",
    "I have been walking more in the mornings.",
    "That sounds nice, the weather has been mild.",
    "My sister visited on Saturday.",
    "Did you two go anywhere?",
    "We went to the river and had lunch outside.",
    "Work has been busy with the new project.",
    "Hope it calms down soon.",
    "I finally fixed my bike's brakes.",
    "I should take mine in too.",
    "Any plans for the holidays?",
    "Maybe a short trip to the coast.",
    "I watched an old film last night.",
    "Which one?",
    "A black-and-white mystery, quite slow.",
    "I started learning to play the guitar.",
    "How is it going?",
    "My fingers hurt, but I can play two chords.",
    "Let's catch up again next week.",
    "Sure, talk soon.",
]


def synthetic_sessions(rng: random.Random, n: int, start: datetime) -> list[Session]:
    speakers = ["Mina", "Joon"]
    out = []
    for s in range(n):
        at = start + timedelta(days=9 * s, hours=rng.randrange(8, 20))
        turns = [
            Turn(
                id=f"S{s + 1}:{t + 1}",
                at=at + timedelta(minutes=t),
                speaker=speakers[t % 2],
                text=rng.choice(FILLER),
            )
            for t in range(6)
        ]
        out.append(Session(id=f"S{s + 1}", turns=turns))
    return out


def _with_haystack(item: Item, hid: str) -> Item:
    return item.model_copy(update={"haystack": hid})


def _plant_all(
    hid: str,
    sessions: list[Session],
    speakers: list[str],
    chains: Iterator[tuple[Chain, ItemType]],
    asked_at: datetime,
    rng: random.Random,
) -> list[Item]:
    items = []
    for n, (chain, kind) in enumerate(chains):
        item = plant(sessions, chain, kind, speakers, asked_at, rng, f"{hid}-P{n + 1}")
        if item is not None:
            items.append(_with_haystack(item, hid))
    return items


def build_locomo(data_dir: Path, convs: str, per_kind: int, seed: int) -> GoldenSet:
    data = L.load(data_dir)
    rng = random.Random(seed)
    yago = yago_chains(data_dir / "temporal" / "yago11k_asof_dev.jsonl")
    situated = situated_chains(data_dir / "temporal" / "situatedqa_updates_dev.jsonl")
    rng.shuffle(yago)
    rng.shuffle(situated)
    out = GoldenSet(
        meta=Meta(
            name=f"locomo-updates ({convs}, seed {seed})",
            license="LoCoMo CC BY-NC 4.0 (evaluation only, never committed); SituatedQA (no "
            "licence stated); " + YAGO_LICENSE,
            ontology=ONTOLOGY,
        )
    )
    foreign = L.foreign_pairs(data)
    for conv in L.split(data)[convs]:
        sessions = locomo_sessions(data, conv)
        asked = sessions[-1].turns[-1].at + timedelta(days=1)
        speakers = L.speakers(data, conv)
        plan = (
            [(situated.pop(), ItemType.knowledge_update) for _ in range(per_kind)]
            + [(yago.pop(), ItemType.knowledge_update) for _ in range(per_kind // 2)]
            + [(yago.pop(), ItemType.temporal) for _ in range(per_kind // 2)]
            + [(yago.pop(), ItemType.tool_result) for _ in range(per_kind // 3)]
        )
        items = _plant_all(conv, sessions, speakers, iter(plan), asked, rng)
        kinds = {4: ItemType.single, 1: ItemType.multi, 2: ItemType.temporal}
        for cat, kind in kinds.items():
            qs = [q for q in L.questions(data, [conv]) if q["category"] == cat]
            for q in rng.sample(qs, min(per_kind, len(qs))):
                items.append(
                    Item(
                        id=q["qid"],
                        type=kind,
                        question=q["question"],
                        asked_at=asked,
                        haystack=conv,
                        evidence=q["gold_dia_ids"],
                        answers=[str(q["answer"])],
                    )
                )
        fq = L.foreign_questions(data, conv, foreign[conv])
        for n, q in enumerate(rng.sample(fq, min(per_kind, len(fq)))):
            items.append(
                Item(
                    id=f"{conv}-A{n + 1}",
                    type=ItemType.abstain,
                    question=q["question"],
                    asked_at=asked,
                    haystack=conv,
                )
            )
        out.haystacks[conv] = Haystack(id=conv, sessions=sessions)
        out.items += items
    return out.check()


def build_example(seed: int, data_dir: Path = DATA) -> GoldenSet:
    """Two synthetic conversations with YAGO chains planted: small enough to run in seconds."""
    rng = random.Random(seed)
    yago = yago_chains(data_dir / "temporal" / "yago11k_asof_dev.jsonl")
    rng.shuffle(yago)
    out = GoldenSet(
        meta=Meta(
            name="example: YAGO11k chains in synthetic small talk",
            license=YAGO_LICENSE + "Conversation turns: written for kg (synthetic).",
            ontology=ONTOLOGY,
        )
    )
    for h in range(2):
        hid = f"chat-{h + 1}"
        sessions = synthetic_sessions(rng, 8, datetime(2024, 1 + h, 3, tzinfo=UTC))
        asked = sessions[-1].turns[-1].at + timedelta(days=1)
        plan = (
            [(yago.pop(), ItemType.knowledge_update) for _ in range(4)]
            + [(yago.pop(), ItemType.temporal) for _ in range(2)]
            + [(yago.pop(), ItemType.tool_result) for _ in range(1)]
        )
        items = _plant_all(hid, sessions, ["Mina", "Joon"], iter(plan), asked, rng)
        neighbour = ("Arlo", "beekeeper") if h == 0 else ("Suri", "glassblower")
        tid = f"{hid}-N:1"
        _append(
            sessions,
            2,
            Turn(
                id=tid,
                at=_after(sessions[2]),
                speaker="Mina",
                text=f"My new neighbour {neighbour[0]} is a {neighbour[1]}, she gave us honey.",
                facts=[
                    StructuredFact(subject=neighbour[0], predicate="WORKS_AS", object=neighbour[1])
                ],
            ),
        )
        items.append(
            Item(
                id=f"{hid}-single",
                type=ItemType.single,
                haystack=hid,
                question=f"What does {neighbour[0]} do for a living?",
                asked_at=asked,
                evidence=[tid],
                answers=[neighbour[1]],
            )
        )
        items.append(
            Item(
                id=f"{hid}-A1",
                type=ItemType.abstain,
                haystack=hid,
                asked_at=asked,
                question="Which hospital did Mina's grandmother work at?",
            )
        )
        out.haystacks[hid] = Haystack(id=hid, sessions=sessions)
        out.items += items
    return out.check()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--convs", choices=["dev", "held-out", "all"], default="all")
    ap.add_argument("--per-kind", type=int, default=8, help="Items per kind per conversation.")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--example", type=Path, help="Write the committed example here instead.")
    args = ap.parse_args()
    if args.example:
        golden, path = build_example(args.seed, args.data), args.example
    else:
        golden, path = build_locomo(args.data, args.convs, args.per_kind, args.seed), args.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(golden.dumps())
    counts: dict[str, int] = {}
    for i in golden.items:
        counts[i.type.value] = counts.get(i.type.value, 0) + 1
    print(f"{path}: {len(golden.haystacks)} haystacks, {len(golden.items)} items {counts}")


if __name__ == "__main__":
    main()
