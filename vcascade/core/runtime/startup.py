"""The kind of error that fails a component's start the same way every time (a missing or invalid model, a model
that fails its contract check): restarting the process cannot help, so the launcher does not."""

from __future__ import annotations


class StartupError(Exception):
    """Base of deterministic start-up errors. A component process that ends with one exits with
    :data:`vcascade.app.commands.EXIT_NO_RESTART`; the launcher reports it once and does not restart it.

    Recovery: fix what the message names (the model file, the detector config) and start again.
    """
