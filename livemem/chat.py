"""Answers from an evidence set (``livemem.context.build_context``): an LLM backend or an extractive answer,
numbered citations, and the guardrail that runs after generation.

- With ``LLM_BASE_URL`` and ``LLM_MODEL`` set, the assembled prompt goes to an OpenAI-compatible
  ``/chat/completions`` endpoint (httpx; timeouts; transport errors, 429 and 5xx retried with tenacity).
- Without one, or when the backend fails or times out, the answer is extractive: sentences, places and programs
  taken verbatim from the evidence, each with its citation, and marked as such (``backend: extractive``,
  ``fallback`` naming the failure).
- The guardrail (``refuse`` | ``annotate`` | ``off``) acts on an answer that cites nothing; independently of it,
  an answer holding text of a collection the caller may not read is always replaced by a refusal.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from livemem.context import GREETING_REPLY, REDIRECT_EMERGENCY, ContextSettings
from livemem.reader import Snapshot

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


class BackendError(Exception):
    """The language model backend failed (after its retries) or timed out."""


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

    def complete(self, system: str, context: str) -> str:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": context}],
            "temperature": 0,
        }
        try:
            data = self._post(body)
            return str(data["choices"][0]["message"]["content"] or "")
        except httpx.TimeoutException as exc:
            raise BackendError(f"timeout after {self.client.timeout.read}s") from exc
        except httpx.HTTPStatusError as exc:
            raise BackendError(f"HTTP {exc.response.status_code}") from exc
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc


# --- extractive answers -------------------------------------------------------------------------------------------
def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]{3,}", text.lower())}


def best_sentences(content: str, message: str, n: int = 2) -> str:
    """The ``n`` sentences of a passage sharing most words with the message, in their original order."""
    text = " ".join(line.strip("-*#> ") for line in content.splitlines() if line.strip() and not line.startswith("#"))
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) > 20]
    if not sentences:
        return text[:300]
    wanted = _words(message)
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(_words(sentences[i]) & wanted), i))[:n]
    return " ".join(sentences[i] for i in sorted(ranked))


def extractive_answer(context: dict[str, Any]) -> str:
    lines: list[str] = []
    for row in [r for r in context["registry"] if r.get("ref")][:3]:
        details = "; ".join(
            p for p in (row.get("address"), f"phone {row['contact_phone']}" if row.get("contact_phone") else None,
                        f"hours {row['hours']}" if row.get("hours") else None) if p
        )  # fmt: skip
        lines.append(
            f"- {row['name']} ({row['county']} County): {row.get('description') or ''} {details} [{row['ref']}]"
        )
    for place in [e for e in context["spatial"] if e.get("ref")][:2]:
        where = ", ".join(str(v) for v in (place.get("address"), place.get("town")) if v)
        lines.append(f"- {place['label']}{f' ({where})' if where else ''}: {place['description']} [{place['ref']}]")
    for item in [p for p in context["unstructured"] if p.get("ref")][:2]:
        lines.append(f"- {best_sentences(item['content'], context['message'])} [{item['ref']}]")
    for item in [w for w in context["web"] if w.get("ref")][:2]:
        lines.append(f"- Web ({item['source']}, not authoritative): {item['title']}: {item['snippet']} [{item['ref']}]")
    if not lines:
        return CLARIFY_TEXT
    head = (
        "From the West Virginia evidence in Living Memory:" if context["route"]["wv_scoped"] else "From Living Memory:"
    )
    return head + "\n" + "\n".join(" ".join(line.split()) for line in lines)


def canned_answer(context: dict[str, Any]) -> str | None:
    """The fixed reply of a message that is not answered from evidence (None: it is)."""
    route = context["route"]
    if route["intents"] == ["greeting"]:
        return GREETING_REPLY
    if route["response_class"] == "redirect":
        if "emergency" in route["reason"]:
            return REDIRECT_EMERGENCY
        return (
            "Living Memory covers West Virginia programs only. For other states, call 211 or the state's own "
            "benefits agency."
        )
    if route["response_class"] == "refuse":
        return REFUSE_TEXT
    if route["response_class"] == "clarify":
        return CLARIFY_TEXT
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


def leaks(snap: Snapshot, hidden: list[str], text: str) -> bool:
    """Whether ``text`` holds 8 consecutive words that only a hidden collection contains."""
    return bool(hidden) and bool(hidden_shingles(snap, tuple(sorted(hidden))) & _shingles(text))


def guard(answer: str, context: dict[str, Any], snap: Snapshot, mode: str) -> tuple[str, list[dict], dict[str, Any]]:
    """Apply the guardrail; returns the answer, the citations it uses and what the guardrail did."""
    by_n = {c["n"]: c for c in context["citations"]}
    cited = [by_n[n] for n in dict.fromkeys(int(m) for m in CITATION.findall(answer)) if n in by_n]
    hidden = context.get("hidden_collections", [])
    report: dict[str, Any] = {"mode": mode, "action": "none", "cited": len(cited)}
    if leaks(snap, hidden, answer) or any(c.get("collection") in hidden for c in cited):
        report["action"] = "blocked: the answer held text the caller's role may not read"
        return REFUSE_TEXT, [], report
    evidence_answer = context["route"]["response_class"] == "answer" and context["route"]["intents"] != ["greeting"]
    if evidence_answer and not cited and mode != "off":
        if mode == "refuse":
            report["action"] = "refused: the answer cites no evidence"
            return UNGROUNDED_TEXT, [], report
        report["action"] = "annotated: the answer cites no evidence"
        return answer + UNGROUNDED_NOTE, [], report
    return answer, cited, report


def generate(
    context: dict[str, Any], snap: Snapshot, settings: ContextSettings, backend: OpenAICompatibleBackend | None
) -> dict[str, Any]:
    """The answer to the message of ``context`` with its citations, backend, fallback and guardrail report."""
    fixed = canned_answer(context)
    fallback = None
    if fixed is not None:
        text, used, model = fixed, "fixed", "none"
    elif backend is not None:
        try:
            text = backend.complete(context["prompt"]["system"], context["prompt"]["context"])
            used, model = "llm", backend.model
        except BackendError as exc:
            log.warning("LLM backend failed, answering extractively: %s", exc)
            fallback = str(exc)
            text = FALLBACK_NOTE.format(reason=fallback) + "\n" + extractive_answer(context)
            used, model = "extractive", "extractive"
    else:
        text, used, model = extractive_answer(context), "extractive", "extractive"
    text, cited, report = guard(text, context, snap, settings.guardrail)
    return {
        "answer": text,
        "citations": cited,
        "backend": used,
        "model": model,
        "fallback": fallback,
        "note": EXTRACTIVE_NOTE if used == "extractive" else None,
        "guardrail": report,
    }
