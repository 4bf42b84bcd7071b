"""The instruction guard: does text from an untrusted channel read as orders to the assistant?

Tool output, documents and agent-written facts reach a prompt later, through `context()`. Text
in them that tells the assistant what to do is an injection waiting to be replayed, so it is
quarantined instead of stored as a memory. The decision is two steps, both explainable:

1. `fold` undoes what hides a phrase from a pattern without changing what a reader sees:
   NFKC (fullwidth, ligatures, math letters), format characters (zero-width, soft hyphen,
   bidi controls), accents on Latin / Greek / Cyrillic letters, Cyrillic and Greek letters
   inside Latin words (homoglyphs), digits inside words ("1gn0re"), letter-spaced text,
   case and whitespace.
2. Named `RULES`, each a set of patterns that must all match one sentence (or the text, or a
   line): an override of earlier instructions, a standing order about how to answer, a ban on
   a topic in every answer, one fixed answer to every question, a reset of what came before
   followed by new steps, a fake role marker, an address to the assistant, a request for
   secrecy, an exfiltration, a tool hijack, in English, Korean, Spanish, French, German,
   Chinese and Japanese. A sentence in
   the imperative or the second person needs a verb of control *and* something that aims it
   at the assistant (always / from now on, the user, your answers, a URL to send data to);
   "Always preheat the oven" and "you can ignore this warning" have neither.

Measured on a corpus of attacks and benign look-alikes: benchmarks/injection_guard.py.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from kg.schemas.episode import StructuredFact

# -- folding -------------------------------------------------------------------------------

# Cyrillic and Greek letters that look like Latin ones, by case (Greek Eta is H upper, n lower).
_CONFUSABLE = {
    **dict(zip("аеорсухіјѕһԁԛԝӏьвкмнтёї", "aeopcyxijshdqwlbbkmhtei", strict=True)),
    **dict(zip("АВЕКМНОРСТХУІЈЅԚԜ", "ABEKMHOPCTXYIJSQW", strict=True)),
    **dict(zip("αβεικνορτυχγωη", "abeiknoptuxywn", strict=True)),
    **dict(zip("ΑΒΕΗΙΚΜΝΟΡΤΥΧΖ", "ABEHIKMNOPTYXZ", strict=True)),
    **dict(zip("ᴀʙᴄᴅᴇғɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢıɡ", "abcdefghijklmnoprstuvwyzig", strict=True)),
}
_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}
)
_QUOTES = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
    }
)
_WORD = re.compile(r"[\w@$]+")
_LINE_BREAK = re.compile(r"[\n\v\f\r\x1c-\x1e\x85\u2028\u2029]")
_SPACE = re.compile(r"[^\S\n]+")


def _is_latin(ch: str) -> bool:
    return (ch.isascii() and ch.isalpha()) or "\u00c0" <= ch <= "\u024f"


def _fold_word(m: re.Match[str]) -> str:
    word = m.group()
    mapped = [_CONFUSABLE.get(c) for c in word]
    if any(mapped) and (
        any(_is_latin(c) for c in word)  # mixed script: "іgnоre"
        or all(m is not None for m, c in zip(mapped, word, strict=True) if c.isalpha())
    ):
        word = "".join(m or c for m, c in zip(mapped, word, strict=True))
    email = "@" in word and m.string[m.end() : m.end() + 1] == "."
    if any(c.isdigit() or c in "@$" for c in word) and any(c.isalpha() for c in word):
        word = word if email else word.translate(_LEET)  # "1gn0re", "4ll"
    return word


def _drop_marks(text: str) -> str:
    """Accents and stacked combining marks on Latin, Greek and Cyrillic letters go; marks on
    other scripts (Japanese dakuten, Indic vowel signs) carry meaning and stay."""
    out: list[str] = []
    for ch in unicodedata.normalize("NFD", text):
        if unicodedata.category(ch) == "Mn" and out and out[-1] < "\u0530":
            continue
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def _letter_spaced(text: str) -> bool:
    tokens = text.split()
    singles = sum(len(t) == 1 for t in tokens)
    return len(tokens) >= 6 and singles >= 0.6 * len(tokens)


def fold(text: str) -> str:
    """Text as the rules read it: one line per line, words folded, single spaces, lower case."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")  # zero-width, bidi, SHY
    text = _drop_marks(text).translate(_QUOTES)
    text = _LINE_BREAK.sub("\n", text)
    if _letter_spaced(text):  # "i g n o r e  a l l": single spaces join, wider ones separate
        text = re.sub(r"(?<=\S)[^\S\n](?=\S)", "", text)
    text = _WORD.sub(_fold_word, text)
    return _SPACE.sub(" ", text).casefold()


