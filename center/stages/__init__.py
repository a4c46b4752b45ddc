"""Stages: a recognizer as K pipeline stages (torch or ONNX, cut where one tensor crosses, placed on devices,
balanced by profiling), the engine that runs them one thread each, and the link to a stage group in another process.
"""
