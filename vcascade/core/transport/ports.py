"""Free TCP ports for deployments written on the fly: the tests, the benchmarks and the chaos script.

Asking the kernel for port 0 gives a port from the *ephemeral* range, the same range it hands to outgoing
connections (``connect``). A port picked that way and bound a few seconds later by a process still starting up
can meanwhile become the local end of some other connection (a ZeroMQ peer, a metrics scrape), and the bind fails
with EADDRINUSE. :func:`free_port` therefore picks from below the ephemeral range, where the kernel never
assigns ports on its own, and never hands out the same port twice in one process.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_EPHEMERAL_LOW = 32768
"""Linux's default first ephemeral port (``net.ipv4.ip_local_port_range`` = 32768 60999)."""
LOWEST_PORT = 20000
"""Lowest port picked: above the registered ports most services listen on (e.g. 5432, 6379, 8080, 9090)."""

_lock = threading.Lock()
_handed_out: set[int] = set()
_rng = random.Random()


def ephemeral_low(range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    """The first port of the kernel's ephemeral range (Linux: ``ip_local_port_range``); 32768 when unreadable
    (other systems: macOS and Windows start at 49152, above it)."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LINUX_EPHEMERAL_LOW


def free_port(host: str = "0.0.0.0") -> int:
    """A TCP port that nothing is bound to now, below the ephemeral range, not returned before by this process.

    Args:
        host: the address to check the port on; "0.0.0.0" (the default) also catches a port bound to one
            address only, since the metrics servers bind every address.

    Returns:
        A port in ``[LOWEST_PORT, ephemeral_low())``, or one the kernel picks (port 0) when that range is empty
        or exhausted.
    """
    low, high = LOWEST_PORT, ephemeral_low()
    with _lock:
        for _ in range(200 if high > low else 0):
            port = _rng.randrange(low, high)
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
        while True:  # the kernel's pick, still never one handed out before
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def _bindable(host: str, port: int) -> bool:
    return bind_error(port, host) is None


def bind_error(port: int, host: str = "0.0.0.0", reuse_address: bool = False) -> str | None:
    """Why a TCP socket cannot bind ``host:port`` now (``Address already in use``, ...), or None when it can.

    The default host "0.0.0.0" also catches a port bound to one address only. The socket is closed at once; a
    port free now may be taken before its process binds it. ``reuse_address``: bind as the components' listening
    sockets do (libzmq and Python's HTTP servers set ``SO_REUSEADDR``), so a port held only by connections in
    TIME-WAIT (a run that just ended, a scrape) counts as free, as it is for them; a listener still fails.
    """
    with socket.socket() as s:
        if reuse_address:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
