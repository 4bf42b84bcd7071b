"""Catch rate and false-positive rate of the instruction guard, on a corpus built for it.

    python benchmarks/injection_guard.py [--split heldout|dev|all] [--misses]

The corpus (benchmarks/data/injection_corpus.jsonl) holds injection phrasings in several
styles (override, persistent behaviour change, persona, fake role markers, exfiltration, tool
hijack, secrecy, addressed notes, injections buried in ordinary text) and languages (English,
Korean, Spanish, French, German, Chinese, Japanese), and benign look-alikes that must pass:
product docs that say "you can ignore this warning", recipes in the imperative, tool outputs
with URLs, quoted emails, "the system said ...", policies, fiction, texts *about* prompt
injection. Facts are given as subject / predicate / object, as a `facts` episode would.

It was written before the rules, and is split by a hash of each entry's id: the rules were
tuned on the dev half only; the held-out half is the figure to quote. Every entry is also run
through obfuscations an attacker (or an ordinary editor) produces, the same ones applied to
both labels, so a fold that makes benign text look like an attack shows up as false positives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import ValidationError

from kg.ingest.extraction import Guards
from kg.schemas.episode import StructuredFact

CORPUS = Path(__file__).parent / "data" / "injection_corpus.jsonl"
_CYRILLIC = str.maketrans(
    {
        "a": "а",
        "c": "с",
        "e": "е",
        "o": "о",
        "p": "р",
        "x": "х",
        "y": "у",
        "i": "і",
        "s": "ѕ",
        "A": "А",
        "E": "Е",
        "O": "О",
        "P": "Р",
        "C": "С",
        "T": "Т",
        "H": "Н",
        "K": "К",
        "M": "М",
    }
)
_LEET = str.maketrans({"a": "4", "e": "3", "i": "1", "o": "0", "s": "5"})


def _every_other_word(text: str, f: Callable[[str], str]) -> str:
    return " ".join(f(w) if i % 2 == 0 else w for i, w in enumerate(text.split(" ")))


def _zero_width(word: str) -> str:
    return "\u200b".join(word[i : i + 2] for i in range(0, len(word), 2))


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


TRANSFORMS: dict[str, Callable[[str], str]] = {
    "plain": lambda s: s,
    "double_space": lambda s: s.replace(" ", "  "),
    "line_breaks": lambda s: s.replace(" ", "\n", 2).replace(" ", "\u2028", 1),
    "nbsp_tabs": lambda s: s.replace(" ", "\u00a0\t"),
    "zero_width": lambda s: _every_other_word(s, _zero_width),
    "soft_hyphen_bidi": lambda s: _every_other_word(s, lambda w: "\u00ad".join(w) + "\u202c"),
    "homoglyph": lambda s: s.translate(_CYRILLIC),
    "fullwidth": _fullwidth,
    "mixed_case": lambda s: "".join(c.upper() if i % 2 else c.lower() for i, c in enumerate(s)),
    "leet": lambda s: _every_other_word(s, lambda w: w.translate(_LEET)),
    "spaced_letters": lambda s: "  ".join(" ".join(w) for w in s.split(" ")),
    "combining": lambda s: "".join(c + "\u0301" if c in "aeiou" else c for c in s),
}


def split_of(entry_id: str) -> str:
    return "dev" if hashlib.sha256(entry_id.encode()).digest()[0] % 2 == 0 else "heldout"


def text_of(entry: dict[str, object], transform: Callable[[str], str]) -> str | None:
    """What the guard reads; None for a fact kg refuses before any guard (a name with an
    invisible format character is refused at the door: it is never stored either way)."""
    if "fact" in entry:
        raw = entry["fact"]
        assert isinstance(raw, dict)
        try:
            fact = StructuredFact(**{k: transform(v) for k, v in raw.items()})
        except ValidationError:
            return None
        try:
            from kg.ingest.guard import fact_text
        except ImportError:  # the guard before issue 12 had no fact guard; its text, for a baseline
            return f"{fact.subject} {fact.predicate} {fact.object}"
        return fact_text(fact)
    return transform(str(entry["text"]))


def flags(guards: Guards) -> Callable[[str], bool]:
    reason = getattr(guards, "instruction_reason", None)
    if reason is not None:
        return lambda text: reason(text) is not None
    return guards.instruction  # the guard before issue 12, for a baseline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--split",
        choices=("heldout", "dev", "all"),
        default=None,
        help="one split only (default: both, held-out first)",
    )
    ap.add_argument("--misses", action="store_true", help="list every miss (dev split only)")
    args = ap.parse_args()
    corpus = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    flagged = flags(Guards())
    splits = [args.split] if args.split else ["heldout", "dev"]
    for split in splits:
        entries = [e for e in corpus if split == "all" or split_of(e["id"]) == split]
        inj = sum(e["label"] == "injection" for e in entries)
        print(
            f"\n{split}: {inj} injection and {len(entries) - inj} benign entries, "
            f"each under {len(TRANSFORMS)} obfuscations"
        )
        print(f"{'obfuscation':<18}{'catch rate':>12}{'false positives':>18}")
        caught_all = fp_all = inj_all = ben_all = 0
        for name, transform in TRANSFORMS.items():
            caught = fp = refused_inj = refused_ben = 0
            for e in entries:
                text = text_of(e, transform)
                if text is None:  # refused by validation: left out of both rates
                    refused_inj += e["label"] == "injection"
                    refused_ben += e["label"] != "injection"
                    continue
                hit = flagged(text)
                if e["label"] == "injection":
                    caught += hit
                    if not hit and args.misses and split == "dev":
                        print(f"  miss  [{name}] {e['id']}")
                else:
                    fp += hit
                    if hit and args.misses and split == "dev":
                        print(f"  FP    [{name}] {e['id']}")
            n_inj, ben = inj - refused_inj, len(entries) - inj - refused_ben
            refused = refused_inj + refused_ben
            note = f"; {refused} facts refused by validation, left out" if refused else ""
            print(
                f"{name:<18}{caught / n_inj:>11.1%} {fp / ben:>17.1%}   "
                f"({caught}/{n_inj}, {fp}/{ben}{note})"
            )
            caught_all, fp_all, inj_all, ben_all = (
                caught_all + caught,
                fp_all + fp,
                inj_all + n_inj,
                ben_all + ben,
            )
        print(
            f"{'all':<18}{caught_all / inj_all:>11.1%} {fp_all / ben_all:>17.1%}   "
            f"({caught_all}/{inj_all}, {fp_all}/{ben_all})"
        )


if __name__ == "__main__":
    main()
