"""vcascade.core.transport.ports.free_port: below the kernel's ephemeral range, never the same port twice, actually free."""

from __future__ import annotations

import socket

from vcascade.core.transport import ports
from vcascade.core.transport.ports import bind_error


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable():
    low = ports.ephemeral_low()
    picked = [ports.free_port() for _ in range(50)]
    assert len(set(picked)) == len(picked)
    assert all(ports.LOWEST_PORT <= port < low for port in picked)
    with socket.socket() as s:
        s.bind(("0.0.0.0", picked[-1]))  # free: nothing was left bound to it


def test_a_bound_port_is_never_picked(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports.free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        ports._handed_out.discard(port)  # as if another process had picked it
        monkeypatch.setattr(ports._rng, "randrange", lambda low, high: port)  # the only candidate: taken
        fallback = ports.free_port()
    assert fallback != port  # 200 tries on a bound port, then the kernel's pick


def test_range_file(tmp_path):
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t60999\n")
    assert ports.ephemeral_low(path) == 40000
    assert ports.ephemeral_low(tmp_path / "missing") == ports.LINUX_EPHEMERAL_LOW


def test_a_port_held_only_in_time_wait_is_free_for_a_listener_that_reuses_addresses(free_port):
    """`check --deep` must not refuse a port that a run or a scrape just used: its connections linger in TIME-WAIT
    on the side that closed first, which a plain bind refuses but the components' listeners (SO_REUSEADDR) take."""
    port = free_port()
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert bind_error(port, reuse_address=True) is not None  # a live listener is never free
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the server side closes first: its end of the connection waits in TIME-WAIT
        client.close()
    assert bind_error(port) is not None  # what a plain bind says
    assert bind_error(port, reuse_address=True) is None
