"""One module per ``vcascade`` command; :data:`vcascade.app.cli.COMMANDS` names the module of each command.

A command module provides

* ``add_arguments(parser, command)``: add the command's arguments to its :class:`argparse.ArgumentParser`
  (``command`` is the name it runs under: :mod:`vcascade.app.commands.component` serves ``edge``, ``broker``,
  ``worker`` and ``stage-group``);
* ``handle(args) -> int``: run the command and return its exit code. A
  :class:`vcascade.core.config.ConfigError` may propagate: the CLI prints it and exits with ``EXIT_CONFIG``.

A command module imports what it needs at module level: the CLI imports only the module of the command being
run, so ``vcascade check`` never loads torch for ``vcascade plan``.
"""

EXIT_OK = 0
EXIT_FAILURE = 1
"""A run-time failure: a process failed, an ROI unaccounted, a model unavailable, an edge unreachable."""
EXIT_CONFIG = 2
"""Invalid configuration or usage: one message per problem, no traceback (argparse's own exit code too)."""
EXIT_NO_RESTART = 3
"""A component's deterministic start-up error (a missing or invalid model, a failed contract check): the same
start would fail the same way, so the launcher reports it once and does not restart the component."""
