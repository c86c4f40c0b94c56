"""Request and response bodies of serving/routers/memory.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from serving.models.context import USER_ID_PATTERN


# --- /memory -------------------------------------------------------------------------------------------------------------
class CardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(..., min_length=1, max_length=2000, description="what to remember, in the person's words")
    user_id: str | None = Field(None, pattern=USER_ID_PATTERN, description="a user within the API key's memory")


class Card(BaseModel):
    memory_id: str
    kind: Literal["card"] = "card"
    created_at: str
    duplicate: bool = Field(description="true: the same card was already there; its id is returned")


class MemoryItem(BaseModel):
    memory_id: str
    kind: Literal["card", "exchange"]
    content: str
    created_at: str
    state: Literal["pending", "consolidated"] = Field(description="pending: not yet in a consolidated snapshot")


class Nudge(BaseModel):
    chunk_id: str
    votes: int = Field(description="useful minus not useful")
    factor: float = Field(description="this user's score factor for the chunk, 0.5..1.5")


class Memory(BaseModel):
    user_id: str | None
    items: list[MemoryItem]
    feedback: list[Nudge]
    snapshot: str | None = Field(description="the consolidated snapshot read (None: none yet)")
    pending: int
    retention_days: int


class Deleted(BaseModel):
    deleted: str = Field(description="`all` or the memory_id")
    at: str
    effect: str
