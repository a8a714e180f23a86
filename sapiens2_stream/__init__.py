"""sapiens2-stream."""
