"""Distances on the Earth: great-circle kilometres between latitude / longitude points (``haversine_km``), on the
mean-radius sphere. Used by the GBIM export (entities near each other) and the GIS index (radius filters)."""

from __future__ import annotations

from typing import Any

import numpy as np

EARTH_RADIUS_KM = 6371.0088  # mean Earth radius (IUGG)


def haversine_km(lat: np.ndarray, lon: np.ndarray, lat0: Any, lon0: Any) -> np.ndarray:
    """Great-circle distances (km) between (lat, lon) and (lat0, lon0) (scalars or arrays), on the mean-radius
    sphere (haversine)."""
    phi, phi0 = np.radians(lat), np.radians(lat0)
    dphi = phi - phi0
    dlmb = np.radians(lon) - np.radians(lon0)
    a = np.sin(dphi / 2) ** 2 + np.cos(phi) * np.cos(phi0) * np.sin(dlmb / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
