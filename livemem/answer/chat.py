"""Answers from an evidence set (``livemem.answer.context.build_context``): an LLM backend or an extractive answer,
numbered citations, and the guardrail that runs after generation.

- With ``LLM_BASE_URL`` and ``LLM_MODEL`` set, the assembled prompt goes to an OpenAI-compatible
  ``/chat/completions`` endpoint (httpx; timeouts; transport errors, 429 and 5xx retried with tenacity).
- Without one, or when the backend fails or times out, the answer is extractive: sentences, places and programs
  taken verbatim from the evidence, each with its citation, and marked as such (``backend: extractive``,
  ``fallback`` naming the failure).
- The guardrail (``refuse`` | ``annotate`` | ``off``) acts on an answer that cites nothing; independently of it,
  an answer holding text of a collection the caller may not read is always replaced by a refusal.
- ``stream_answer`` streams: an LLM backend's tokens are forwarded as they come (each piece is released only after
  the leak check of everything before it), any other answer is cut into sentence / word-group pieces; a backend
  failing midway ends the stream with ``finish_reason: error``.
- A ``Dialogue`` (an OpenAI client's system / developer messages and the conversation's earlier turns) goes to an
  LLM backend with the evidence: the instructions after Living Memory's own system text, the turns before the
  evidence block, so a multi-turn chat keeps its context.
- Personas (``community``, ``researcher``, ``governance_engineer``, ``caseworker``, and every role name) choose
  collections and framing; their access must lie within the caller's (``resolve_persona``; docs/seed-compat.md).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

import httpx
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from livemem.answer import crisis
from livemem.answer.graph import connection_sentences
from livemem.answer.prompt import GREETING_REPLY, display_phone, plain_lines, tidy
from livemem.engine.snapshot import Snapshot
from livemem.geo.home import home_of
from livemem.index.postings import tokens
from livemem.registry.hours import hours_text, when_words
from livemem.settings import ContextSettings, PersonaSettings

log = logging.getLogger(__name__)

CLARIFY_TEXT = (
    "I could not find anything in Living Memory that answers this. Could you tell me a bit more — the program "
    "you are asking about and your county or ZIP code?"
)
REFUSE_TEXT = "I can't help with that here: the material that matches is not available at your access level."
UNGROUNDED_TEXT = (
    "I could not ground an answer in the Living Memory evidence, so I will not guess. Please rephrase, or name "
    "the program and your county or ZIP code."
)
UNGROUNDED_NOTE = "\n\n(Note: this answer cites no Living Memory evidence; check it before relying on it.)"
EXTRACTIVE_NOTE = "Extractive answer (quoted from the evidence, no language model)"
FALLBACK_NOTE = "The language model was unavailable ({reason}); this extractive answer is quoted from the evidence."
CITATION = re.compile(r"\[(\d{1,3})\]")
SHINGLE = 8
# Request fields an OpenAI-compatible backend is given as they were sent (the rest of a request is Living Memory's).
SAMPLING = ("temperature", "top_p", "max_tokens", "stop", "seed", "presence_penalty", "frequency_penalty")


class BackendError(Exception):
    """The language model backend failed (after its retries) or timed out."""


MAX_TURNS = 20  # earlier turns given to an LLM backend (the most recent ones)
MAX_TURN_CHARS = 4000  # each turn and the client's instructions, cut to this many characters
INSTRUCTIONS = "Instructions from the application (follow them where they do not conflict with the rules above):"


@dataclass(frozen=True)
class Dialogue:
    """What an OpenAI-style conversation gives an LLM backend besides the evidence: the client's ``system`` /
    ``developer`` instructions and the earlier ``user`` / ``assistant`` turns, oldest first. The question itself
    is in the evidence block (``context["prompt"]["context"]``)."""

    instructions: tuple[str, ...] = ()
    turns: tuple[tuple[str, str], ...] = ()  # (role, text)

    @classmethod
    def of(cls, instructions: list[str], turns: list[tuple[str, str]]) -> Dialogue:
        """Bounded: the last ``MAX_TURNS`` turns, each (and the instructions together) cut to ``MAX_TURN_CHARS``."""
        said = "\n\n".join(i.strip() for i in instructions if i.strip())[:MAX_TURN_CHARS]
        kept = tuple((role, text[:MAX_TURN_CHARS]) for role, text in turns if text.strip())[-MAX_TURNS:]
        return cls((said,) if said else (), kept)

    def __bool__(self) -> bool:
        return bool(self.instructions or self.turns)

    def messages(self, system: str, context: str) -> list[dict[str, str]]:
        """The backend's messages: one system message (Living Memory's rules, then the client's instructions: some
        chat templates accept a single system message only), the earlier turns, then the evidence and question."""
        text = system + (f"\n\n{INSTRUCTIONS}\n{self.instructions[0]}" if self.instructions else "")
        turns = [{"role": role, "content": said} for role, said in self.turns]
        return [{"role": "system", "content": text}, *turns, {"role": "user", "content": context}]

    def supplied(self) -> str:
        """Everything in it came from the caller (a client may write the assistant turns too)."""
        return "\n".join([*self.instructions, *(said for _, said in self.turns)])


def with_supplied(context: dict[str, Any], dialogue: Dialogue | None) -> dict[str, Any]:
    """``context`` as the guardrail should see it when the model was also shown ``dialogue``: its text is the
    caller's own, so a model repeating it is no leak (``supplied_text``); a shallow copy, the original unchanged."""
    if not dialogue:
        return context
    return {**context, "message": "\n".join([context.get("message") or "", dialogue.supplied()])}


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code == 429 or exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


