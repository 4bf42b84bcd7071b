"""Run a golden set: ingest each haystack, ask each item's question, score what came back.

Systems, each in groups of its own on one store, ranked by the same retrieval:
- `kg`: the set's ontology as declared: a new value of a single-valued predicate closes the
  old one, and closed facts leave the default view;
- `add_only`: every value kept, nothing closed (what Mem0's open-source memory now does):
  the same ontology with every predicate multi-valued, and facts' `invalid_at` dropped. Same
  engine, same ranking; only superseding is off;
- `full_context` (with an LLM only): the whole haystack up to `asked_at` in the prompt.

Ingest modes: `structured` (each turn stored as text, plus its facts as a structured
episode: no LLM), `raw` (turns as text only: `add_only` would be identical and is skipped),
`llm` (each turn extracted by the configured LLM; `add_only` is skipped, since the LLM's
resolution step may close facts on its own).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kg.errors import InputError
from kg.eval.golden import GoldenSet, Item, ItemType, Turn
from kg.eval.judge import Judge
from kg.eval.metrics import Rate, gold_in, percentile, stale_in
from kg.facade import KG
from kg.ingest.llm import StructuredLLM
from kg.retrieval import SearchConfig, SearchResults, render_context
from kg.retrieval.config import SCORE_WEIGHTS, Fusion, Method, ScopeConfig
from kg.retrieval.context import approx_tokens
from kg.schemas.embedder import Embedder, EmbeddingModel
from kg.schemas.episode import Episode, EpisodeSource, StructuredFact
from kg.schemas.ontology import DEFAULT_ONTOLOGY, Ontology


class Mode(StrEnum):
    structured = "structured"
    raw = "raw"
    llm = "llm"


class System(StrEnum):
    kg = "kg"
    add_only = "add_only"
    full_context = "full_context"


def add_only(ontology: Ontology) -> Ontology:
    """The same predicates, every one multi-valued: no value ever closes another."""
    return ontology.model_copy(
        update={
            "name": f"{ontology.name}-add-only",
            "predicates": [
                p.model_copy(update={"cardinality": "many"}) for p in ontology.predicates
            ],
        }
    )


def eval_config(
    k: int,
    *,
    cosine: bool,
    abstain_below: float | None,
    read_time: bool = True,
    abstain_joint_below: float | None = None,
) -> SearchConfig:
    """Facts and turns, top k of each: BM25 + cosine score-fused (the default recipes)."""
    methods = (Method.bm25, Method.cosine) if cosine else (Method.bm25,)
    scope = ScopeConfig(methods=methods, limit=k)
    return SearchConfig(
        facts=scope,
        episodes=scope,
        fusion=Fusion.score,
        weights=SCORE_WEIGHTS if cosine else {},
        abstain_below=abstain_below if cosine else None,
        abstain_joint_below=abstain_joint_below if cosine else None,
        read_time=read_time,
    )


class ItemResult(BaseModel):
    item: str
    type: ItemType
    system: System
    evidence: int = Field(description="Evidence turns.")
    found: int = Field(description="Evidence turns behind the top-k facts or turns.")
    stale_current: bool | None = Field(
        default=None, description="A stale answer in a current fact line (None: no stale)."
    )
    stale_quoted: bool | None = None
    gold_in_context: bool | None = None
    empty: bool = Field(description="The context block is empty (abstained).")
    tokens: int
    latency_ms: float
    answer: str | None = None
    verdict: str | None = None
    context: str = Field(default="", description="The context block, for audit.")


class Row(BaseModel):
    system: System
    type: str
    items: int
    recall: Rate
    stale: Rate
    stale_quoted: Rate
    gold: Rate
    abstain: Rate = Field(description="Abstain items whose context was empty.")
    false_abstain: Rate = Field(description="Answerable items whose context was empty.")
    tokens_mean: float
    p50_ms: float
    p95_ms: float
    answer: Rate | None = None
    answer_stale: Rate | None = None


class EvalReport(BaseModel):
    name: str
    mode: Mode
    k: int
    max_tokens: int
    abstain_below: float | None
    abstain_joint_below: float | None = None
    read_time: bool = True
    embedder: str | None
    llm: str | None
    notes: list[str] = Field(default_factory=list)
    rows: list[Row] = Field(default_factory=list)
    items: list[ItemResult] = Field(default_factory=list)


def _episodes(turns: Sequence[Turn], group: str, mode: Mode, system: System) -> list[Episode]:
    out = []
    for t in turns:
        common: dict[str, Any] = {
            "group_id": group,
            "reference_time": t.at,
            "channel": t.channel,
            "name": t.id,
        }
        out.append(Episode(source=t.episode_source, content=t.content, **common))
        if mode is Mode.structured and t.facts:
            facts: list[StructuredFact] = list(t.facts)
            if system is System.add_only:
                facts = [f.model_copy(update={"invalid_at": None}) for f in facts]
            out.append(Episode(source=EpisodeSource.facts, facts=facts, **common))
    return out


def _turns_of(results: SearchResults, turn_of: dict[str, set[str]]) -> set[str]:
    found: set[str] = set()
    for h in results.facts:
        for ep in h.fact.edge.episodes:
            found |= turn_of.get(ep, set())
    for e in results.episodes:
        found |= turn_of.get(e.episode.uuid, set())
    return found


class Runner:
    def __init__(
        self,
        kg: KG,
        golden: GoldenSet,
        *,
        mode: Mode = Mode.structured,
        systems: Sequence[System] = (System.kg, System.add_only),
        k: int = 10,
        max_tokens: int = 1000,
        abstain_below: float | None = None,
        abstain_joint_below: float | None = None,
        judge: Judge | None = None,
        progress: Callable[[str], None] | None = None,
        read_time: bool = True,
    ) -> None:
        if mode is Mode.llm and kg.llm is None:
            raise InputError("ingest mode 'llm' needs an LLM (--llm-model)")
        if abstain_below is not None and kg.embedder is None:
            raise InputError("abstain_below needs an embedder (it cuts on cosine similarity)")
        if abstain_joint_below is not None and kg.embedder is None:
            raise InputError("abstain_joint_below needs an embedder (it weighs cosine similarity)")
        self.kg = kg
        self.golden = golden
        self.mode = mode
        self.k = k
        self.max_tokens = max_tokens
        self.abstain_below = abstain_below
        self.abstain_joint_below = abstain_joint_below
        self.judge = judge
        self.read_time = read_time
        self.progress = progress or (lambda _: None)
        self.notes: list[str] = []
        wanted = list(dict.fromkeys(systems))
        if System.add_only in wanted and mode is not Mode.structured:
            wanted.remove(System.add_only)
            self.notes.append(f"add_only skipped: it is kg itself in {mode.value} mode")
        if System.full_context in wanted and judge is None:
            wanted.remove(System.full_context)
            self.notes.append("full_context skipped: it needs an LLM to answer")
        self.systems = wanted
        onto = golden.meta.ontology or DEFAULT_ONTOLOGY
        self._ontology = {System.kg: onto, System.add_only: add_only(onto)}

    def _view(self, system: System) -> KG:
        """A facade over the same store with the system's ontology."""
        kg = self.kg
        return KG(
            kg.store,
            ontology=self._ontology[system],
            clock=kg.clock,
            llm=kg.llm,
            guards=kg.guards,
            embedder=kg.embedder,
        )

    async def run(self) -> EvalReport:
        results: list[ItemResult] = []
        groups = list(dict.fromkeys(i.group for i in self.golden.items))
        for system in self.systems:
            if system is System.full_context:
                for item in self.golden.items:
                    results.append(await self._full_context(item))
                continue
            view = self._view(system)
            gids = {group: f"{system.value}-{gi}" for gi, group in enumerate(groups)}
            self.progress(f"{system.value}: ingesting {len(groups)} haystacks")
            turn_of = await self._ingest(view, system, gids)
            for item in self.golden.items:
                self.progress(f"{system.value}: asking {item.id}")
                results.append(await self._ask(view, system, gids[item.group], item, turn_of))
        judge = self.judge
        return EvalReport(
            name=self.golden.meta.name,
            mode=self.mode,
            k=self.k,
            max_tokens=self.max_tokens,
            abstain_below=self.abstain_below,
            abstain_joint_below=self.abstain_joint_below,
            read_time=self.read_time,
            embedder=EmbeddingModel.of(self.kg.embedder).model if self.kg.embedder else None,
            llm=judge.llm.model if judge is not None else None,
            notes=self.notes,
            rows=summarise(results),
            items=results,
        )

    async def _ingest(self, kg: KG, system: System, gids: dict[str, str]) -> dict[str, set[str]]:
        """Every haystack in one bulk call: groups are ingested concurrently."""
        episodes: list[Episode] = []
        for group, gid in gids.items():
            first = next(i for i in self.golden.items if i.group == group)
            episodes += _episodes(self.golden.haystack_of(first), gid, self.mode, system)
        done = await kg.add_episodes(episodes, extract=self.mode is Mode.llm)
        for failure in done.failed:
            self.notes.append(f"{system.value}: {failure}")
        failed = {int(f.split("]", 1)[0].removeprefix("episodes[")) for f in done.failed}
        ok = [e for i, e in enumerate(episodes) if i not in failed]
        turn_of: dict[str, set[str]] = {}
        for ep, res in zip(ok, done.results, strict=True):
            turn_of.setdefault(res.episode_uuid, set()).add(ep.name or "")
        return turn_of

    async def _ask(
        self, kg: KG, system: System, gid: str, item: Item, turn_of: dict[str, set[str]]
    ) -> ItemResult:
        cfg = eval_config(
            self.k,
            cosine=kg.embedder is not None,
            abstain_below=self.abstain_below,
            read_time=self.read_time,
            abstain_joint_below=self.abstain_joint_below,
        )
        t0 = time.perf_counter()
        results = await kg.search(
            item.question, group_id=gid, config=cfg, valid_at=item.asked_at, asked_at=item.asked_at
        )
        latency = (time.perf_counter() - t0) * 1000
        block = render_context(results, max_tokens=self.max_tokens)
        found = _turns_of(results, turn_of) & set(item.evidence)
        current, quoted = stale_in(block, item.stale_answers, item.answers, item.subject)
        res = ItemResult(
            item=item.id,
            type=item.type,
            system=system,
            evidence=len(item.evidence),
            found=len(found),
            empty=not block,
            tokens=approx_tokens(block) if block else 0,
            latency_ms=round(latency, 2),
            stale_current=current if item.stale_answers else None,
            stale_quoted=quoted if item.stale_answers else None,
            gold_in_context=gold_in(block, item.answers) if item.answers else None,
            context=block,
        )
        if self.judge is not None:
            res.answer, res.verdict = await self.judge.answer_and_judge(item, block)
        return res

    async def _full_context(self, item: Item) -> ItemResult:
        assert self.judge is not None
        turns = [t for t in self.golden.haystack_of(item) if t.at <= item.asked_at]
        block = "\n".join(f"[{t.at:%Y-%m-%d %H:%M}] {t.content}" for t in turns)
        answer, verdict = await self.judge.answer_and_judge(item, block)
        return ItemResult(
            item=item.id,
            type=item.type,
            system=System.full_context,
            evidence=len(item.evidence),
            found=len(item.evidence),
            empty=False,
            tokens=approx_tokens(block),
            latency_ms=0.0,
            answer=answer,
            verdict=verdict,
        )


