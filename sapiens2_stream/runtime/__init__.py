"""The pipeline: per-source streams and one shared engine (scheduling, inference, writing), metrics, resume, batch."""
