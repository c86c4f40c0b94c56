"""The current breath: Δ-phase and tone, read from a ``BREATH.md`` file.

Format (the first line matching each key counts; keys are case-insensitive, the rest of the file is prose)::

    # BREATH
    phase: Δ3
    tone: normal

``phase`` is ``Δ`` followed by a number (``D3`` and ``delta 3`` are accepted and normalised to ``Δ3``).
``tone`` is ``fast``, ``normal`` or ``slow``: the daily decay pace of unused open memory (0.05, 0.02, 0.01).
A missing file, or a missing or unreadable key, gives phase ``None`` and tone ``normal``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

TONES = {"fast": 0.05, "normal": 0.02, "slow": 0.01}

_PHASE = re.compile(r"^\s*[-*]?\s*phase\s*:\s*(?:Δ|D|delta\s*)?\s*(\d+)\s*$", re.IGNORECASE | re.MULTILINE)
_TONE = re.compile(r"^\s*[-*]?\s*tone\s*:\s*([A-Za-z]+)\s*$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Breath:
    phase: str | None = None
    tone: str = "normal"
    source: str | None = None
    path: str | None = None

    @property
    def decay_rate(self) -> float:
        return TONES[self.tone]

    def as_dict(self) -> dict:
        return asdict(self)


def parse_breath(text: str | None, source: str | None = None, path: str | None = None) -> Breath:
    if not text:
        return Breath(source=source, path=path)
    phase = _PHASE.search(text)
    tone = _TONE.search(text)
    tone_value = tone.group(1).lower() if tone else "normal"
    return Breath(
        phase=f"Δ{int(phase.group(1))}" if phase else None,
        tone=tone_value if tone_value in TONES else "normal",
        source=source,
        path=path,
    )
