"""Transport: ZeroMQ socket options, CurveZMQ keys and authentication (ZAP, roles), socket monitors and lost
connections, peer liveness, and TCP port checks.
"""