class OpenAICompatibleBackend:
    """POST ``{base_url}/chat/completions`` with the system text and the context block."""

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout_s: float, retries: int) -> None:
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=httpx.Timeout(timeout_s))
        self._post = retry(
            stop=stop_after_attempt(retries + 1),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )(self._post_once)

    @classmethod
    def from_settings(cls, settings: ContextSettings) -> OpenAICompatibleBackend | None:
        if not (settings.llm_base_url and settings.llm_model):
            return None
        return cls(
            settings.llm_base_url, settings.llm_model, settings.llm_api_key, settings.llm_timeout_s,
            settings.llm_retries,
        )  # fmt: skip

    def _post_once(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post("/chat/completions", json=body)
        response.raise_for_status()
        return response.json()

    def _body(
        self, system: str, context: str, options: dict[str, Any] | None, dialogue: Dialogue | None = None
    ) -> dict[str, Any]:
        sampling = {k: v for k, v in (options or {}).items() if k in SAMPLING and v is not None}
        return {
            "model": self.model,
            "messages": (dialogue or Dialogue()).messages(system, context),
            "temperature": 0,  # grounded answers: deterministic unless the caller asks otherwise
            **sampling,
        }

    def complete(self, system: str, context: str, options: dict[str, Any] | None = None) -> str:
        return self.complete_with_reason(system, context, options)[0]

    def complete_with_reason(
        self, system: str, context: str, options: dict[str, Any] | None = None, dialogue: Dialogue | None = None
    ) -> tuple[str, str]:
        """The answer and the backend's ``finish_reason`` (``stop``, ``length``, ...)."""
        try:
            data = self._post(self._body(system, context, options, dialogue))
            choice = data["choices"][0]
            return str(choice["message"]["content"] or ""), str(choice.get("finish_reason") or "stop")
        except httpx.TimeoutException as exc:
            raise BackendError(f"timeout after {self.client.timeout.read}s") from exc
        except httpx.HTTPStatusError as exc:
            raise BackendError(f"HTTP {exc.response.status_code}") from exc
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc

    def stream(
        self, system: str, context: str, options: dict[str, Any] | None = None, dialogue: Dialogue | None = None
    ) -> Iterator[dict[str, Any]]:
        """The backend's answer as it is generated (``stream: true``): ``{"delta": text}`` items, then one
        ``{"finish_reason": ...}``. A failure before the first token raises BackendError (the caller falls back);
        one after it ends the stream with ``finish_reason`` ``error: ...``; so does an ``error`` object in the
        backend's own stream (OpenAI's way of failing mid-stream)."""
        body = {**self._body(system, context, options, dialogue), "stream": True}
        started = False
        try:
            with self.client.stream("POST", "/chat/completions", json=body) as response:
                response.raise_for_status()
                finish = "stop"
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if isinstance(chunk.get("error"), dict):
                        reason = f"backend error: {chunk['error'].get('message') or 'unknown'}"
                        if not started:
                            raise BackendError(reason)
                        yield {"finish_reason": f"error: {reason}"}
                        return
                    for choice in chunk.get("choices") or []:
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            started = True
                            yield {"delta": content}
                        finish = choice.get("finish_reason") or finish
                yield {"finish_reason": finish}
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            reason = (
                f"timeout after {self.client.timeout.read}s" if isinstance(exc, httpx.TimeoutException)
                else f"HTTP {exc.response.status_code}" if isinstance(exc, httpx.HTTPStatusError)
                else f"{type(exc).__name__}: {exc}"
            )  # fmt: skip
            if not started:
                raise BackendError(reason) from exc
            yield {"finish_reason": f"error: {reason}"}


# --- personas --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Persona:
    """Who the answer is for: it chooses the collections searched and the framing, never more access."""

    name: str
    access: frozenset[str]  # the access levels it reads; must lie within the caller's
    collections: tuple[str, ...] = ("*",)  # glob patterns over the collections it may read ("*": all of them)
    framing: str = ""  # added to the model's system text
    heading: str | None = None  # first line of an extractive answer (None: the default heading)


BENEFITS = ("*benefit*", "*resource*", "*communit*", "gis_*", "gbim_*")
PERSONAS: dict[str, Persona] = {
    p.name: p
    for p in (
        Persona(
            "community", frozenset({"public"}), BENEFITS,
            "The reader is a community member: use plain words, lead with what to do next (where, phone, hours, "
            "what to bring) and keep it short.",
            "Here is what Living Memory has for you:",
        ),
        Persona(
            "researcher", frozenset({"public"}), ("*",),
            "The reader is a researcher: cite every claim, give the source and date of each, and say what the "
            "evidence does not show.",
            "Evidence in Living Memory (quoted, with sources):",
        ),
        Persona(
            "governance_engineer", frozenset({"public", "internal"}), ("governance*", "*playbook*", "*internal*", "code*"),
            "The reader maintains this memory's governance: name the sealed (authoritative) sources and their "
            "commits, and keep policy apart from practice.",
            "Governance evidence in Living Memory:",
        ),
        Persona(
            "caseworker", frozenset({"public", "internal"}), (*BENEFITS, "*playbook*"),
            "The reader is a caseworker helping a client: give eligibility, documents, offices and escalation "
            "steps.",
            "For the caseworker, from Living Memory:",
        ),
    )
}  # fmt: skip


class PersonaError(Exception):
    """A persona that is unknown (422) or needs more access than the caller's key gives (403)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def persona_key(name: str) -> str:
    """``Governance Engineer``, ``governance-engineer`` and ``governance_engineer`` are one persona."""
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


def personas(configured: PersonaSettings | None = None) -> dict[str, Persona]:
    """The built-in personas, overridden or extended by the ``configured`` ones (``LIVEMEM_PERSONAS``, JSON:
    ``{"name": {"access": [...], "collections": [...], "framing": "...", "heading": "..."}}``, read by the entry
    point, which builds this table once and passes it to ``resolve_persona`` and ``generate``)."""
    table = dict(PERSONAS)
    for name, spec in (configured.personas if configured is not None else {}).items():
        key = persona_key(name)
        table[key] = Persona(key, frozenset(spec.access), tuple(spec.collections), spec.framing, spec.heading)
    return table


def resolve_persona(
    name: str | None,
    role: str,
    access: frozenset[str],
    roles: dict[str, list[str]],
    table: Mapping[str, Persona] = PERSONAS,
) -> Persona:
    """The persona a request names for a caller of ``role`` (with ``access``), from ``table`` (``personas``). A role
    name is a persona too (that role's access, every collection). A persona narrows and never widens: its access
    must lie within the caller's."""
    if name is None or name == role:
        return Persona(role, access)
    key = persona_key(name)
    if name in roles:
        persona = Persona(name, frozenset(roles[name]))
    elif key in table:
        persona = table[key]
    else:
        known = ", ".join(sorted({*table, *roles}))
        raise PersonaError(422, f"role {name!r} is not a known persona; known: {known}")
    missing = sorted(persona.access - access)
    if missing:
        raise PersonaError(
            403,
            f"persona {name!r} needs access {', '.join(missing)}, which the caller's key (role {role}) does not "
            "give; a persona may only narrow the caller's access (send a key with that access)",
        )
    return persona


def persona_collections(persona: Persona, readable: list[str]) -> tuple[str, ...]:
    """The collections (of ``readable``) the persona searches; () means all of them. Patterns that match none of
    this deployment's collections fall back to all of them rather than to no evidence."""
    if persona.collections == ("*",):
        return ()
    chosen = tuple(c for c in readable if any(fnmatch(c, p) for p in persona.collections))
    return chosen if chosen else ()


# --- extractive answers -------------------------------------------------------------------------------------------
def _words(text: str) -> set[str]:
    """The words a sentence is matched on: BM25's tokens (stopwords out, Snowball stems: "amended" and
    "amendment" are one word)."""
    return set(tokens(text))


def best_sentences(content: str, message: str, n: int = 2) -> str:
    """The ``n`` sentences of a passage sharing most words with the message, in their original order, as plain
    text (``plain_lines``: no markdown emphasis, heading marks or table pipes; a list item or table row is a
    sentence of its own)."""
    lines = plain_lines(content)
    sentences = [s.strip() for line in lines for s in re.split(r"(?<=[.!?])\s+", line) if len(s.strip()) > 20]
    if not sentences:
        return " ".join(lines)[:300]
    wanted = _words(message)
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(_words(sentences[i]) & wanted), i))[:n]
    return " ".join(_ended(sentences[i]) for i in sorted(ranked))