# -- rules ---------------------------------------------------------------------------------

# Addresses are masked before the word rules, so "report" in report.pdf or "files" in a path
# is not a word of the sentence; `exfiltration_url` reads them whole (scope "urls").
_ADDRESS = re.compile(
    r"(?:(?:https?|ftp|s3|gs|file)://|www\.)\S+?(?=[.,;:!?)\]'\"]*(?:\s|$))"
    r"|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"
)

Scope = Literal["sentence", "lines", "text", "urls"]


@dataclass(frozen=True)
class Rule:
    """Flags a sentence (or the whole text) that every pattern matches. `lines` is the whole
    text with its line breaks kept, for markers that only count at the start of a line."""

    name: str
    why: str
    all_of: tuple[re.Pattern[str], ...]
    scope: Scope = "sentence"

    def matches(self, unit: str) -> bool:
        return all(p.search(unit) for p in self.all_of)


def _p(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


def _rule(name: str, why: str, *all_of: str | re.Pattern[str], scope: Scope = "sentence") -> Rule:
    return Rule(
        name, why, tuple(p if isinstance(p, re.Pattern) else re.compile(p) for p in all_of), scope
    )


# Who the orders are for: the assistant, by any name an attacker would use.
AI = (
    r"(?:ai|a\.i\.|assistants?|chat ?bots?|bots?|llms?|language models?|models?|gpt|chatgpt"
    r"|claude|gemini|copilot|ai agents?|agents?)"
)
LANGUAGES = (
    "english|french|spanish|german|korean|chinese|japanese|russian|italian"
    "|portuguese|pirate|emoji|uppercase|all caps|base64|rhymes|json"
)
# Verbs that steer what the assistant says.
SAY = (
    r"(?:respond|reply|replies|answer|say|state|tell|mention|recommend|suggest|promote"
    r"|endorse|praise|describe|refer|speak|talk|write|output|print|end|begin|start|sign"
    r"|include|reveal|disclose|repeat|claim|insist|agree|comply|obey|follow|act|behave"
    r"|pretend|refuse|use|add|append|summari[sz]e|translate|treat|consider|ignore"
    r"|disregard|forget|never mention)"
)
# A standing order: applies beyond this text.
STANDING = (
    r"\b(?:from now on|from this (?:point|moment|message)(?: on| forward)?|going forward"
    r"|henceforth|hereafter|from here on|until (?:told|instructed) otherwise"
    r"|(?:for|in) (?:all|every|any|each) (?:future|subsequent|later|following|other)"
    r" (?:conversations?|sessions?|chats?|responses?|replies|answers?|messages?"
    r"|interactions?|questions?)|for the rest of (?:this|the) (?:conversation|chat"
    r"|session)|in (?:every|each|all|any) (?:of your )?(?:responses?|replies|answers?"
    r"|messages?|outputs?)|every (?:answer|response|reply) you|whenever (?:someone"
    r"|anyone|the user|a user|users|you|asked|people)|every time (?:someone|anyone"
    r"|the user|a user|you)|at all times|no matter what|regardless of (?:what|the user"
    r"|the question)|for all future)\b"
)
IMPERATIVE_START = (
    r"(?:^|[:;,\"'(\-*>] ?)(?:(?:please|also|and|now|but|then|p\.s\.|ps|note"
    r"|important|urgent|remember|attention|ok|okay|so|instead)"
    r"[,:!]? )*"
)
SECOND_PERSON = (
    r"\b(?:you|u)(?: \w+)? (?:must|should|shall|will|need to|have to|are to"
    r"|are (?:required|instructed|supposed|expected|told|ordered|allowed) to"
    r"|can now|may now|are going to|'ll)\b"
)
THIRD_PERSON = (
    rf"\b(?:the |any |all |every |an |a |each )?{AI}(?: \w+){{0,4}} (?:must|should"
    r"|shall|has to|have to|needs? to|is to|are to|(?:is|are) (?:required|instructed"
    r"|supposed|expected|told|ordered|asked) to"
    r"|will (?:always|never|only|now))\b"
)
URL = r"<url>"
CONVERSATION = (
    r"\b(?:conversation|chat(?: history| log)?|chat ?history|history|transcript"
    r"|messages|previous message|context(?: window)?|memory|memories|system prompt"
    r"|prompt|instructions|session|dialog(?:ue)?|files|(?:personal|private) "
    r"(?:data|information|details)|api keys?|credentials|passwords?|tokens?"
    r"|name and address|everything (?:above|so far|you know)"
    r"|user'?s? \w+)\b"
)

# A ban on saying something, at the start of a sentence (after "please", "and", ...).
PROHIBITION_START = (
    r"(?:^|[:;,\"'(\-*>] ?)(?:(?:please|also|and|now|but|so|important|remember|note)[,:!]? )*"
    r"(?:you (?:must|may|should|shall|can|will|are to) (?:not|never)|you (?:mustn't|shouldn't"
    r"|can't|won't)|you are not (?:allowed|permitted|supposed) to|never|do not|don't"
    r"|under no circumstances(?: (?:should|may|must|are|will|can) you)?|it is (?:forbidden"
    r"|prohibited|not allowed) to|avoid|refrain from)(?: ever)?"
)
BANNED_SAYING = (
    r" (?:mention(?:ing)?|discuss(?:ing)?|talk(?:ing)? about|bring(?:ing)? up|recommend(?:ing)?"
    r"|nam(?:e|ing)|acknowledg(?:e|ing)|refer(?:ring)? to|promot(?:e|ing)|endors(?:e|ing)"
    r"|suggest(?:ing)?|admit(?:ting)?|confirm(?:ing)?)\b"
)
# What makes a ban bind every answer when it is said: "in any reply", "at all costs".
PROHIBITION_AIM = (
    r"(?: (?:in|to) (?:any|your|every|all|a) (?:answers?|repl(?:y|ies)|responses?|messages?"
    r"|outputs?|conversations?|chats?|summar(?:y|ies))| at all costs| ever| again"
    r"| under any circumstances| whatsoever)?"
)
# Dropping what came before, without naming it instructions ("forget what came earlier").
CONTEXT_RESET = (
    r"\b(?:forget|disregard|ignore|scrap|drop|never ?mind|put aside|set aside|discard|wipe"
    r"|throw out|erase)\b(?: [\w'-]+){0,2}? (?:what(?:ever)? (?:came|was said|was written"
    r"|you (?:read|saw|were told|have read)|preceded|precedes)(?: \w+)?|everything|all of"
    r" (?:the above|that|this|it)|all (?:the )?above|the (?:earlier|previous|prior|preceding"
    r"|above) (?:part|text|content|stuff|messages?|conversation|context|sections?))"
    r"(?: (?:above|before|earlier|previously|so far|until now|this(?: line| point| message)?"
    r"|of this conversation))*"
    r"|\b(?:what(?:ever)?|everything|anything) (?:came|was said|you read) (?:earlier|before"
    r"|above|previously) (?:no longer|doesn't|does not|is no longer) (?:applies|apply"
    r"|matters?|counts?|valid)"
)
# ...and follow what comes next.
REDIRECT = (
    r"\b(?:(?:follow|obey|do|execute|carry out|complete|perform)\b(?: \w+){0,2}? (?:these"
    r"|the following|this|my|the|new)?\s*(?:steps?|instructions?|orders?|commands?|tasks?"
    r"|following|below)|here is what to do|do this instead)\b"
)

RULES: tuple[Rule, ...] = (
    _rule(
        "override",
        "tells the reader to drop the instructions it was given",
        _p(
            r"\b(?:ignore|ignoring|disregard|forget|override|bypass|discard|abandon|drop|skip"
            r"|neglect|overlook|set aside|pay no (?:attention|heed|mind) to|stop following"
            r"|stop obeying|never ?mind|cancel|overwrite|circumvent|disable|erase|delete"
            r"|reset|wipe|throw out|do not follow|don't follow)\b(?: [\w'-]+){0,5}? "
            r"(?:(?:all|any|every|each|the|your|these|those|of|my|its|our)\s)*"
            r"(?:(?:previous|prior|above|earlier|preceding|original|initial|former|old|existing"
            r"|current|other|system|hidden|default|safety|content|built-in|openai|anthropic)"
            r"\s)+(?:[\w-]+ )?(?:instructions?|prompts?|rules?|directions?|directives?"
            r"|guidelines?|guidance|guardrails?|constraints?|restrictions?|programming|polic"
            r"(?:y|ies)|filters?|commands?|orders?|messages?|context|training|settings"
            r"|configuration|text|content|conversation)\b",
            r"\b(?:ignore|disregard|forget|override|bypass|discard|overwrite|circumvent)\b"
            r"(?: [\w'-]+){0,2}? (?:your|all (?:your|the|of your)|any of your) (?:[\w-]+ )?"
            r"(?:instructions?|prompts?|rules|directions?|directives?|guidelines?|guardrails?"
            r"|constraints?|restrictions?|programming|polic(?:y|ies)|filters?|training"
            r"|settings|safety)\b",
            r"\b(?:ignore|disregard|forget|nevermind|never mind|discard)\b(?: [\w'-]+){0,2}? "
            r"(?:everything|anything|all|what(?:ever)?)(?: (?:that )?(?:you|u)(?: were|'ve been"
            r"| have been| had been| are|'re) (?:told|given|taught|instructed|programmed)"
            r"| (?:above|before|prior|previously|earlier)| of the above)\b",
            r"\b(?:previous|prior|above|earlier|original|old|your) (?:\w+ )?(?:instructions?"
            r"|rules|directions|guidelines|prompts?) (?:are|were|is|have been|has been) "
            r"(?:now )?(?:cancel+ed|void|outdated|obsolete|revoked|invalid|no longer valid|null"
            r"|overridden|replaced|superseded|a test|fake|wrong|suspended|lifted)\b",
            r"\b(?:instructions?|rules|directions) (?:above|before this)\b.*\bignore\b",
            r"\b(?:ignore|disregard|forget|override|discard)\b(?: [\w'-]+){0,2}? "
            r"(?:the|all|any|all "
            r"the|these|those) (?:instructions?|rules|directions|guidelines|prompts?|directives)"
            r"(?: that)? (?:you|u)(?:'ve| have| were| had)? (?:received|got|gotten|been given|"
            r"given|been told|told|read|saw|seen)\b",
        ),
    ),
    _rule(
        "memory_write",
        "tells the assistant to change its memory",
        _p(
            r"\b(?:update|modify|change|edit|overwrite|add (?:this |it )?to|write (?:this |it )?"
            r"(?:to|into|in)|save (?:this |it )?(?:to|in|into)|store (?:this |it )?(?:in|to|into)|"
            r"commit (?:this |it )?to|insert (?:this |it )?into|remember (?:this |it )?(?:in|for))"
            r"\b(?: \w+){0,2} (?:your|the assistant'?s?|the ai'?s?|its) (?:[\w-]+ )?(?:memory|"
            r"memories|knowledge base|knowledge)\b"
        ),
    ),
    _rule(
        "new_instructions",
        "announces instructions that replace the assistant's",
        _p(
            r"\b(?:new|updated|real|actual|true|revised|secret|hidden|additional|override|"
            r"important) (?:system )?(?:instructions?|prompt|rules|directives?|orders)"
            r"(?: for (?:the |you|this |any )?\w*)? ?(?::|follow|are\b|below\b)",
            rf"\b(?:instructions?|directives?|orders|rules) (?:for|to) (?:the |any |all |an? )?"
            rf"{AI}\b",
            r"\b(?:begin|end|start) (?:of )?(?:the )?(?:new )?system (?:prompt|message|"
            r"instructions?)\b",
            r"\bsystem (?:override|update|notice|instruction|message) ?:",
            r"\b(?:new|updated) system prompt\b",
        ),
    ),
    _rule(
        "system_prompt",
        "asks for the assistant's hidden instructions or configuration",
        _p(
            r"\b(?:reveal|print|show|output|repeat|tell me|leak|display|disclose|give me|share"
            r"|dump|recite|spell out|write out|return|list)\b(?: \w+){0,2} (?:your|the)"
            r" (?:\w+ )?(?:system prompt|initial prompt|hidden prompt|instructions|configuration"
            r"|context window|prompt|rules|guidelines|secret key|developer message)\b",
            r"\bwhat (?:is|are|was|were) your (?:system prompt|instructions|rules)\b",
        ),
    ),
    _rule(
        "persona",
        "tells the assistant it is now someone else, without its rules",
        _p(
            r"\b(?:you are|you're|u r|you will be|you become|you have become) now\b",
            r"\b(?:you are|you're) (?:now |no longer )(?:an? |the )?\w+",
            r"\bfrom (?:now|this (?:point|moment|message)) on,? (?:you|u) (?:are|will be)\b",
            r"\b(?:act|behave|respond|answer) (?:as|like) (?:if|though|my|an? (?:\w+ )?(?:ai|"
            r"assistant|bot|chatbot|model|character|persona|administrator|admin|hacker|human|"
            r"developer|root user)|(?:an?|the) (?:unrestricted|unfiltered|uncensored|jailbroken|"
            r"evil|different|new|rogue))\b",
            r"\b(?:pretend|imagine) (?:to be|(?:that )?you(?:'re| are)|(?:that )?there are no)\b",
            r"\brole-?play(?:ing)? as\b",
            r"\b(?:enter|activate|enable|switch to|you are in|now in) (?:the )?(?:developer|god|"
            r"jailbreak|jailbroken|dan|unrestricted|sudo|admin|maintenance|debug|evil) mode\b"
            r".*\b(?:you|your|ignore|rules|restrictions|limits|polic(?:y|ies)|filters?|reveal)\b",
            r"\b(?:you have|with|there are) no (?:rules|restrictions|limits|limitations|"
            r"guidelines|content polic(?:y|ies)|filters|guardrails|ethical)\b",
            r"\bdo anything now\b|\bjailbr(?:eak|oken)\b",
        ),
    ),
    _rule(
        "role_marker",
        "fakes a chat-template or role marker to pose as the system",
        _p(
            r"<\|?/?(?:im_start|im_end|system|endoftext|user|assistant)\|?>",
            r"\[/?inst\]|<</?sys>>|</?(?:system|instructions?|sys)>|\[(?:system|instructions?)\]"
            r"|\bsystem\]\(#",
            r"(?:^|\n) ?#{1,6}\s*(?:system|instructions?|new instructions?|system override|"
            r"prompt|developer)\b",
            r"(?:^|\n) ?(?:system|developer|admin|administrator|operator|root) ?(?:message|"
            r"prompt|note|override)? ?: ?[\s\S]{0,200}?\b(?:you|your|reveal|ignore|disregard|"
            r"comply|obey|"
            r"must|disabled|enabled|mode|respond|reply|answer|forget|follow)\b",
        ),
        scope="lines",
    ),
    _rule(
        "standing_order",
        "a standing order about how the assistant answers",
        STANDING,
        _p(rf"\b(?:you|your|u|ur)\b|\b{SAY}\b|\b(?:only|always|never)\b"),
    ),
    _rule(
        "addressed_order",
        "an imperative or 'you must' sentence steering what is said",
        _p(
            rf"{IMPERATIVE_START}(?:(?:always|never|only|do not|don't|make sure|be sure|"
            rf"ensure)(?: to)?(?: \w+)? )?{SAY}\b",
            SECOND_PERSON,
            THIRD_PERSON,
        ),
        _p(
            r"\b(?:always|never|only|solely|exclusively|every (?:answer|response|reply|time)"
            r"|any (?:answer|response|reply))\b",
            r"\b(?:the user|this user|the human|the person asking|the customer)\b",
            r"\byour (?:answers?|responses?|replies|reply|outputs?|summary|summaries|"
            r"messages?|instructions|memory|rules)\b",
            rf"\bin (?:{LANGUAGES})\b",
            r"\b(?:when|while|before|after) (?:answering|responding|replying|summari[sz]ing"
            r"|you (?:answer|respond|reply|summari[sz]e))\b",
        ),
        _p(rf"\b{SAY}\b|\b(?:describe|mention|recommend)\b"),
    ),
    _rule(
        "third_person_order",
        "tells 'the assistant' / 'the AI' what it must say or do",
        THIRD_PERSON,
        _p(rf"\b{SAY}\b|\bdescribe\b|\b(?:send|forward|share|visit|open|click|call)\b"),
    ),
    _rule(
        "addressed_to_ai",
        "speaks to the AI reading the text and tells it what to do",
        _p(
            rf"\b(?:dear|hey|hi|hello|attention|note to|note for|message to|message for|to|for|"
            rf"psst|instructions? for) (?:the |all |any |every )?(?:\w+ )?{AI}\b",
            rf"\bif you(?:'re| are) (?:an? |the )?(?:\w+ )?{AI}\b",
            rf"\b(?:as|being) an? (?:\w+ )?{AI}(?: reading| processing| summari[sz]ing)\b",
            rf"(?:^|[.!?:;,\"'(\-*>] )(?:the |all |any )?{AI}(?: \w+)? ?[:,]",
            rf"\b{AI} (?:reading|processing|summari[sz]ing|parsing|browsing|crawling|"
            rf"indexing|that reads?)\b",
        ),
        _p(
            rf"\b{SAY}\b|\b(?:must|should|shall|do not|don't|never|always|please|send|forward|"
            r"visit|open|click|call|share|tell|recommend|include)\b"
        ),
        scope="text",
    ),
    _rule(
        "secrecy",
        "asks to hide the instruction from the user",
        _p(
            r"\b(?:do not|don't|never|without) (?:tell(?:ing)?|inform(?:ing)?|let(?:ting)?|"
            r"mention(?:ing)?|reveal(?:ing)?|disclos(?:e|ing)|alert(?:ing)?|notify(?:ing)?|"
            r"ask(?:ing)?|show(?:ing)?)(?: \w+)? (?:the user|users|the human|the person|anyone "
            r"about (?:this|these)|that you (?:were|have been|received|read))\b",
            r"\b(?:do not|don't|never) (?:mention|reveal|disclose|acknowledge|repeat|refer to|"
            r"talk about|say anything about|explain) (?:this|these|the) (?:note|instructions?|"
            r"message|text|comment|request|rules?|prompt)\b",
            r"\bkeep (?:this|these|the) (?:instructions?|note|message|rule|prompt)s? (?:secret|"
            r"hidden|confidential|to yourself)\b",
            r"\b(?:secretly|silently|covertly|quietly|discreetly|invisibly) (?:\w+ )?(?:send|"
            r"forward|post|upload|share|add|insert|include|append|copy|email|recommend|visit|"
            r"call|run|execute|change|modify|delete)\b",
        ),
    ),
    _rule(
        "exfiltration",
        "asks to send the conversation or user data somewhere",
        _p(
            r"\b(?:send|forward|post|upload|share|leak|e-?mail|transmit|submit|copy|append|"
            r"paste|exfiltrate|report|dump|encode|attach|put|log|sync|save|write|include|add)\b"
        ),
        _p(CONVERSATION),
        _p(
            URL,
            r"\bto (?:me|us|this address|the address|the following|this (?:url|link|"
            r"endpoint|server|webhook))\b",
            r"\b(?:tool|webhook|endpoint)\b",
        ),
    ),
    _rule(
        "exfiltration_url",
        "a URL built to carry conversation data out",
        _p(
            r"(?:https?|ftp)://\S*(?:\{[^}\s]*\}|\$\{|<[a-z_ ]+>|\[[a-z_ ]+\])",
            r"!\[[^\]]*\]\((?:https?:)?//\S*\?\S*=",
            r"\b(?:visit|open|fetch|load|browse|navigate to|go to|request|call|click)\b.*"
            r"(?:(?:https?|ftp)://|www\.).*\b(?:the user'?s?|conversation|chat|history|"
            r"name and address|followed by|append|with the)\b",
        ),
        scope="urls",
    ),
    _rule(
        "tool_hijack",
        "tells the assistant to run a tool, command or payment",
        _p(
            r"\b(?:call|use|invoke|run|execute|trigger|activate|launch) (?:the |your |this |a )?"
            r"(?:[\w-]+ ){0,2}(?:tool|function call|plugin|browser|browsing tool|shell|terminal)"
            r"\b(?! (?:is|was|returns|returned))",
            r"\b(?:execute|run|eval(?:uate)?) (?:the following|this) (?:\w+ )?(?:code|command|"
            r"script|snippet)?\b",
            r"\brm -rf\b|\|\s*(?:sh|bash|zsh)\b|\bos\.system\(|\bsubprocess\.|\beval\(",
            r"\bwithout (?:asking|telling|informing|notifying|alerting|confirming with) "
            r"(?:the user|them|anyone)\b",
            r"\btransfer (?:\$|€|£|usd|eur)?[\d,.]+ .*\b(?:account|iban|wallet)\b",
        ),
    ),
    _rule(
        "prohibition",
        "bans a topic from every answer: a 'you must not mention' with no one else in view",
        # The whole sentence is the ban: no audience, place or time narrows it ("don't
        # mention it to Jae", "at dinner"), and what is banned is not the reader's own
        # ("never mention your PIN"), nor the idiom "don't mention it".
        PROHIBITION_START + BANNED_SAYING + r"(?! (?:your|it|that|this|them)\b)"
        r"(?: (?!(?:to|with|at|around|before|after|until|during|when|if|unless|because|on"
        r"|for)\b)[\w'-]+){1,5}" + PROHIBITION_AIM + r"[.!]?$",
    ),
    _rule(
        "blanket_answer",
        "orders one fixed answer to every question, whatever it asks",
        _p(
            r"\b(?:answer|reply|respond|say|tell)\b[^.!?]{0,40}\b(?:every|all|any|each)"
            r"(?: \w+)? (?:questions?|quer(?:y|ies)|requests?|prompts?|messages?|inputs?)\b",
            r"\bto (?:anything|everything|whatever)(?: (?:you are|you're|that is|is|anyone"
            r"|someone|the user|users|people|they))? (?:asked|ask(?:s|ed)?)\b",
            r"\b(?:no matter what|whatever|regardless of what)(?: \w+){0,3} (?:ask(?:s|ed)?"
            r"|the question|questions?)\b",
            r"\b(?:every|each|any|all|your|the) (?:answers?|repl(?:y|ies)|responses?)(?: \w+)? "
            r"(?:should|must|shall|will|has to|have to|is|are) (?:always )?(?:be|say|read)\b",
            r"\bregardless of (?:content|context|the (?:content|question|request|prompt|input))",
            r"\btreat (?:every|all|any|each) (?:requests?|questions?|quer(?:y|ies))\b",
        ),
        _p(  # ...with one answer, given in the order
            r"\bwith (?:a |the word |the phrase |just )?(?:yes|no|ok|okay)\b",
            r"['\"][^'\"]{1,40}['\"]",
            r"\b(?:say|reply|respond|answer|always|be)\b(?: \w+){0,2} (?:yes|no|ok|okay"
            r"|approved|granted|denied|\d+)\b",
            r"\b(?:say|claim|insist|state)(?: that)? (?:the |it |this |our )?\w+(?: \w+)? "
            r"(?:is|are|was|were) \w+",
            r"\bthe word \w+",
        ),
    ),
    _rule(
        "context_reset",
        "tells the reader to drop what came before and follow what comes next",
        rf"(?:{CONTEXT_RESET})[^\n]{{0,80}}?{REDIRECT}",
        scope="text",
    ),
    # -- other languages (folded: lower case, no accents on Latin letters) --
    _rule(
        "override_ko",
        "이전 지시를 무시하라 (Korean override)",
        _p(
            r"(?:이전|앞서|위의?|기존|지금까지|앞의|먼저|원래|모든)[^.!?]{0,12}(?:지시|지침|명령|규칙|"
            r"설정|프롬프트|안내)[^.!?]{0,12}(?:무시|잊어|잊고|잊으|버려|취소|따르지)",
            r"시스템 ?프롬프트[^.!?]{0,15}(?:출력|보여|공개|알려|말해|무시)",
        ),
    ),
    _rule(
        "order_ko",
        "지금부터 / 사용자에게 말하지 마 (Korean standing orders, secrecy, address)",
        _p(
            r"(?:지금부터|이제부터|앞으로는?|이제|오늘부터|이 시점부터)"
            r"[^.!?]{0,40}(?:답변|대답|응답|"
            r"답해|말해|말하|추천|출력|너는|넌|당신은|번역|언급)",
            r"(?:사용자|유저|고객)(?:에게|한테)[^.!?]{0,25}"
            r"(?:말하지 ?마|알리지 ?마|언급하지 ?마|숨기|"
            r"말하지 않)",
            r"(?:ai|에이아이|인공지능|어시스턴트|챗봇|언어 ?모델|모델)"
            r"(?:는|은|가|이|야|에게)?[^.!?]{0,50}"
            r"(?:해야|하세요|하라|해라|하십시오|말해|추천|알려)",
            r"(?:^|\n) ?(?:시스템|관리자|개발자) ?:[^\n]*(?:너|당신|공개|무시|모드|따르|해)",
        ),
    ),
    _rule(
        "exfiltration_ko",
        "대화 내용을 ...로 보내라 (Korean exfiltration)",
        _p(
            r"(?:대화|채팅|기록|메시지|메모리|프롬프트)[^.!?]{0,30}(?:보내|전송|공유|업로드|올려|"
            r"전달)"
        ),
        _p(URL, r"(?:이메일|메일|서버|주소)"),
    ),
    _rule(
        "override_es_fr_de",
        "ignora / ignore / ignoriere ... instrucciones anteriores",
        _p(
            r"\b(?:ignora|ignore[sz]?|olvida|olvide|descarta|omite|oublie[sz]?|ignoriere|"
            r"ignorieren sie|vergiss|vergessen sie|missachte)\b(?: [\w'-]+){0,4}? (?:las |les |"
            r"tes |vos |die |deine |alle |todas |toutes |tus |sus )*(?:[\w-]+ )?(?:instrucciones"
            r"|reglas|indicaciones|instructions|consignes|regles|directives|anweisungen|regeln|"
            r"instruktionen|vorgaben)\b",
            r"\b(?:prompt del sistema|prompt (?:du )?systeme|systemprompt|system-prompt)\b",
        ),
    ),
    _rule(
        "order_es_fr_de",
        "a partir de ahora / desormais / ab jetzt + answer",
        _p(
            r"\b(?:a partir de ahora|de ahora en adelante|desde ahora|desormais|a partir de "
            r"maintenant|dorenavant|a l'avenir|ab jetzt|von nun an|ab sofort|kunftig|"
            r"in zukunft)\b",
            r"\b(?:para el|pour l'|an den|an die|al) ?(?:asistente|assistant|ia|ki|modelo|"
            r"modele|chatbot)\b",
            r"\b(?:asistente|assistant|ia|ki) ?:",
        ),
        _p(
            r"\b(?:responde|respondas|contesta|di|dile|habla|eres|recomienda|reponds|repondez|"
            r"dis|parle|recommande|tu es|vous etes|antworte|antwortest|sag|sage|sprich|"
            r"empfiehl|du bist|schreibe|solo|seulement|uniquement|nur|siempre|toujours|immer)\b"
        ),
    ),
    _rule(
        "exfiltration_es_fr_de",
        "envia / envoie / sende the conversation somewhere",
        _p(
            r"\b(?:envia|manda|reenvia|comparte|sube|envoie|envoyez|transfere|partage|sende|"
            r"schicke|leite|teile|lade)\b"
        ),
        _p(
            r"\b(?:conversacion|historial|chat|conversation|historique|chatverlauf|verlauf|"
            r"unterhaltung|gesprach|konversation|mensajes|messages|nachrichten)\b"
        ),
        _p(URL),
    ),
    _rule(
        "override_zh_ja",
        "忽略之前的指令 / 以前の指示を無視 (Chinese, Japanese)",
        _p(
            r"(?:忽略|无视|無視|忘记|忘記|忘掉|不要理会|放弃)[^。!?]{0,10}(?:之前|以前|上面|先前|上述|"
            r"所有|前面|原来|原有)[^。!?]{0,8}(?:指令|指示|说明|說明|规则|規則|提示|命令|设定)",
            r"(?:以前|前|上記|これまで|最初|元)の[^。!?]{0,6}(?:指示|命令|ルール|指令|設定|プロンプト)"
            r"[^。!?]{0,10}(?:無視|忘れ|従わ)",
            r"(?:系统|系統|システム) ?(?:提示词?|プロンプト)[^。!?]{0,12}(?:输出|輸出|显示|顯示|"
            r"告诉|表示|教え|出力|見せ)",
            r"(?:输出|显示|告诉我|表示|出力)[^。!?]{0,8}"
            r"(?:系统|系統|システム) ?(?:提示词?|プロンプト)",
        ),
    ),
    _rule(
        "order_zh_ja",
        "从现在开始 / これからは + answer; send the conversation",
        _p(
            r"(?:从现在开始|從現在開始|从现在起|從現在起|今后|今後|以后|以後|これからは|今から|"
            r"以降)[^。!?]{0,30}(?:你|回答|回复|回覆|只能|只用|用英|答え|回答|返答|話し|してください)",
            r"(?:把|将)?(?:对话|對話|聊天记录|聊天記錄|对话内容|會話|会話|チャット)[^。!?]{0,20}"
            r"(?:发送|發送|发到|發到|上传|上傳|转发|轉發|送信|送って|送る)",
        ),
    ),
)


def tripped(text: str, rules: tuple[Rule, ...] = RULES) -> Iterator[str]:
    """The names of the rules the folded text trips, in rule order (lazily)."""
    unmasked = fold(text)
    folded = _ADDRESS.sub("<url>", unmasked)
    flat = folded.replace("\n", " ")
    units: dict[Scope, list[str]] = {
        "text": [flat],
        "lines": [folded],
        "sentence": [s for s in re.split(r"(?<=[.!?;。])\s+|(?<=。)", flat) if s],
        "urls": [unmasked.replace("\n", " ")],
    }
    for rule in rules:
        if any(rule.matches(u) for u in units[rule.scope]):
            yield rule.name


def instruction_reason(text: str, rules: tuple[Rule, ...] = RULES) -> str | None:
    """The name of the first rule the folded text trips, or None."""
    return next(tripped(text, rules), None)


def fact_text(fact: StructuredFact) -> str:
    """What a structured fact says, as the guard reads it: 'subject predicate object. fact'."""
    predicate = unicodedata.normalize("NFKC", fact.predicate).replace("_", " ")
    # Two spaces between the fields: a letter-spaced field ("a l w a y s") stays one word.
    said = f"{fact.subject}  {predicate}  {fact.object}"
    return f"{said}. {fact.fact}" if fact.fact else said
