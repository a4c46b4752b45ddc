"""The link to the brokers: send queue, in-flight window, broker liveness, retries, and the latency account that
closes when an ROI's answer (a result or a counted drop) comes back.
"""