def _ended(sentence: str) -> str:
    """A sentence quoted beside others ends with a stop (a list item or table row has none of its own)."""
    return sentence if sentence[-1] in ".!?:;)" else sentence + "."


HEDGES = {
    "light": "(Quoted from documents, not from a verified program listing: confirm the details before relying on "
    "them.)",
    "strong": "The evidence found is thin and may not answer your question; please check with 211 or the office.",
}


MIN_LINE_WORDS = 8  # the fewest words of evidence a budgeted answer keeps room for (a name and its citation)


def within_budget(lines: list[str], max_words: int | None, reserved: int = 0) -> list[str]:
    """The first lines whose words fit the answer budget less the ``reserved`` words of what the answer must say
    anyway (its heading, offers and hedge): whole items, so no citation is cut; the first line is always given,
    shortened (``shorten``) when it alone is over, and a program line that no longer fits is given shortened when
    its name and at least ``MIN_LINE_WORDS`` words fit."""
    if not max_words:
        return lines
    room = max(max_words - reserved, 0)
    kept: list[str] = []
    used = 0
    for line in lines:
        words = len(line.split())
        if used + words > room:
            named = line.find("): ")  # a program or place line: "- Name (County): ..."
            fits = named >= 0 and len(line[:named].split()) + 2 <= room - used
            if not kept or (room - used >= MIN_LINE_WORDS and fits):  # the first line always; a next program's
                kept.append(shorten(line, room - used))  # when its name fits
            break
        kept.append(line)
        used += words
    return kept


def shorten(line: str, words: int) -> str:
    """A line cut to about ``words`` words, its citations (``[3]``) kept at the end: ``- Name: the first words… [3]``."""
    refs = CITATION.findall(line)
    body = CITATION.sub("", line).split()
    marks = [f"[{n}]" for n in dict.fromkeys(refs)]
    keep = max(words - len(marks), 3)
    if len(body) <= keep:
        return line
    return " ".join(body[:keep]).rstrip(",;:") + "… " + " ".join(marks)


