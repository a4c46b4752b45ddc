"""Runtime of a process: threads from the cores it is given, the stop flag, model files (find, download,
verify), ONNX Runtime sessions, files inside installed distributions, and deterministic start-up errors.
"""
