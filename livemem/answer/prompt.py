"""The prompt from an evidence set: evidence lines and citations, the grounding rules, the response budget
(answer length, hedging) and the canned replies: what the ``prompt`` step of ``livemem.answer.steps`` calls.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import zip_longest
from typing import Any

import phonenumbers
from markdown_it import MarkdownIt

from livemem.answer.routing import (
    ContextRequest,
)
from livemem.settings import ContextSettings

# --- display: phones and plain text ----------------------------------------------------------------------------------
# E.164 as verification publishes registry numbers (``+13045550104;ext=2``), or its RFC 3966 ``tel:`` form.
E164 = re.compile(r"(?:tel:)?\+1[\d-]{10,14}(?:;ext=\d{1,6})?")


def display_phone(phone: str) -> str:
    """A stored number as people write it: ``+13045550104;ext=2`` -> ``(304) 555-0104 ext. 2`` (US numbers in
    national form, others in international form; text that is no possible number is given back unchanged). The
    data keeps E.164; only what an answer shows is formatted."""
    try:
        number = phonenumbers.parse(phone, "US")
    except phonenumbers.NumberParseException:
        return phone
    if not phonenumbers.is_possible_number(number):
        return phone
    form = (
        phonenumbers.PhoneNumberFormat.NATIONAL
        if number.country_code == 1
        else phonenumbers.PhoneNumberFormat.INTERNATIONAL
    )
    return phonenumbers.format_number(number, form)


def human_phones(text: str) -> str:
    """``text`` with every E.164 number in it written as ``display_phone`` writes it."""
    return E164.sub(lambda m: display_phone(m.group(0)), text)


_MD = MarkdownIt("commonmark").enable("table")
TABLE_RULE = re.compile(r"^[\s|:\-]+$")
DEBRIS = re.compile(r"\*\*+|__+|(?<!\w)[*_](?=\s|$)|`+|^\s*#{1,6}\s+|^\s*>\s?")


def tidy(text: str) -> str:
    """One line without markdown debris (``**``, ``__``, stray ``*``, backticks, heading and quote marks) and with
    human phone numbers, its spaces collapsed."""
    return " ".join(human_phones(DEBRIS.sub("", text)).split())


def _inline(token: Any) -> str:
    parts = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif child.type == "image":
            parts.append(child.content)
    return "".join(parts)


def _loose_lines(text: str) -> list[str]:
    """A paragraph as one line, except table rows that lost their header (a chunk cut mid-table): each is a line
    ``cell; cell``, and rule rows go."""
    out: list[str] = []
    words: list[str] = []
    for line in text.split("\n"):
        row = line.strip()
        if not (row.startswith("|") or row.endswith("|")):
            words.append(line)
            continue
        if words:
            out.append(" ".join(words))
            words = []
        if not (TABLE_RULE.fullmatch(row) and "-" in row):
            out.append("; ".join(c.strip() for c in row.strip("|").split("|") if c.strip()))
    if words:
        out.append(" ".join(words))
    return out


def plain_lines(markdown: str, headings: bool = False) -> list[str]:
    """Markdown as plain text lines, one a block (paragraph, list item, table row), for quoting in an answer:
    emphasis, code marks, link syntax, heading and quote marks gone (their text kept), a table row as
    ``Header: cell; Header: cell``, leftover ``**`` removed, phones in human form. Headings only when asked.
    Kept for the passages most recently quoted (a parse is ≈0.9 ms for a 2,000-character chunk)."""
    return list(_plain_lines(markdown, headings))


@lru_cache(maxsize=1024)
def _plain_lines(markdown: str, headings: bool) -> tuple[str, ...]:
    lines: list[str] = []
    header: list[str] = []
    row: list[str] = []
    in_head = in_cell = in_heading = False
    for token in _MD.parse(markdown):
        kind = token.type
        if kind in ("thead_open", "thead_close"):
            in_head = kind == "thead_open"
        elif kind in ("th_open", "td_open", "th_close", "td_close"):
            in_cell = kind.endswith("_open")
        elif kind in ("heading_open", "heading_close"):
            in_heading = kind == "heading_open"
        elif kind == "tr_open":
            row = []
        elif kind == "tr_close":
            if in_head:
                header = row
            else:
                cells = [f"{h}: {c}" if h and c else c for h, c in zip_longest(header, row, fillvalue="") if c]
                lines.append("; ".join(cells))
        elif kind == "inline":
            text = _inline(token)
            if in_cell:
                row.append(tidy(text))
            elif not in_heading:
                lines.extend(_loose_lines(text))
            elif headings:
                lines.append(text)
        elif kind in ("fence", "code_block"):
            lines.extend(token.content.splitlines())
    return tuple(t for t in (tidy(line) for line in lines) if t)


# --- 5. prompt assembly ------------------------------------------------------------------------------------------------
GROUNDING_WV = (
    "This question is about West Virginia. The West Virginia evidence below (text passages, GBIM facts, mapped "
    "places and verified registry programs) is mandatory and authoritative: answer only from it, prefer verified "
    "registry rows for referrals, and do not use web results or outside knowledge. If the evidence does not "
    "answer the question, say so and suggest calling the listed office."
)
GROUNDING_OPEN = (
    "Answer from the evidence below. Local evidence (text passages, GBIM facts, places, registry programs) is "
    "authoritative; web results, when present, are secondary and must be named as such. If the evidence does not "
    "answer the question, say so."
)
SYSTEM_TEXT = (
    "You are Living Memory, a careful assistant for benefits and community resources. Cite every statement with "
    "the bracketed number of the evidence it rests on, e.g. [2]. Never invent phone numbers, addresses or rules."
)
SECTION_TITLES = {
    "unstructured": "Text passages",
    "structured_facts": "Structured facts (GBIM relations)",
    "spatial": "Places (GBIM entities)",
    "registry": "Verified programs (local_resources registry)",
    "personal": "The person's own memory (what they told Living Memory; not authoritative)",
    "web": "Web results (not authoritative)",
}
SECTIONS = tuple(SECTION_TITLES)


def evidence_line(section: str, item: dict[str, Any], max_chars: int) -> str:
    if section == "unstructured":
        where = (
            f"{item['collection']} · {item['provenance']['path']}{page_of(item)} @ {item['provenance']['commit'][:8]}"
        )
        heading = " > ".join(item["heading_path"])
        seal = " · SEALED" if item["seal_state"] == "SEALED" else ""
        text = " ".join(item["content"].split())
        if len(text) > max_chars:
            text = text[: max_chars - 1].rstrip() + "…"
        return f"({where}{seal}) {heading}\n{text}"
    if section == "structured_facts":
        target = item.get("object_label") or item["object"]  # a near fact names the other entity, not its id
        return f"{item['subject_label']} {item['predicate']} {target} ({item['object_kind']})"
    if section == "spatial":
        where = ", ".join(str(v) for v in (item.get("address"), item.get("town"), item.get("zip")) if v)
        return (
            f"{item['label']} ({item['gbim_entity']}, {item['county']} County; {where}; lat {item['lat']:.4f}, "
            f"lon {item['lon']:.4f}): {item['description']}"
            if item.get("lat") is not None
            else f"{item['label']} ({item['gbim_entity']}, {item['county']} County): {item['description']}"
        )
    if section == "registry":
        org = item.get("organization")
        name = f"{org} — {item['name']}" if org and org.casefold() not in item["name"].casefold() else item["name"]
        status = item["verification_status"] + (
            f": {item['verification_note']}" if item.get("verification_note") else ""
        )
        parts = [
            f"{name} [{item['local_resource_id']}; {item['resource_type']}; {item['county']} County; {status}]",
            item.get("description"),
            item.get("address"),
            f"phone {display_phone(item['contact_phone'])}" if item.get("contact_phone") else None,
            f"hours {item['hours']}" if item.get("hours") else None,
            f"eligibility {item['eligibility']}" if item.get("eligibility") else None,
            item.get("url"),
        ]
        return " · ".join(p for p in parts if p)
    if section == "personal":
        text = " ".join(item["content"].split())[:max_chars]
        return f"(your memory · {item['kind']} · {item['created_at'][:10]}) {text}"
    return f"{item['title']} ({item['url']}, {item.get('published_at') or 'undated'}): {item['snippet']}"


def page_of(item: dict[str, Any]) -> str:
    """ " page 3" / " pages 3-4" of a PDF passage ("" for any other)."""
    if not item.get("page"):
        return ""
    return f" pages {item['page']}-{item['page_end']}" if item.get("page_end") else f" page {item['page']}"


def citation_for(section: str, item: dict[str, Any]) -> dict[str, Any]:
    if section == "unstructured":
        pages = {k: item[k] for k in ("page", "page_end") if item.get(k)}
        return {"kind": "chunk", "id": item["chunk_id"], "collection": item["collection"],
                "provenance": item["provenance"], **pages}  # fmt: skip
    if section == "structured_facts":
        return {"kind": "fact", "id": item["subject"], "predicate": item["predicate"], "object": item["object"],
                "provenance": item["provenance"]}  # fmt: skip
    if section == "spatial":
        return {"kind": "entity", "id": item["entity_id"], "label": item["label"], "provenance": item["provenance"]}
    if section == "registry":
        return {"kind": "registry", "id": item["local_resource_id"], "name": item["name"],
                "verification_status": item["verification_status"]}  # fmt: skip
    if section == "personal":
        return {"kind": "memory", "id": item["memory_id"], "created_at": item["created_at"], "memory": item["kind"]}
    return {"kind": "web", "id": item["url"], "title": item["title"], "source": item["source"]}


def assemble_prompt(
    message: str,
    sections: dict[str, list[dict[str, Any]]],
    wv_scoped: bool,
    settings: ContextSettings,
    extra_system: list[str] | None = None,
    home_names: str = "West Virginia",
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """System text with the grounding instruction, then the labelled context block, within the size budget.

    Items are admitted by priority (WV-scoped: registry, places, facts, passages; otherwise passages first);
    passages are cut to ``max_passage_chars``; an item that does not fit is left out (``ref`` stays None).
    Citation numbers follow the order of the context block.
    """
    grounding = GROUNDING_WV.replace("West Virginia", home_names) if wv_scoped else GROUNDING_OPEN  # the home
    system = "\n".join([SYSTEM_TEXT, grounding, *(extra_system or [])])
    question = f"\n\nQuestion: {message}"
    budget = settings.prompt_budget_chars - len(system) - len(question) - 40
    order = (
        ("registry", "spatial", "structured_facts", "unstructured", "personal", "web")
        if wv_scoped
        else ("unstructured", "personal", "registry", "spatial", "structured_facts", "web")
    )
    used = sum(len(SECTION_TITLES[s]) + 6 for s in SECTIONS if sections.get(s))
    lines, dropped = _admit_lines(sections, order, budget, used, settings.max_passage_chars)
    blocks, citations = _render_blocks(sections, lines)
    context = "Context:\n" + ("\n\n".join(blocks) if blocks else "(no evidence)") + question
    text = f"{system}\n\n{context}"
    prompt = {
        "system": system,
        "context": context,
        "text": text,
        "chars": len(text),
        "budget_chars": settings.prompt_budget_chars,
        "items_included": len(citations),
        "items_left_out": dropped,
    }
    return prompt, citations


def _admit_lines(
    sections: dict[str, list[dict[str, Any]]], order: tuple[str, ...], budget: int, used: int, max_passage_chars: int
) -> tuple[dict[tuple[str, int], str], int]:
    """The evidence lines that fit the budget (``used`` already spent), keyed by (section, position), taken
    round-robin in the priority ``order``, and how many items were left out."""
    lines: dict[tuple[str, int], str] = {}
    dropped = 0
    # Round-robin over the priority order so one long section cannot crowd the others out entirely.
    queues = {s: list(enumerate(sections.get(s, []))) for s in order}
    while any(queues.values()):
        for section in order:
            if not queues[section]:
                continue
            i, item = queues[section].pop(0)
            line = evidence_line(section, item, max_passage_chars)
            cost = len(line) + 8
            if used + cost > budget and section == "unstructured" and budget - used > 300:
                line = evidence_line(section, item, budget - used - 120)
                cost = len(line) + 8
            if used + cost > budget:
                dropped += 1
                continue
            lines[(section, i)] = line
            used += cost
    return lines, dropped


def _render_blocks(
    sections: dict[str, list[dict[str, Any]]], lines: dict[tuple[str, int], str]
) -> tuple[list[str], list[dict[str, Any]]]:
    """The context block's sections in ``SECTIONS`` order with their admitted lines numbered, and the citations;
    each item's ``ref`` is set to its number (None when it was left out)."""
    citations: list[dict[str, Any]] = []
    blocks: list[str] = []
    for section in SECTIONS:
        items = sections.get(section, [])
        rendered = []
        for i, item in enumerate(items):
            line = lines.get((section, i))
            if line is None:
                item["ref"] = None
                continue
            n = len(citations) + 1
            item["ref"] = n
            citations.append({"n": n, "section": section, **citation_for(section, item)})
            rendered.append(f"[{n}] {line}")
        if rendered:
            blocks.append(f"## {SECTION_TITLES[section]}\n" + "\n".join(rendered))
    return blocks, citations