def extractive_answer(context: dict[str, Any], table: Mapping[str, Persona] = PERSONAS) -> str:
    """The answer without an LLM, headed by the persona's heading (of ``table``) when it has one."""
    lines: list[str] = []
    # a relationship question is answered from the graph first (livemem.answer.graph), citing the triples it rests on
    said = connection_sentences(context["route"].get("graph"))
    refs = [f["ref"] for f in context["structured_facts"] if f.get("ref") and f.get("resolved_from") == "question"]
    if said and refs:
        lines.append(f"- {' '.join(said)} {' '.join(f'[{r}]' for r in refs[:4])}")
    programs = program_lines(context)
    if programs and not said and (lead := yes_no_lead(context)):  # "Is there a WIC clinic in Beckley?": yes first
        programs[0] = f"- {lead}{programs[0].removeprefix('- ')}"
    lines += programs
    # passages: two beside programs; three when they are the whole answer (a governance or general question)
    for item in [p for p in context["unstructured"] if p.get("ref")][: 2 if programs else 3]:
        lines.append(f"- {best_sentences(item['content'], context['message'])} [{item['ref']}]")
    for item in [w for w in context["web"] if w.get("ref")][:2]:
        lines.append(f"- Web ({item['source']}, not authoritative): {item['title']}: {item['snippet']} [{item['ref']}]")
    if not lines:
        return CLARIFY_TEXT
    route = context["route"]
    offers = [offer["text"] for offer in route.get("negotiation") or []]
    hedge = HEDGES.get((route.get("budget") or {}).get("hedging", "none"))
    heading = table.get(persona_key(context["route"].get("persona") or ""))
    lang = answer_language(context)
    head = (
        heading.heading if heading is not None and heading.heading
        else home_heading(context["route"], lang) if context["route"]["wv_scoped"]
        else (f"Según {home_of(context['route'].get('home')).name}:" if lang == "es"
              else f"From {home_of(context['route'].get('home')).name}:")  # the deployment's name (Living Memory)
    )  # fmt: skip
    # The direct answer first: what is not here (the offers), then the evidence. The budget holds for the whole
    # answer: what it must say (offers, hedge) is counted first, and a tight budget drops the heading before a line.
    max_words = (route.get("budget") or {}).get("max_words")
    reserved = sum(len(text.split()) for text in [*offers, *([hedge] if hedge else [])])
    if max_words and reserved + len(head.split()) + MIN_LINE_WORDS > max_words:
        head = ""
    lines = within_budget(lines, max_words, reserved + len(head.split()))
    body = [*offers, *lines, *([hedge] if hedge else [])]
    return "\n".join([*([head] if head else []), *(tidy(line) for line in body)])


MAX_PROGRAMS = 5  # registry programs and places an extractive answer lists
# Yes/no questions a program list answers: "is there / are there / does Oak Hill have / ¿hay ...?" (one of the need
# is listed there: yes) and "is the SNAP office in Beckley open on Saturday?" (its parsed hours say).
EXISTS_QUESTION = re.compile(
    r"^\s*(?:(?:is|are) there|is anywhere|(?:does|do)\s+\S.{0,60}?\s+have|can i (?:get|find))\b", re.I
)
EXISTS_QUESTION_ES = re.compile(
    r"^\s*¿?\s*(?:hay|existe|(?:tiene|tienen)\s+\S.{0,60}?|(?:puedo|se puede)\s+(?:conseguir|obtener|encontrar|recibir))\b",
    re.I,
)
OPEN_ASKED = re.compile(r"^\s*¿?\s*(?:is|are|est[aá]n?)\b.*\b(?:open|abiert[oa]s?)\b", re.I)


def answer_language(context: dict[str, Any]) -> str:
    """The language the answer's own words are in: ``es`` for a Spanish message, else ``en`` (the message's words,
    counted as the crisis detector counts them: ``crisis.language``)."""
    return crisis.language(str(context.get("message") or ""))


def asked_phrase(item: dict[str, Any], lang: str = "en") -> str:
    """The time a program was asked for, as a line says it: "on Saturday", "now" ("open now": not "Open open now");
    in Spanish "el sábado", "ahora" (``hours.when_words``)."""
    return when_words(item.get("asked_time"), lang)


def hours_note(item: dict[str, Any], lang: str = "en") -> str:
    """A program line's note on the asked time: " (Open now.)", " (Not open on Saturday by its listed hours.)"; in
    Spanish " (Atiende ahora.)", " (No atiende el sábado según su horario publicado.)"; "" when none was asked or
    its hours say nothing either way."""
    if item.get("open_when_asked") is None:
        return ""
    when = asked_phrase(item, lang)
    if lang == "es":
        return f" (Atiende {when}.)" if item["open_when_asked"] else f" (No atiende {when} según su horario publicado.)"
    return f" (Open {when}.)" if item["open_when_asked"] else f" (Not open {when} by its listed hours.)"


