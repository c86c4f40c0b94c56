"""Request and response bodies of serving/routers/memory.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from serving.models.context import USER_ID_PATTERN


# --- /memory -------------------------------------------------------------------------------------------------------------
class CardRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"text": "I live in Mount Hope and have no car; the bus to Oak Hill runs on weekdays."},
                {"text": "Prefers phone calls in the morning", "user_id": "client-1042"},
            ]
        },
    )

    text: str = Field(..., min_length=1, max_length=2000, description="what to remember, in the person's words")
    user_id: str | None = Field(None, pattern=USER_ID_PATTERN, description="a user within the API key's memory")


class Card(BaseModel):
    """The card remembered (or the identical one already there)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "memory_id": "9d2f6a0e-41c7-4b8e-a3f5-7c0e1b2d9a64",
                    "kind": "card",
                    "created_at": "2026-11-26T09:14:03Z",
                    "duplicate": False,
                }
            ]
        }
    )

    memory_id: str = Field(description="the card's id in the caller's memory (DELETE /memory/{memory_id} forgets it)")
    kind: Literal["card"] = Field("card", description="always card")
    created_at: str = Field(description="when it was remembered (ISO 8601, UTC)")
    duplicate: bool = Field(description="true: the same card was already there; its id is returned")


class MemoryItem(BaseModel):
    """A card or a remembered exchange."""

    memory_id: str = Field(description="its id in the caller's memory")
    kind: Literal["card", "exchange"] = Field(
        description="card: written with POST /memory; exchange: a question and answer kept with `remember: true`"
    )
    content: str = Field(description="its text")
    created_at: str = Field(description="when it was remembered (ISO 8601, UTC)")
    state: Literal["pending", "consolidated"] = Field(description="pending: not yet in a consolidated snapshot")


class Nudge(BaseModel):
    """This user's feedback on one chunk (/feedback with `personal: true`), as it moves the chunk for them."""

    chunk_id: str = Field(description="the chunk judged")
    votes: int = Field(description="useful minus not useful")
    factor: float = Field(description="this user's score factor for the chunk, 0.5..1.5")


class Memory(BaseModel):
    """Everything the caller's (or its user_id's) memory holds now."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "user_id": "client-1042",
                    "items": [
                        {
                            "memory_id": "9d2f6a0e-41c7-4b8e-a3f5-7c0e1b2d9a64",
                            "kind": "card",
                            "content": "I live in Mount Hope and have no car; the bus to Oak Hill runs on weekdays.",
                            "created_at": "2026-11-26T09:14:03Z",
                            "state": "pending",
                        }
                    ],
                    "feedback": [{"chunk_id": "0c8f4e2a-7b1d-5e3f-9a6c-2d4b8e1f0a37", "votes": 1, "factor": 1.25}],
                    "snapshot": "2026-11-26-00000042-a3f9c1",
                    "pending": 1,
                    "retention_days": 365,
                }
            ]
        }
    )

    user_id: str | None = Field(description="the user within the key, as sent (null: the key's own memory)")
    items: list[MemoryItem] = Field(description="cards and remembered exchanges, oldest first")
    feedback: list[Nudge] = Field(description="the chunks this user's feedback moves")
    snapshot: str | None = Field(description="the consolidated snapshot read (None: none yet)")
    pending: int = Field(description="items written since that snapshot (read from the log until consolidated)")
    retention_days: int = Field(description="days items are kept (LIVEMEM_PERSONAL_RETENTION_DAYS, default 365)")


class Deleted(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "deleted": "all",
                    "at": "2026-11-26T09:20:45Z",
                    "effect": "hidden now; removed physically at the next consolidation",
                }
            ]
        }
    )

    deleted: str = Field(description="`all` or the memory_id")
    at: str = Field(description="when it was forgotten (ISO 8601, UTC)")
    effect: str = Field(
        description="what forgetting does: hidden from every read now, removed at the next consolidation"
    )
