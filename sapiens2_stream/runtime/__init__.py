"""The staged asyncio pipeline: queues and their policies, micro-batching, inference, metrics."""
