"""What the pure ASGI middlewares of the app share: watching a response go out (``serving.logs``' access log and
``serving.metrics``' request counts and latencies both need its status and when its last byte left)."""

from __future__ import annotations

import time


class ResponseWatch:
    """An ASGI ``send`` that notes what passes through it: ``status`` (500 while no response has begun: the app
    failed before one), and ``seconds``, the time from this watch's creation until the last byte of the response
    was handed to the server (until now when that has not happened). ``header``, when given, is set on the response
    (replacing any the app set under that name). Pass ``watch.send`` to the app in place of the server's ``send``."""

    def __init__(self, send, header: tuple[bytes, bytes] | None = None) -> None:
        self._send = send
        self._header = header
        self.status = 500
        self.started = time.perf_counter()
        self.answered: float | None = None

    async def send(self, message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            if self._header is not None:
                name = self._header[0]
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != name]
                message = {**message, "headers": [*headers, self._header]}
        await self._send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered = time.perf_counter()

    @property
    def seconds(self) -> float:
        return (self.answered or time.perf_counter()) - self.started
