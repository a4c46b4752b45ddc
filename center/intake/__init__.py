"""Intake: ROIs from the brokers become micro-batches (full or timeout), late ones are dropped before compute,
and the crops of a micro-batch become the first stage's input tensor.
"""