def _rate(rs: Sequence[ItemResult], hit: Callable[[ItemResult], bool | None]) -> Rate:
    marks = [hit(r) for r in rs]
    return Rate(k=sum(1 for m in marks if m), n=sum(1 for m in marks if m is not None))


def _row(system: System, kind: str, rs: Sequence[ItemResult]) -> Row:
    lat = [r.latency_ms for r in rs]
    judged = [r for r in rs if r.verdict is not None]
    return Row(
        system=system,
        type=kind,
        items=len(rs),
        recall=Rate(k=sum(r.found for r in rs), n=sum(r.evidence for r in rs)),
        stale=_rate(rs, lambda r: r.stale_current),
        stale_quoted=_rate(rs, lambda r: r.stale_quoted),
        gold=_rate(rs, lambda r: r.gold_in_context),
        abstain=_rate(rs, lambda r: r.empty if r.type is ItemType.abstain else None),
        false_abstain=_rate(rs, lambda r: r.empty if r.type is not ItemType.abstain else None),
        tokens_mean=round(sum(r.tokens for r in rs) / len(rs), 1) if rs else 0.0,
        p50_ms=round(percentile(lat, 50), 1),
        p95_ms=round(percentile(lat, 95), 1),
        answer=_rate(judged, lambda r: r.verdict == "correct") if judged else None,
        answer_stale=_rate(
            judged, lambda r: r.verdict == "stale" if r.type is not ItemType.abstain else None
        )
        if judged
        else None,
    )


