"""Privacy at the edge: masks filled in every decoded frame, faces redacted in every image that leaves
(docs/PRIVACY.md). An image leaves only as a :class:`~vcascade.edge.privacy.redaction.RedactedImage`, which only
:mod:`vcascade.edge.privacy.redaction` makes.
"""
