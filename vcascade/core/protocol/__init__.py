"""Protocols between processes: the wire messages (edge <-> broker <-> worker), the edge's control messages,
and the one bounded gate every decoder of peer bytes goes through.
"""
