"""County names as people and data files write them ("Fayette County", " fayette ", "FAYETTE county"), and the
forms the project keeps and compares them in. The one place that knows about the word "County".

Two spellings of a kept name exist on purpose, because callers have always differed there and their outputs are
stored or compared: ``without_county_word`` keeps inner spaces as written (the registry's keys, HSDS regions, the
ZIP data); ``tidy_county`` also collapses runs of spaces (GBIM entities' own county fields, registry input rows).
"""

from __future__ import annotations

import math
import re
from typing import Any

# a trailing word County (any case) and the spaces before it; pandas' str.replace takes it too (vectorised callers)
COUNTY_WORD = re.compile(r"\s+county$", re.IGNORECASE)


def without_county_word(name: str) -> str:
    """``" Fayette County "`` → ``"Fayette"``: trimmed, without a trailing word County; case and inner spaces kept."""
    return COUNTY_WORD.sub("", name.strip())


def county_key(name: str) -> str:
    """``Fayette County`` / ``fayette`` → ``fayette``: how counties are compared (registry, place names)."""
    return without_county_word(name).casefold()


def tidy_county(text: str) -> str:
    """``"  Mc  Dowell   county"`` → ``"Mc Dowell"``: runs of spaces made one, without a trailing word County; case
    kept."""
    return COUNTY_WORD.sub("", " ".join(text.split()))


def tidy_county_key(value: Any) -> str | None:
    """``tidy_county`` case-folded, for comparing stored entities' counties; None for a missing (None, NaN) or
    blank value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return tidy_county(str(value)).casefold() or None


def lower_without_county(value: str) -> str:
    """How /facts compares relation objects (counties, programs, organizations): trimmed, lower-cased (not
    case-folded), without one trailing ``" county"`` (one space exactly); inner spaces kept."""
    return value.strip().lower().removesuffix(" county")
