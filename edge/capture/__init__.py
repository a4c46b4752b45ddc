"""Capture: one supervised reader per camera decodes its source (PyAV) into frames with PTS and capture time,
reports its state and the cause of every fault, and hands frames to the detector through the frame slots.
"""