def summarise(results: Sequence[ItemResult]) -> list[Row]:
    rows = []
    for system in dict.fromkeys(r.system for r in results):
        mine = [r for r in results if r.system is system]
        for kind in ItemType:
            of_kind = [r for r in mine if r.type is kind]
            if of_kind:
                rows.append(_row(system, kind.value, of_kind))
        rows.append(_row(system, "all", mine))
    return rows


async def run_eval(
    golden: GoldenSet,
    *,
    home: str | Path | None = None,
    mode: Mode = Mode.structured,
    systems: Sequence[System] | None = None,
    k: int = 10,
    max_tokens: int = 1000,
    abstain_below: float | None = None,
    embedder: Embedder | None = None,
    abstain_joint_below: float | None = None,
    llm: StructuredLLM | None = None,
    progress: Callable[[str], None] | None = None,
    read_time: bool = True,
) -> EvalReport:
    """Run `golden` in a throwaway embedded store (a temporary directory unless `home`).

    Systems default to kg and add_only, plus full_context when an `llm` is given; with an
    `llm` every system's context is also answered and judged."""
    if systems is None:
        systems = [System.kg, System.add_only] + ([System.full_context] if llm else [])
    with tempfile.TemporaryDirectory(prefix="kg-eval-") as tmp:
        kg = await KG.open(
            home=home or tmp,
            embedder=embedder,
            llm=llm,
            ontology=golden.meta.ontology or DEFAULT_ONTOLOGY,
        )
        try:
            runner = Runner(
                kg,
                golden,
                mode=mode,
                systems=systems,
                k=k,
                max_tokens=max_tokens,
                abstain_below=abstain_below,
                judge=Judge(llm) if llm else None,
                abstain_joint_below=abstain_joint_below,
                progress=progress,
                read_time=read_time,
            )
            return await runner.run()
        finally:
            await kg.close()