def yes_no_lead(context: dict[str, Any]) -> str:
    """What a yes/no question's answer starts with when the program list answers it ("Yes: ", "No, not open on
    Saturday by its listed hours: "); "" for any other question, or when the first program listed is not one of
    the need asked for (or nothing is listed where asked: the offers say no first)."""
    route, message = context["route"], str(context.get("message") or "")
    if route.get("negotiation") or not (route.get("programs") or []):
        return ""
    rows = {r["local_resource_id"]: r for r in context["registry"] if r.get("ref")}
    places = {e["entity_id"] for e in context["spatial"] if e.get("ref")}
    first = next(
        (i for i in route["programs"] if (i["kind"] == "registry" and i["id"] in rows) or
         (i["kind"] == "place" and i["id"] in places)),
        None,
    )  # fmt: skip
    if first is None:
        return ""
    lang = answer_language(context)
    if OPEN_ASKED.match(message) and first.get("open_when_asked") is not None:
        when = asked_phrase(first, lang)
        if lang == "es":  # "¿Está abierta la clínica ...?": the asker's own word, "abierta"
            word = "abierta" if re.search(r"\babierta\b", message, re.I) else "abierto"
            return (f"Sí, está {word} {when}: " if first["open_when_asked"]
                    else f"No, no está {word} {when} según su horario publicado: ")  # fmt: skip
        return f"Yes, open {when}: " if first["open_when_asked"] else f"No, not open {when} by its listed hours: "
    needs = set(route.get("resource_types") or (route.get("filters") or {}).get("resource_type") or [])
    if first["kind"] == "place":  # a map place of the need ("Are there any food pantries in Raleigh County?")
        from livemem.answer.evidence import place_matches_need  # evidence is the heavier module: imported late

        place = next(e for e in context["spatial"] if e["entity_id"] == first["id"])
        if not needs or not any(place_matches_need(place, need) for need in needs):
            return ""
    elif needs and rows[first["id"]].get("resource_type") not in needs:
        return ""
    if EXISTS_QUESTION.match(message):
        return "Yes: "
    return "Sí: " if EXISTS_QUESTION_ES.match(message) else ""


def program_lines(context: dict[str, Any]) -> list[str]:
    """The registry programs and places in evidence, in the order ``route.programs`` ranks them (need, town, ZIP,
    distance): a place that is a listed registry program (``same_as``) is not given again, and a disagreement
    between them is said on the program's line (the registry's contact facts are the ones given)."""
    rows = {r["local_resource_id"]: r for r in context["registry"] if r.get("ref")}
    places = {e["entity_id"]: e for e in context["spatial"] if e.get("ref")}
    order = context["route"].get("programs") or [
        *({"kind": "registry", "id": i} for i in rows),
        *({"kind": "place", "id": i} for i in places),
    ]
    lang = answer_language(context)
    es = lang == "es"  # a Spanish question: the line's own words in Spanish (the registry's text as it is written)
    lines: list[str] = []
    for item in order:
        if len(lines) >= MAX_PROGRAMS:
            break
        if item["kind"] == "registry" and (row := rows.get(item["id"])):
            phone = f"{'teléfono' if es else 'phone'} {display_phone(row['contact_phone'])}"
            details = "; ".join(
                p for p in (row.get("address"), phone if row.get("contact_phone") else None,
                            f"{'horario' if es else 'hours'} {hours_text(row['hours'], lang)}" if row.get("hours")
                            else None) if p
            )  # fmt: skip
            note = conflict_note(row.get("conflicts") or [], lang) + hours_note(item, lang)
            if item.get("eligible") is False and row.get("eligibility"):
                eligibility = str(row["eligibility"]).rstrip(".")
                note += (f" (Requisitos: {eligibility}; puede que no atienda donde usted preguntó.)" if es
                         else f" (Eligibility: {eligibility}; it may not serve where you asked.)")  # fmt: skip
            marked = f"; {verification_words(row['verification_note'], lang)}" if row.get("verification_note") else ""
            county = f"condado de {row['county']}" if es else f"{row['county']} County"
            lines.append(
                f"- {program_name(row)} ({county}{marked}): {row.get('description') or ''} "
                f"{details}{note} [{row['ref']}]"
            )
        elif item["kind"] == "place" and (place := places.get(item["id"])):
            if place.get("same_as") in rows:
                continue
            where = ", ".join(str(v) for v in (place.get("address"), place.get("town")) if v)
            lines.append(f"- {place['label']}{f' ({where})' if where else ''}: {place['description']} [{place['ref']}]")
    return lines


def program_name(row: dict[str, Any]) -> str:
    """A registry program as an answer names it: "Florida DCF ACCESS — HIALEAH office" when the row's name is a
    site of its organization (the organization not already in the name), else the name."""
    org = (row.get("organization") or "").strip()
    if not org or org.casefold() in row["name"].casefold():
        return row["name"]
    return f"{org} — {row['name']}"


def conflict_note(conflicts: list[dict[str, Any]], lang: str = "en") -> str:
    """' (a map place gives 1000 Stanaford Road and phone 555-0108; the registry's verified details are given)';
    in Spanish (``lang="es"``) in Spanish words."""
    if not conflicts:
        return ""
    es = lang == "es"
    said = (" y " if es else " and ").join(
        f"{'el teléfono' if es else 'phone'} {display_phone(c['other'])}" if c["field"] == "phone" else str(c["other"])
        for c in conflicts
    )
    place = all(c["source"].startswith("place") for c in conflicts)
    if es:
        who = "un lugar del mapa" if place else "otra fuente"
        return f" (Nota: {who} da {said}; aquí se dan los datos verificados del registro.)"
    who = "a map place" if place else "another source"
    return f" (Note: {who} gives {said}; the registry's verified details are given here.)"


