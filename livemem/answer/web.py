"""The web research gateway: a pluggable provider behind a domain policy, a rate limit and a call log.

Off by default: the serving app has a gateway only when ``LIVEMEM_WEB_URL`` names a search API
(``web_gateway`` of the settings tree's ``WebSettings``; docs/web.md). A provider is anything with
``search(query, limit) -> list[dict]``; results are normalised to ``title``, ``snippet``, ``url``, ``source`` (the
host) and ``published_at``. Every call is logged (``logging``) and returned as a record (query, provider, admitted
and excluded URLs with the reason, rate-limit refusals, provider errors) for the audit. ``HttpJsonProvider`` queries a generic JSON search HTTP API (URL, key
sent in a header, a bounded timeout and answer size); ``LocalProvider`` answers from a fixed list of documents
(tests, demos, an offline mirror). West-Virginia-scoped questions never reach any provider (the ``web_gate`` step of ``livemem.answer.steps``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from livemem.errors import ConfigError
from livemem.settings import WebSettings

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


class WebProviderError(Exception):
    """A provider could not answer (timeout, HTTP error, not JSON, too big); the message never holds the key."""


RESULT_FIELDS = ("title", "snippet", "url", "published_at")


@dataclass
class HttpJsonProvider:
    """A generic JSON search HTTP API: ``GET url?<query_param>=<query>&<limit_param>=<limit>``.

    The key goes in a header only (``Authorization: Bearer <key>``, or the key as is in another header such as
    ``X-Subscription-Token``), never in the URL, so neither httpx's request log nor an error message can carry
    it. The answer is a JSON object whose ``results_path`` (dotted, e.g. ``web.results``) is a list of objects;
    ``fields`` maps our names (title, snippet, url, published_at) to the API's when they differ (``{"snippet":
    "description"}``). Timeouts (``timeout_s`` for connecting and for each read) and the answer size
    (``max_bytes``) are bounded, and redirects are not followed.
    """

    url: str
    key: str | None = None
    key_header: str = "Authorization"
    query_param: str = "q"
    limit_param: str | None = "count"
    results_path: str = "results"
    fields: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 5.0
    max_bytes: int = 2_000_000
    name: str = ""

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"LIVEMEM_WEB_URL must be an http(s) URL, not {self.url!r}")
        self.name = self.name or f"http-json:{parts.hostname}"
        self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s), follow_redirects=False)

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self.key:
            bearer = self.key_header.lower() == "authorization"
            headers[self.key_header] = f"Bearer {self.key}" if bearer else self.key
        return headers

    def _fail(self, message: str) -> WebProviderError:
        if self.key:  # belt and braces: nothing we raise may repeat the key, whatever the API echoed
            message = message.replace(self.key, "[key]")
        return WebProviderError(message)

    def search(self, query: str, limit: int) -> list[dict[str, Any]]:
        params: dict[str, Any] = {self.query_param: query}
        if self.limit_param:
            params[self.limit_param] = limit
        try:
            with self._client.stream("GET", self.url, params=params, headers=self._headers()) as response:
                if response.status_code != 200:
                    raise self._fail(f"{self.name} answered HTTP {response.status_code}")
                body = bytearray()
                for piece in response.iter_bytes():
                    body += piece
                    if len(body) > self.max_bytes:
                        raise self._fail(f"{self.name} answered more than {self.max_bytes} bytes")
        except httpx.TimeoutException:
            raise self._fail(f"{self.name} did not answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:  # connection refused, reset, protocol errors
            raise self._fail(f"{self.name} could not be reached ({type(exc).__name__})") from None
        try:
            data: Any = json.loads(body)
        except ValueError:
            raise self._fail(f"{self.name} answered something that is not JSON") from None
        for part in self.results_path.split("."):
            data = data.get(part) if isinstance(data, dict) else None
        if not isinstance(data, list):
            raise self._fail(f"{self.name} answered no list at {self.results_path!r}")
        names = {f: self.fields.get(f, f) for f in RESULT_FIELDS}
        return [{f: item.get(n) for f, n in names.items()} for item in data[:limit] if isinstance(item, dict)]

    def close(self) -> None:
        self._client.close()


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
        except WebProviderError as exc:
            record["error"] = str(exc)
            log.warning("web provider %s failed: %s", self.provider.name, exc)
            return [], [record]
        except Exception as exc:  # a provider failing must never fail the request
            record["error"] = f"{self.provider.name} failed ({type(exc).__name__})"  # its text might hold a secret
            log.warning("web provider %s failed (%s)", self.provider.name, type(exc).__name__)
            return [], [record]
        results: list[dict[str, Any]] = []
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
                    "published_at": None if item.get("published_at") is None else str(item["published_at"])[:64],
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


def web_gateway(web: WebSettings) -> WebGateway | None:
    """The gateway ``LIVEMEM_WEB_*`` (the settings tree's ``WebSettings``, passed by the entry point) configures, or
    None (off) when ``LIVEMEM_WEB_URL`` is unset (docs/web.md)."""
    if not web.url:
        return None
    provider = HttpJsonProvider(
        web.url,
        key=web.key,
        key_header=web.key_header,
        query_param=web.query_param,
        limit_param=web.limit_param,
        results_path=web.results_path,
        fields=web.fields,
        timeout_s=web.timeout_s,
    )
    policy = WebPolicy(
        allowed_domains=web.allowed_domains,
        denied_domains=web.denied_domains,
        max_results=web.max_results,
        calls_per_minute=web.calls_per_minute,
    )
    log.info("web gateway on: %s (key %s)", provider.name, "set" if provider.key else "not set")
    return WebGateway(provider, policy)
