"""Previews for the live view: annotated frames drawn only while someone watches a camera, served read-only over
HTTP.
"""
