"""The read-only FastAPI serving app over the published index (``serving.app:app``)."""
