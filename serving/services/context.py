"""What /context, /chat, /v1/chat/completions and the MCP server share in one process: the answer cache, the
audit writer, the web gateway, the LLM backend, the warm-up, the conversation threads (``livemem.answer.conversation``),
and their metrics (``Metrics.add_collector``).

Created once per serving state on first use (``context_service(state)``, kept in ``ServingState.context_service``),
from ``ContextSettings.from_env()`` unless a test or entry point set one there first.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from livemem.answer.answer_cache import AnswerCache
from livemem.answer.audit import AUDIT_WAIT_S, AuditWriter, audit_record
from livemem.answer.chat import OpenAICompatibleBackend, generate
from livemem.answer.context import build_context
from livemem.answer.conversation import Carried, ThreadState, ThreadStore, carry, from_history
from livemem.answer.routing import Caller, ContextRequest
from livemem.answer.web import WebGateway, web_gateway
from livemem.engine.snapshot import Snapshot
from livemem.geo.home import WEST_VIRGINIA, Home
from livemem.geo.places import find_places
from livemem.query.cache import cache_key
from livemem.settings import ContextSettings, WebSettings
from livemem.usage.traces import SCRAPE_FLUSH_WAIT_S, retrieval_events

if TYPE_CHECKING:  # serving.state holds the services
    from serving.state import Role, ServingState

log = logging.getLogger(__name__)
RATIO = ("hits / lookups per kind", "livemem_answer_cache_hits", "livemem_answer_cache_misses")


class _Collector:
    def __init__(self, service: ContextService) -> None:
        self.service = service

    def flush(self) -> None:
        self.service.audit.flush(wait_s=SCRAPE_FLUSH_WAIT_S)  # queued audit records are written (unless locked)

    def collect(self):
        self.flush()
        yield from self.families()

    def families(self):
        s = self.service
        hits = CounterMetricFamily("livemem_answer_cache_hits", "answers served from the answer cache", labels=["kind"])
        misses = CounterMetricFamily("livemem_answer_cache_misses", "answers computed", labels=["kind"])
        ratio = GaugeMetricFamily("livemem_answer_cache_hit_ratio", RATIO[0], labels=["kind"])
        for kind in sorted(set(s.cache.hits) | set(s.cache.misses)):
            h, m = s.cache.hits.get(kind, 0), s.cache.misses.get(kind, 0)
            hits.add_metric([kind], h)
            misses.add_metric([kind], m)
            ratio.add_metric([kind], h / (h + m) if h + m else 0.0)
        yield hits
        yield misses
        yield ratio
        yield GaugeMetricFamily("livemem_answer_cache_entries", "entries in the answer cache", value=len(s.cache))
        yield CounterMetricFamily(
            "livemem_answer_cache_persistent_hits",
            "answers found in the persistent tier",
            value=s.cache.persistent_hits,
        )
        classes = CounterMetricFamily(
            "livemem_context_responses", "context and chat responses per response class", labels=["response_class"]
        )
        for name, count in sorted(s.response_classes.items()):
            classes.add_metric([name], count)
        yield classes
        yield CounterMetricFamily("livemem_answer_fallbacks", "LLM failures answered extractively", value=s.fallbacks)
        yield CounterMetricFamily("livemem_audit_records", "audit records written", value=s.audit.written)
        yield CounterMetricFamily("livemem_audit_write_failures", "audit writes that failed", value=s.audit.failures)
        yield CounterMetricFamily("livemem_warm_up_runs", "warm-up questions answered", value=s.warmed_questions)
        yield GaugeMetricFamily(
            "livemem_conversation_threads", "threads remembered in this process", value=len(s.threads)
        )


class ContextService:
    def __init__(self, state: ServingState, settings: ContextSettings, web: WebGateway | None = None) -> None:
        self.state = state
        self.settings = settings
        self.web = web
        self.backend = OpenAICompatibleBackend.from_settings(settings)
        self.cache = AnswerCache(settings.cache_size, settings.cache_ttl_s, settings.cache_path)
        self.audit = AuditWriter(settings.audit_dir or state.settings.traces_path)
        self.response_classes: dict[str, int] = {}
        self.fallbacks = 0
        self.warmed_questions = 0
        self._warmed: set[str] = set()
        self._lock = threading.Lock()
        self.threads = ThreadStore(settings.thread_store_size, settings.thread_ttl_s)
        find_places("Oak Hill 25901")  # build the place tables now, not in the first request
        # with several workers copied into the shared metrics files, the hit ratio computed from the summed counts
        state.metrics.add_collector(_Collector(self), ratios={"livemem_answer_cache_hit_ratio": RATIO})

    def caller(self, role: Role) -> Caller:
        return Caller(role.name, role.access)

    def conversation(
        self,
        scope: str,
        thread_id: str | None,
        history: list[str] | None,
        message: str,
        *,
        county: str | None = None,
        zip_code: str | None = None,
        profile: dict[str, Any] | None = None,
        persona: str | None = None,
        home: Home = WEST_VIRGINIA,
    ) -> Carried:
        """``message`` with what its conversation carries: from ``history`` when the request sent earlier turns,
        else from the state stored for (``scope``, ``thread_id``), places read for ``home`` (the answering
        version's: ``Snapshot.home``). ``remember`` the result's state once the request is accepted."""
        state: ThreadState | None
        if history:
            state, source = from_history(history, home), "history"
        else:
            state, source = self.threads.get(scope, thread_id), "thread"
        given: dict[str, Any] = {
            "county": county,
            "zip_code": zip_code,
            "profile": profile,
            "persona": persona,
            "home": home,
        }
        if state is None:
            return carry(from_history([], home), message, **given)
        return carry(state, message, source=source, **given)

    def remember(self, scope: str, thread_id: str | None, carried: Carried) -> None:
        self.threads.put(scope, thread_id, carried.state)

    def _key(self, kind: str, caller: Caller, request: ContextRequest, snap: Snapshot) -> str:
        return cache_key(
            query=request.message,
            index_version=snap.version_id,
            model_id=f"{self.state.retriever.model_id}|{self.settings.model_name}",
            role=caller.role,
            kind=kind,
            county=request.county,
            zip=request.zip,
            profile=request.profile or {},
            top_k=request.top_k,
            web=self.web is not None,
            persona=[request.persona, list(request.collections), request.framing],
            thresholds=[request.min_score, request.recency_bias, request.recency_half_life_days, request.max_words],
            place_from=request.place_from,
        )

    def context(self, snap: Snapshot, caller: Caller, request: ContextRequest, audit: bool = True) -> dict[str, Any]:
        """The /context response (minus nothing the caller may not see) with ``trace_id`` and ``cached``."""
        return self._run("context", snap, caller, request, audit)

    def chat(self, snap: Snapshot, caller: Caller, request: ContextRequest, audit: bool = True) -> dict[str, Any]:
        return self._run("chat", snap, caller, request, audit)

    def _run(self, kind: str, snap: Snapshot, caller: Caller, request: ContextRequest, audit: bool) -> dict[str, Any]:
        started = time.perf_counter()
        self.maybe_warm_up(snap)
        key = self._key(kind, caller, request, snap)
        # An answer holding someone's personal memory is never cached: no copy outlives its deletion.
        cached = None if request.personal else self.cache.get(key, kind)
        latency: dict[str, float] = {}
        if cached is None:
            result = build_context(snap, self.state.retriever, caller, request, self.settings, self.web)
            latency.update(result["route"]["steps_ms"])
            if kind == "chat":
                t = time.perf_counter()
                result["answer"] = generate(
                    result, snap, self.settings, self.backend, persona_table=self.state.personas
                )
                latency["generate"] = round((time.perf_counter() - t) * 1000, 3)
                if result["answer"]["fallback"]:
                    with self._lock:
                        self.fallbacks += 1
            web_failed = any(c.get("error") for c in result["route"]["web"]["calls"])
            if not (result.get("answer") or {}).get("fallback") and not web_failed and not request.personal:
                self.cache.put(key, result)  # a fallback answer is not kept: the backend may be back next time
        else:
            result = cached
        # What belongs to this caller's conversation is never served from another caller's cached answer.
        result = {**result, "thread_id": request.thread_id,
                  "route": {**result["route"], "conversation": request.conversation}}  # fmt: skip
        hit = cached is not None
        trace_id = self.state.signer.issue(
            role=caller.role, index_version=snap.version_id, chunk_ids=[p["chunk_id"] for p in result["unstructured"]]
        )
        latency["total"] = round((time.perf_counter() - started) * 1000, 3)
        with self._lock:
            cls = result["route"]["response_class"]
            self.response_classes[cls] = self.response_classes.get(cls, 0) + 1
        if audit:
            self._trace(trace_id, caller, result, snap, hit)
            if self.settings.audit:
                self.audit.write_through(  # on disk before the answer, unless the file stays locked
                    [
                        audit_record(
                            event=kind,
                            trace_id=trace_id,
                            role=caller.role,
                            context=result,
                            cache_hit=hit,
                            latency_ms=latency,
                            answer=result.get("answer"),
                        )
                    ],
                    wait_s=AUDIT_WAIT_S,
                )
        return {**result, "trace_id": trace_id, "cached": hit}

    def _trace(self, trace_id: str, caller: Caller, result: dict[str, Any], snap: Snapshot, hit: bool) -> None:
        """The passages used are uses, like /query results: they feed the nightly attention rollup. A crisis
        message (``route.crisis``) leaves no trace: its words are kept no more than before it was answered with
        evidence (docs/crisis.md)."""
        passages = result["unstructured"]
        if not passages or result["route"].get("crisis"):
            return
        events = retrieval_events(
            trace_id=trace_id,
            query=result["message"],
            chunk_ids=[p["chunk_id"] for p in passages],
            scores=[p["score"] for p in passages],
            role=caller.role,
            breath_phase=snap.breath_phase,
            index_version=snap.version_id,
            mode="hybrid",
            return_="chunks",
            filters=result["route"]["filters"],
            collections=sorted({p["collection"] for p in passages}),
            cache_hit=hit,
        )
        for event in events:
            event["context"]["kind"] = "context"
        self.state.traces.submit(events)  # queued: the answer does not wait for the trace file

    def prepare(self, snap: Snapshot) -> None:
        """Every one-off setup of /context and /chat for ``snap``, done now in this thread (the app's startup, before
        this worker takes a request; issue 49: the first /context of a fresh worker ran it, 6.5 s, and uvicorn's
        supervisor killed workers whose health ping went unanswered meanwhile): one question answered as the public
        role through retrieval, places, registry, GBIM, crisis detection and the extractive answerer, with no web
        call, no LLM call, no cache entry, no trace and no audit record. Then the warm-up questions: here too when
        nothing but the extractive answerer answers them (quick and local), in the background with an LLM."""
        caller = self.caller(self.state.role(self.state.settings.public_role))
        find_places("Oak Hill 25901", snap.home)  # the place tables of this version's home states
        result = build_context(snap, self.state.retriever, caller, ContextRequest(PREPARE_QUESTION), self.settings)
        generate(result, snap, self.settings, None, persona_table=self.state.personas)
        if self.backend is None and self.settings.warm_up:
            with self._lock:
                self._warmed.add(snap.version_id)  # warmed here, not by a thread beside the first requests
            self._warm(snap)
        else:
            self.maybe_warm_up(snap)

    def maybe_warm_up(self, snap: Snapshot) -> threading.Thread | None:
        """The first time a version is served, answer the warm-up questions in the background (public role)."""
        if not self.settings.warm_up or not self.settings.warm_up_questions or snap.version_id in self._warmed:
            return None
        with self._lock:
            if snap.version_id in self._warmed:
                return None
            self._warmed.add(snap.version_id)
        thread = threading.Thread(target=self._warm, args=(snap,), name="answer-cache-warm-up", daemon=True)
        thread.start()
        return thread

    def _warm(self, snap: Snapshot) -> None:
        find_places("Oak Hill 25901", snap.home)  # the place tables of this version's home states
        caller = self.caller(self.state.role(self.state.settings.public_role))
        for question in self.settings.warm_up_questions:
            try:
                self.chat(snap, caller, ContextRequest(question), audit=False)
                self.context(snap, caller, ContextRequest(question), audit=False)
                self.warmed_questions += 1
            except Exception as exc:  # warm-up is best effort; a failing question must not stop serving
                log.warning("warm-up question %r failed: %s", question, exc)


_CREATE_LOCK = threading.Lock()
PREPARE_QUESTION = "food pantry or heating bill help near Oak Hill 25901 in Fayette County"


def context_service(state: ServingState, settings: ContextSettings | None = None) -> ContextService:
    """The process's service for ``state`` (created on first use)."""
    service = state.context_service
    if service is None:
        with _CREATE_LOCK:
            service = state.context_service
            if service is None:
                service = ContextService(
                    state, settings or ContextSettings.from_env(), web_gateway(WebSettings.from_env())
                )
                state.context_service = service
    return service
