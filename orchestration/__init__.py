"""Dagster code location of Living Memory (``orchestration.definitions:defs``).

Assets, checks and schedules are thin shells around the plain functions in ``livemem``.
"""