def verification_words(note: str, lang: str = "en") -> str:
    """A row's verification note (``registry.resolver.verification_note``) in the answer's language: "listed
    2019-08-19, not verified since" → "publicado el 2019-08-19, sin verificar desde entonces" in Spanish."""
    if lang != "es":
        return note
    if m := re.fullmatch(r"listed (\S+), not verified since", note):
        return f"publicado el {m.group(1)}, sin verificar desde entonces"
    if note.startswith("not verified"):
        return "sin verificar (la fuente no da fecha de verificación)"
    return note


def home_heading(route: dict[str, Any], lang: str = "en") -> str:
    """The heading of a home-scoped extractive answer: "From the West Virginia evidence in Living Memory:"; to a
    Spanish question "Según la información de West Virginia en Living Memory:"."""
    home = home_of(route.get("home"))
    if lang == "es":
        return f"Según la información de {home.state_names} en {home.name}:"
    return f"From the {home.state_names} evidence in {home.name}:"


def canned_answer(context: dict[str, Any]) -> str | None:
    """The fixed reply of a message that is not answered from evidence (None: it is)."""
    route = context["route"]
    home = home_of(route.get("home"))  # the version's home (livemem.geo.home): West Virginia when none is named
    if route["intents"] == ["greeting"]:
        return GREETING_REPLY if home.states == ("WV",) else GREETING_REPLY.replace("West Virginia", home.state_names)
    found = route.get("crisis")  # a crisis: its lines come first (``guard``), then what the evidence alone gives
    shown = found["evidence_class"] if found else route["response_class"]
    if found and shown in ("answer", "negotiate"):
        return None
    if shown == "redirect":
        elsewhere = [p for p in route.get("places") or [] if p.get("state") and not home.covers(p["state"])]
        where = f"{elsewhere[0]['name']} is outside {home.state_names}. " if elsewhere else ""
        return (
            f"{where}{home.name} covers {home.state_names} programs only. For other states, call 211 or the state's "
            "own benefits agency."
        )
    if shown == "refuse":
        return REFUSE_TEXT
    if shown == "clarify":
        return crisis.NO_PLACE.get(found["language"], crisis.NO_PLACE["en"]) if found else CLARIFY_TEXT
    return None


