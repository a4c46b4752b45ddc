"""Container health check: exit 0 when ``/healthz`` of this component's metrics port answers 200, else 1.

The port is ``$VCASCADE_HEALTH_PORT`` (edge 9101, broker 9102, worker 9103 in the shipped files); the path
``/healthz`` is served by every vcascade process on its metrics port. Standard library only, so it runs in the
slim image without curl.
"""

import os
import sys
import urllib.request

URL = f"http://127.0.0.1:{os.environ.get('VCASCADE_HEALTH_PORT', '9102')}/healthz"

try:
    with urllib.request.urlopen(URL, timeout=3) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError as exc:
    print(f"{URL}: {exc}", file=sys.stderr)
    sys.exit(1)
