"""``python -m vcascade``: the ``vcascade`` command."""

from vcascade.app.cli import main

raise SystemExit(main())
