"""Sinks: where the edge's records leave it (JSONL file, ZeroMQ PUB, MQTT, webhook), each behind a bounded queue
with its own delivery thread and its own books (delivered + dropped = emitted).
"""
