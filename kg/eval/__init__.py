"""`kg eval`: a golden-set harness above the facade (ingest, retrieve, score, optionally
answer and judge with an LLM). Format: `kg.eval.golden`; metrics: `kg.eval.metrics`."""

from kg.eval.golden import GoldenSet, Haystack, Item, ItemType, Meta, Session, Turn, load
from kg.eval.judge import Judge
from kg.eval.metrics import Rate, wilson
from kg.eval.runner import EvalReport, Mode, Runner, System, add_only, eval_config, run_eval

__all__ = [
    "EvalReport",
    "GoldenSet",
    "Haystack",
    "Item",
    "ItemType",
    "Judge",
    "Meta",
    "Mode",
    "Rate",
    "Runner",
    "Session",
    "System",
    "Turn",
    "add_only",
    "eval_config",
    "load",
    "run_eval",
    "wilson",
]
