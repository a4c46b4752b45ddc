"""The application on top of the components: the ``vcascade`` command (:mod:`vcascade.app.cli`, one module per
command in :mod:`vcascade.app.commands`), the launcher that runs a whole deployment as local processes, status,
plan and camera control. Nothing below imports it.
"""