# --- response budgets ---------------------------------------------------------------------------------------------
PERSONA_ANSWER_WORDS = {"community": 120, "caseworker": 250, "governance_engineer": 250, "researcher": 350}
HEDGING_TEXT = {
    "none": "The evidence is verified or authoritative: state it plainly, without hedging.",
    "light": "The evidence is documents and places, not verified program listings: say the person should confirm "
    "details (hours, eligibility) with the office.",
    "strong": "The evidence is thin (weak matches or web results only): say plainly that it may not answer the "
    "question and do not guess.",
}
NEGOTIATE_TEXT = (
    "The evidence answers only part of the request: say what is missing, offer the listed alternatives and ask "
    "which the person prefers."
)
STRONG_BELOW = 0.35  # best passage cosine under this, with no verified program or place: the evidence is thin


def response_budget(
    response_class: str,
    intents: list[str],
    sections: dict[str, list[dict[str, Any]]],
    request: ContextRequest,
    settings: ContextSettings,
) -> dict[str, Any]:
    """How long the answer may be and how much it must hedge, and why (``route.budget``)."""
    words = request.max_words or PERSONA_ANSWER_WORDS.get(request.persona or "", settings.answer_words)
    if intents == ["greeting"] or response_class in ("clarify", "redirect", "refuse"):
        return {"max_words": words, "hedging": "none", "reasons": ["a fixed reply: nothing to hedge"]}
    verified = [r for r in sections["registry"] if r.get("verification_status") == "verified"]
    sealed = [p for p in sections["unstructured"] if p["seal_state"] == "SEALED"]
    best = max((p["scores"].get("dense") or 0.0 for p in sections["unstructured"]), default=0.0)
    local = sections["unstructured"] or sections["spatial"] or sections["registry"]
    if not local:
        hedging, reasons = "strong", ["web results only: not authoritative"]
    elif not verified and not sealed and not sections["spatial"] and best < STRONG_BELOW:
        hedging, reasons = "strong", [f"best passage cosine {best:.2f} < {STRONG_BELOW}"]
    elif verified or sealed:
        hedging = "none"
        reasons = [f"{len(verified)} verified program(s)" if verified else f"{len(sealed)} sealed passage(s)"]
    else:
        hedging, reasons = "light", ["documents and places, no verified program or sealed source"]
    return {"max_words": words, "hedging": hedging, "reasons": reasons}


def budget_instruction(budget: dict[str, Any], response_class: str) -> str:
    text = f"Answer in at most {budget['max_words']} words. {HEDGING_TEXT[budget['hedging']]}"
    return f"{text} {NEGOTIATE_TEXT}" if response_class == "negotiate" else text


# --- the whole flow ------------------------------------------------------------------------------------------------------
REDIRECT_EMERGENCY = "This sounds urgent: call 911 for an emergency, or 988 (call or text) for a mental health crisis."
GREETING_REPLY = (
    "Hello! I can help you find benefits and community programs in West Virginia (SNAP, WIC, Medicaid, heating "
    "help, food pantries and more). Tell me what you need and your county or ZIP code."
)
