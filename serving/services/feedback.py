"""Whether an answer (or some of its chunks) was useful (``POST /feedback``, the MCP ``feedback`` tool): only for a
trace id this service issued to the caller's role, only for chunks that trace returned, on disk before it is
acknowledged; with ``personal``, the caller's own ranking nudged too (``serving.services.memory``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from livemem.usage.traces import FEEDBACK_WAIT_S, feedback_events
from serving.services.errors import ServiceError
from serving.services.memory import record_feedback

if TYPE_CHECKING:
    from serving.state import Role, ServingState

log = logging.getLogger(__name__)
FEEDBACK_RETRY_S = 5  # Retry-After of a feedback that could not be written (a full disk, a file locked elsewhere)


class FeedbackService:
    def __init__(self, state: ServingState) -> None:
        self.state = state

    def record(
        self,
        trace_id: str,
        chunk_ids: list[str],
        useful: bool,
        role: Role,
        caller: str,
        comment: str | None = None,
        personal_scope: str | None = None,
        user_id: str | None = None,
        agent: str | None = None,
    ) -> dict[str, Any]:
        """The ``FeedbackResponse`` body. ``caller``: whose verdict it is (the rollup keeps one per caller, chunk
        and day); ``personal_scope``: the caller's key scope when the verdict is also for its personal memory."""
        state = self.state
        snap = state.reader.snapshot()
        issued = state.signer.verify(trace_id, role=role.name)
        if issued is None:  # whatever the reason: a trace of another role reads like one that never existed
            raise ServiceError(404, "unknown trace_id: send the trace_id of an answer this service gave you")
        chosen = list(dict.fromkeys(chunk_ids))
        foreign = [c for c in chosen if not issued.returned(c)]
        if foreign:
            message = "these chunk_ids were not returned by this trace"
            raise ServiceError(400, f"{message}: {foreign[:20]}", {"message": message, "chunk_ids": foreign[:20]})
        if personal_scope is not None:
            record_feedback(state, personal_scope, user_id, chosen, useful)
        events = feedback_events(
            trace_id=issued.trace_id,
            chunk_ids=chosen,
            useful=useful,
            role=role.name,
            breath_phase=snap.breath_phase,
            index_version=issued.index_version,
            comment=comment,
            caller=state.signer.caller_tag(caller),
        )
        if agent is not None:
            for event in events:
                event["agent"] = agent
        # On disk (fdatasync) before it is acknowledged: a full disk fails the write whole (nothing torn is left
        # behind), and the caller is told to retry.
        written = state.traces.write_through(events, FEEDBACK_WAIT_S, queue=False, sync=True)
        if not written:  # False: the write failed; None: the file stayed locked elsewhere, nothing was written
            log.error("feedback on trace %s could not be written to %s", issued.trace_id, state.traces.directory)
            raise ServiceError(
                503, "feedback could not be recorded; try again later", headers={"Retry-After": str(FEEDBACK_RETRY_S)}
            )
        return {"trace_id": issued.trace_id, "recorded": len(events)}
