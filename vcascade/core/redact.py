"""Strip credentials from camera URLs before they reach logs, metric labels, results or error messages."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]*)@")


def redact_url(url: str) -> str:
    """Replace ``user:password@`` in a URL with ``***@``; other strings are returned unchanged.

    >>> redact_url("rtsp://admin:s3cret@10.0.0.5:554/stream1")
    'rtsp://***@10.0.0.5:554/stream1'
    """
    return _USERINFO.sub(r"\g<scheme>***@", url)
