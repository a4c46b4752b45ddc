"""Telemetry of every process: Prometheus metrics plumbing, the health endpoints, logging, and the read-only
HTTP server the previews and the live view use.
"""