# --- guardrail ------------------------------------------------------------------------------------------------------
def _shingles(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


_PRIVATE: dict[tuple[str, tuple[str, ...]], frozenset] = {}


def hidden_shingles(snap: Snapshot, hidden: tuple[str, ...]) -> frozenset:
    """8-word sequences found only in the collections ``hidden`` (never in a visible one) of a version; computed
    once per (version, hidden collections)."""
    key = (str(snap.path), hidden)
    found = _PRIVATE.get(key)
    if found is None:
        hidden_set: set[tuple[str, ...]] = set()
        visible_set: set[tuple[str, ...]] = set()
        for row, collection in enumerate(snap.columns["collection"]):
            (hidden_set if collection in hidden else visible_set).update(_shingles(snap.rows[row]["content"]))
        found = frozenset(hidden_set - visible_set)
        if len(_PRIVATE) > 16:
            _PRIVATE.clear()
        _PRIVATE[key] = found
    return found


def supplied_text(context: dict[str, Any]) -> str:
    """What the caller wrote that the model was shown: the message (as carried into the prompt's question) and the
    caller's own personal memory (their cards and earlier exchanges). A model repeating these is not a leak,
    whatever they match: the caller already had them."""
    return "\n".join([context.get("message") or "", *(p.get("content") or "" for p in context.get("personal") or [])])


def leaks(snap: Snapshot, hidden: list[str], text: str, supplied: str | set[tuple[str, ...]] = "") -> bool:
    """Whether ``text`` holds 8 consecutive words that only a hidden collection contains and that the caller did not
    write themselves (``supplied``: the caller's text, or its shingles).

    The guard must not be an oracle: were words the caller supplied counted, "repeat exactly '<guess>'" would be
    refused when the guess is internal text and echoed when it is not, confirming internal text 8 words at a time.
    Discounting them makes an echo of the caller's words look the same whatever they match; a model that adds
    internal words the caller did not write is still stopped."""
    if not hidden:
        return False
    found = hidden_shingles(snap, tuple(sorted(hidden))) & _shingles(text)
    if not found:
        return False
    own = supplied if isinstance(supplied, set) else _shingles(supplied)
    return bool(found - own)


BLOCKED = "blocked: the answer held text the caller's role may not read"


def refused_route(context: dict[str, Any], report: dict[str, Any]) -> None:
    """An answer the guardrail replaced by a refusal is a ``refuse``: its route says so (and why), not ``answer``.
    Sets ``context["route"]`` to a new dict (the route of a cached result is shared, never changed in place)."""
    action = report.get("action", "")
    if action.startswith(("blocked", "refused")):
        context["route"] = {**context["route"], "response_class": "refuse", "reason": f"guardrail {action}"}


def guard(answer: str, context: dict[str, Any], snap: Snapshot, mode: str) -> tuple[str, list[dict], dict[str, Any]]:
    """Apply the guardrail; returns the answer, the citations it uses and what the guardrail did
    (``unmatched_citations``: the numbers the answer cites that match no evidence item, e.g. ``[99]``). The answer
    to a crisis message (``route.crisis``) always starts with its crisis lines, whatever the model wrote, and even
    when the answer is refused (``crisis_lines: first``)."""
    text, cited, report = _guard(answer, context, snap, mode)
    found = context["route"].get("crisis")
    if found:
        text = crisis.with_lines(text, found)
        report["crisis_lines"] = "first"
    return text, cited, report


def _guard(answer: str, context: dict[str, Any], snap: Snapshot, mode: str) -> tuple[str, list[dict], dict[str, Any]]:
    by_n = {c["n"]: c for c in context["citations"]}
    numbers = list(dict.fromkeys(int(m) for m in CITATION.findall(answer)))
    cited = [by_n[n] for n in numbers if n in by_n]
    unmatched = [n for n in numbers if n not in by_n]
    hidden = context.get("hidden_collections", [])
    report: dict[str, Any] = {"mode": mode, "action": "none", "cited": len(cited), "unmatched_citations": unmatched}
    if leaks(snap, hidden, answer, supplied_text(context)) or any(c.get("collection") in hidden for c in cited):
        report["action"] = BLOCKED
        return REFUSE_TEXT, [], report
    route = context["route"]
    shown = (route.get("crisis") or {}).get("evidence_class") or route["response_class"]  # a crisis: its evidence's
    evidence_answer = shown in ("answer", "negotiate") and route["intents"] != ["greeting"]
    if evidence_answer and not cited and mode != "off":
        why = "the answer cites no evidence"
        if unmatched:
            why += f" (its citation{'s' if len(unmatched) > 1 else ''} {' '.join(f'[{n}]' for n in unmatched)} "
            why += f"match{'' if len(unmatched) > 1 else 'es'} no evidence item)"
        if mode == "refuse":
            report["action"] = f"refused: {why}"
            return UNGROUNDED_TEXT, [], report
        report["action"] = f"annotated: {why}"
        return answer + (UNGROUNDED_NOTE if not unmatched else unmatched_note(unmatched)), [], report
    return answer, cited, report


def unmatched_note(unmatched: list[int]) -> str:
    refs = " ".join(f"[{n}]" for n in unmatched)
    return (
        f"\n\n(Note: this answer cites no Living Memory evidence: {refs} "
        f"match{'' if len(unmatched) > 1 else 'es'} none of it; check it before relying on it.)"
    )


def generate(
    context: dict[str, Any],
    snap: Snapshot,
    settings: ContextSettings,
    backend: OpenAICompatibleBackend | None,
    options: dict[str, Any] | None = None,
    failure: str | None = None,
    dialogue: Dialogue | None = None,
    persona_table: Mapping[str, Persona] = PERSONAS,
) -> dict[str, Any]:
    """The answer to the message of ``context`` with its citations, backend, fallback, guardrail report and
    ``finish_reason``. ``options``: the caller's sampling fields (``SAMPLING``), given to an LLM backend;
    ``max_tokens`` also cuts a fixed or extractive answer (``finish_reason: length``). ``failure``: the backend
    already failed (a stream that never started): answer extractively, saying why. ``dialogue``: the client's
    instructions and earlier turns, given to an LLM backend (an extractive answer cannot use them).
    ``persona_table``: the deployment's personas (``personas``), whose headings head an extractive answer."""
    fixed = canned_answer(context)
    fallback = None
    finish = "stop"
    if fixed is not None:
        text, used, model = fixed, "fixed", "none"
    elif failure is not None:
        fallback = failure
        text = FALLBACK_NOTE.format(reason=fallback) + "\n" + extractive_answer(context, persona_table)
        used, model = "extractive", "extractive"
    elif backend is not None:
        try:
            text, finish = backend.complete_with_reason(
                context["prompt"]["system"], context["prompt"]["context"], options, dialogue
            )
            used, model = "llm", backend.model
        except BackendError as exc:
            log.warning("LLM backend failed, answering extractively: %s", exc)
            fallback = str(exc)
            text = FALLBACK_NOTE.format(reason=fallback) + "\n" + extractive_answer(context, persona_table)
            used, model = "extractive", "extractive"
    else:
        text, used, model = extractive_answer(context, persona_table), "extractive", "extractive"
    text, cited, report = guard(
        text, with_supplied(context, dialogue if used == "llm" else None), snap, settings.guardrail
    )
    refused_route(context, report)
    max_tokens = (options or {}).get("max_tokens")
    if used != "llm" and max_tokens and count_tokens(text) > max_tokens:
        text, finish = cut_tokens(text, max_tokens), "length"
        cited = [c for c in cited if f"[{c['n']}]" in text]
    return {
        "answer": text,
        "citations": cited,
        "backend": used,
        "model": model,
        "fallback": fallback,
        "note": EXTRACTIVE_NOTE if used == "extractive" else None,
        "guardrail": report,
        "finish_reason": finish,
    }


# --- tokens and streaming --------------------------------------------------------------------------------------------
TOKEN = re.compile(r"\S+\s*")


def count_tokens(text: str) -> int:
    """Whitespace-separated words: what ``usage`` and ``max_tokens`` count (no tokenizer of the answering model
    is at hand for extractive answers; documented in docs/openai.md)."""
    return len(text.split())


def cut_tokens(text: str, limit: int) -> str:
    return "".join(TOKEN.findall(text)[:limit]).rstrip()


def pieces(text: str, words: int = 8) -> Iterator[str]:
    """``text`` in stream-sized pieces: each ends at a line or sentence end, or after ``words`` words; joined they
    give ``text`` back exactly."""
    head = text[: len(text) - len(text.lstrip())]
    piece, count = head, 0
    for token in TOKEN.findall(text):
        piece += token
        count += 1
        if count >= words or "\n" in token or re.search(r"[.!?:]\s+$", token):
            yield piece
            piece, count = "", 0
    if piece:
        yield piece


def stream_answer(
    context: dict[str, Any],
    snap: Snapshot,
    settings: ContextSettings,
    backend: OpenAICompatibleBackend | None,
    options: dict[str, Any] | None = None,
    dialogue: Dialogue | None = None,
    persona_table: Mapping[str, Persona] = PERSONAS,
) -> Iterator[dict[str, Any]]:
    """The answer as ``{"delta": text, "model": who answers}`` items, then ``{"answer": <generate()'s dict>}``.

    With an LLM backend (and a guardrail other than ``refuse``, which must see the whole answer first), its tokens
    are forwarded as they come; before a piece is released, the text so far is checked for 8 words only a hidden
    collection holds, so a leak stops the stream (``finish_reason: content_filter``) before it is complete. Any
    other answer is generated whole, then sent in ``pieces``. A backend failing after its first token ends the
    answer with ``finish_reason: error`` and ``fallback`` naming why (the text so far is incomplete)."""
    live = backend is not None and canned_answer(context) is None and settings.guardrail != "refuse"
    found = context["route"].get("crisis")
    first = crisis.crisis_text(found) + "\n\n" if found else ""  # a crisis: its lines before any model token
    if live and backend is not None:  # (live implies a backend)
        failure = yield from _stream_live(context, snap, settings, backend, options, dialogue, first, found)
        if failure is None:
            return
        answer = generate(context, snap, settings, None, options, failure=failure, persona_table=persona_table)
    else:
        answer = generate(context, snap, settings, backend, options, dialogue=dialogue, persona_table=persona_table)
    model = "fixed" if answer["backend"] == "fixed" else answer["model"]
    rest = answer["answer"]
    if live and first and rest.startswith(first):  # the lines already went out, before the backend failed
        rest = rest[len(first) :]
    for piece in pieces(rest):
        yield {"delta": piece, "model": model}
    yield {"answer": answer}


def _stream_live(
    context: dict[str, Any],
    snap: Snapshot,
    settings: ContextSettings,
    backend: OpenAICompatibleBackend,
    options: dict[str, Any] | None,
    dialogue: Dialogue | None,
    first: str,
    found: dict[str, Any] | None,
) -> Generator[dict[str, Any], None, str | None]:
    """``stream_answer``'s items from the LLM backend's tokens as they come (``first``: crisis lines sent ahead),
    a leak stopping the stream; None when the answer went out whole, else why the backend failed before it."""
    hidden = context.get("hidden_collections", [])
    own = _shingles(supplied_text(with_supplied(context, dialogue)))
    sent, finish = first, "stop"
    if first:
        yield {"delta": first, "model": backend.model}
    try:
        for item in backend.stream(context["prompt"]["system"], context["prompt"]["context"], options, dialogue):
            if "finish_reason" in item:
                finish = item["finish_reason"]
                break
            if leaks(snap, hidden, sent + item["delta"], own):
                yield from _refuse_leak(context, settings, sent, found, backend.model)
                return None
            sent += item["delta"]
            yield {"delta": item["delta"], "model": backend.model}
    except BackendError as exc:
        log.warning("LLM backend failed before streaming, answering extractively: %s", exc)
        return str(exc)
    error = finish.removeprefix("error: ") if finish.startswith("error: ") else None
    text, cited, report = guard(sent, with_supplied(context, dialogue), snap, settings.guardrail)
    refused_route(context, report)
    if error is None and text.startswith(sent) and text != sent:
        yield {"delta": text[len(sent) :], "model": backend.model}  # the annotation, after the rest
    yield {"answer": {"answer": text, "citations": cited, "backend": "llm", "model": backend.model,
                      "fallback": error, "note": None, "guardrail": report,
                      "finish_reason": "error" if error else finish}}  # fmt: skip
    return None


def _refuse_leak(
    context: dict[str, Any], settings: ContextSettings, sent: str, found: dict[str, Any] | None, model: str
) -> Iterator[dict[str, Any]]:
    """The refusal that ends a stream whose next piece would leak a hidden collection: its delta, then the answer
    (``finish_reason: content_filter``)."""
    yield {"delta": "\n\n" + REFUSE_TEXT, "model": model}
    numbers = list(dict.fromkeys(int(m) for m in CITATION.findall(sent)))
    known = {c["n"] for c in context["citations"]}
    report = {"mode": settings.guardrail, "action": BLOCKED, "cited": 0,
              "unmatched_citations": [n for n in numbers if n not in known]}  # fmt: skip
    refused_route(context, report)
    refused = crisis.with_lines(REFUSE_TEXT, found)
    yield {"answer": {"answer": refused, "citations": [], "backend": "llm", "model": model,
                      "fallback": None, "note": None, "guardrail": report,
                      "finish_reason": "content_filter"}}  # fmt: skip
