"""The live view in the browser: one read-only page over a whole deployment (``vcascade ui FILE``).

:mod:`~vcascade.app.ui.deployment_view` gathers what it shows (metrics scrapes, the edges' preview endpoints);
:mod:`~vcascade.app.ui.server` serves the page, its scripts (``static/``, package data, no build step) and the
JSON API.
"""
