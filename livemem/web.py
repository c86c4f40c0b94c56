"""The web research gateway: a pluggable provider behind a domain policy, a rate limit and a call log.

Disabled by default (the serving app has no gateway unless one is configured; there is no network here). A
provider is anything with ``search(query, limit) -> list[dict]``; results are normalised to ``title``,
``snippet``, ``url``, ``source`` (the host) and ``published_at``. Every call is logged (``logging``) and returned
as a record (query, provider, admitted and excluded URLs with the reason, rate-limit refusals) for the audit.
``LocalProvider`` answers from a fixed list of documents (tests, demos, an offline mirror).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

log = logging.getLogger(__name__)


class WebProvider(Protocol):
    name: str

    def search(self, query: str, limit: int) -> list[dict[str, Any]]: ...


@dataclass
class LocalProvider:
    """Answers from fixed documents (``title``, ``snippet``, ``url``, optional ``published_at``) by shared words."""

    documents: list[dict[str, Any]]
    name: str = "local"

    def search(self, query: str, limit: int) -> list[dict[str, Any]]:
        words = set(re.findall(r"[a-z0-9]{3,}", query.lower()))
        scored = []
        for i, doc in enumerate(self.documents):
            text = f"{doc.get('title', '')} {doc.get('snippet', '')}".lower()
            overlap = len(words & set(re.findall(r"[a-z0-9]{3,}", text)))
            if overlap:
                scored.append((-overlap, i, doc))
        return [doc for _, _, doc in sorted(scored, key=lambda s: s[:2])[:limit]]


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def domain_matches(host: str, domains: Iterable[str]) -> str | None:
    """The listed domain ``host`` is, or is under (``www.benefits.wv.gov`` is under ``wv.gov``)."""
    for domain in domains:
        d = domain.lower().lstrip(".")
        if host == d or host.endswith("." + d):
            return domain
    return None


@dataclass
class WebPolicy:
    allowed_domains: list[str] = field(default_factory=list)  # empty: every domain not denied
    denied_domains: list[str] = field(default_factory=list)
    max_results: int = 5
    calls_per_minute: int = 30

    def judge(self, url: str) -> str | None:
        """Why a result is excluded (None: admitted)."""
        host = host_of(url)
        if not host or urlsplit(url).scheme not in ("http", "https"):
            return "not an http(s) URL"
        denied = domain_matches(host, self.denied_domains)
        if denied:
            return f"denied domain {denied}"
        if self.allowed_domains and not domain_matches(host, self.allowed_domains):
            return "domain not in the allowed list"
        return None


class RateLimiter:
    """At most ``per_minute`` calls in any sliding 60-second window."""

    def __init__(self, per_minute: int, clock=time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._calls: deque[float] = deque()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self.clock()
            while self._calls and now - self._calls[0] >= 60.0:
                self._calls.popleft()
            if len(self._calls) >= self.per_minute:
                return False
            self._calls.append(now)
            return True


class WebGateway:
    def __init__(self, provider: WebProvider, policy: WebPolicy | None = None) -> None:
        self.provider = provider
        self.policy = policy or WebPolicy()
        self.limiter = RateLimiter(self.policy.calls_per_minute)
        self.calls = 0

    def search(self, query: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Normalised, policy-filtered results and the call record(s) for the audit."""
        record: dict[str, Any] = {"provider": self.provider.name, "query": query, "admitted": [], "excluded": []}
        self.calls += 1
        if not self.limiter.allow():
            record["error"] = f"rate limit: more than {self.policy.calls_per_minute} calls a minute"
            log.warning("web search refused by the rate limit: %r", query)
            return [], [record]
        started = time.perf_counter()
        try:
            raw = self.provider.search(query, self.policy.max_results * 2)
        except Exception as exc:  # a provider failing must never fail the request
            record["error"] = f"{type(exc).__name__}: {exc}"
            log.warning("web provider %s failed: %s", self.provider.name, exc)
            return [], [record]
        results = []
        for item in raw:
            url = str(item.get("url", ""))
            why = self.policy.judge(url)
            if why:
                record["excluded"].append({"url": url, "reason": why})
                continue
            if len(results) >= self.policy.max_results:
                record["excluded"].append({"url": url, "reason": "over max_results"})
                continue
            results.append(
                {
                    "title": str(item.get("title") or url),
                    "snippet": " ".join(str(item.get("snippet") or "").split())[:500],
                    "url": url,
                    "source": host_of(url),
                    "published_at": item.get("published_at"),
                }
            )
            record["admitted"].append(url)
        record["ms"] = round((time.perf_counter() - started) * 1000, 3)
        log.info(
            "web search via %s: %d admitted, %d excluded (%r)",
            self.provider.name,
            len(record["admitted"]),
            len(record["excluded"]),
            query,
        )
        return results, [record]
