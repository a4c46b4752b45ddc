"""The bounded HTTP server (issue 28, items 1 and 2) against real clients on real sockets: slow and half-sent
requests time out, connections beyond the limit are refused, oversized heads and foreign Host names are refused,
every refusal is counted, every answer carries nosniff and frame-ancestors, and idle clients cost no thread."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time

import pytest

from vcascade.core.telemetry.http_server import (
    HTTP_REFUSED, HttpLimits, Response, host_allowed, serve_http, text,
)  # fmt: skip

FAST = HttpLimits(max_connections=8, header_timeout_s=1.0, idle_timeout_s=1.5, write_timeout_s=2.0, max_header_bytes=2048)


def refused(reason: str, server: str = "test") -> float:
    return HTTP_REFUSED.labels(server, reason)._value.get()


@pytest.fixture
def server():
    def route(request):
        if request.path == "/hello":
            return Response(200, body=b"hello\n")
        if request.path == "/broken":
            raise KeyError("secret-camera-password")
        return text(404, "not found")

    srv = serve_http("test", "127.0.0.1", 0, route, limits=FAST, allowed_hosts=["view.example"])
    yield srv
    srv.shutdown()


def connect(srv) -> socket.socket:
    sock = socket.create_connection(srv.server_address, timeout=10)
    return sock


def exchange(srv, raw: bytes) -> bytes:
    """Send ``raw`` and read until the server closes or a whole answer (head + Content-Length body) arrived."""
    with connect(srv) as sock:
        sock.sendall(raw)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> bytes:
    data = b""
    while True:
        if b"\r\n\r\n" in data:
            head, _, body = data.partition(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:") and len(body) >= int(line.split(b":")[1]):
                    return data
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def get(path: str = "/hello", host: str = "127.0.0.1") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


def test_a_plain_get_is_answered_with_the_protective_headers(server):
    answer = exchange(server, get())
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello\n")
    assert b"x-content-type-options: nosniff" in answer.lower()
    assert b"frame-ancestors 'none'" in answer
    not_found = exchange(server, get("/nope"))
    assert not_found.startswith(b"HTTP/1.1 404") and b"nosniff" in not_found


def test_a_foreign_host_is_refused_with_421_and_counted(server):
    before = refused("host")
    answer = exchange(server, get(host="rebound.attacker.example:8090"))
    assert answer.startswith(b"HTTP/1.1 421") and b"nosniff" in answer and b"frame-ancestors 'none'" in answer
    assert refused("host") == before + 1
    for name in ("localhost:1234", "[::1]:80", "VIEW.example", "127.0.0.1"):
        assert exchange(server, get(host=name)).startswith(b"HTTP/1.1 200"), name
    assert exchange(server, b"GET /hello HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 421")  # no Host at all


def test_a_handler_that_raises_is_a_counted_500_logged_without_its_message_and_the_server_serves_on(server, caplog):
    before = refused("handler_error")
    with caplog.at_level(logging.ERROR, logger="vcascade.core.telemetry.http_server"):
        answer = exchange(server, get("/broken"))
    assert answer.startswith(b"HTTP/1.1 500") and answer.endswith(b"internal error\n") and b"secret" not in answer
    assert refused("handler_error") == before + 1
    [line] = [r.getMessage() for r in caplog.records if r.name == "vcascade.core.telemetry.http_server"]
    assert line.startswith("test: the handler of /broken failed: KeyError at test_http_server.py:")
    assert "secret" not in line and "\n" not in line
    assert exchange(server, get()).startswith(b"HTTP/1.1 200")


def test_host_allowed_parses_ports_and_brackets():
    allowed = frozenset({"localhost", "::1", "cam.example"})
    assert host_allowed("cam.example:80", allowed) and host_allowed("[::1]:9", allowed)
    assert not host_allowed("cam.example.evil:80", allowed) and not host_allowed(None, allowed)
    assert host_allowed("anything", frozenset({"*"}))


def test_writes_and_bodies_are_refused(server):
    before = refused("method"), refused("body")
    post = b"POST /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc"
    assert exchange(server, post).startswith(b"HTTP/1.1 405")
    with_body = b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc"
    assert exchange(server, with_body).startswith(b"HTTP/1.1 413")
    assert (refused("method"), refused("body")) == (before[0] + 1, before[1] + 1)


def test_an_oversized_head_is_refused_with_431(server):
    before = refused("too_large")
    head = b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 4096 + b"\r\n\r\n"
    assert exchange(server, head).startswith(b"HTTP/1.1 431")
    assert refused("too_large") == before + 1


def test_a_half_sent_request_times_out_with_408(server):
    before = refused("header_timeout")
    with connect(server) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its head
        started = time.monotonic()
        answer = read_answer(sock)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408")
    assert waited < FAST.header_timeout_s + 5
    assert refused("header_timeout") == before + 1


def test_a_trickling_client_cannot_stretch_the_header_timeout(server):
    with connect(server) as sock:
        started = time.monotonic()
        for byte in get():  # one byte every 0.2 s: each read is quick, the whole head is late
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.2)
            if time.monotonic() - started > FAST.header_timeout_s + 3:
                break
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 408")


def test_connections_beyond_the_limit_are_refused_and_counted_then_served_again(server):
    before = refused("connections")
    held = [connect(server) for _ in range(server.max_connections)]
    try:
        for sock in held:
            sock.sendall(b"GET /hel")
        time.sleep(0.3)  # the server accepted the held ones (each sent bytes it read)
        extra = exchange(server, get())
        assert extra.startswith(b"HTTP/1.1 503"), extra[:80]
        assert refused("connections") >= before + 1
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while not exchange(server, get()).startswith(b"HTTP/1.1 200"):
        assert time.monotonic() < deadline, "the server did not serve again after the held connections closed"
        time.sleep(0.1)


def test_keep_alive_serves_several_requests_then_closes_an_idle_connection(server):
    with connect(server) as sock:
        for _ in range(3):
            sock.sendall(get())
            assert read_answer(sock).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        sock.settimeout(FAST.idle_timeout_s + 5)
        assert sock.recv(1) == b""  # closed by the server, idle
        assert time.monotonic() - started < FAST.idle_timeout_s + 3


def test_idle_clients_cost_no_thread():
    srv = serve_http("test", "127.0.0.1", 0, lambda r: Response(200), limits=HttpLimits(max_connections=200))
    try:
        threads_before = threading.active_count()
        clients = [connect(srv) for _ in range(150)]
        time.sleep(0.5)
        assert threading.active_count() <= threads_before + 1
        for client in clients:
            client.close()
    finally:
        srv.shutdown()


def test_the_connection_limit_leaves_most_descriptors_to_the_process():
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]));"
        "from vcascade.core.telemetry.http_server import connection_limit; print(connection_limit(64))"
    )
    limit = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout)
    assert 4 <= limit <= 256 // 8


def test_a_stream_sends_its_parts_then_closes_and_holds_no_handler_thread_between_parts():
    parts = [b"--frame\r\none\r\n", b"", b"--frame\r\ntwo\r\n", None]
    calls = []

    def next_part():
        calls.append(threading.current_thread().name)
        return parts.pop(0)

    def route(request):
        return Response(200, "multipart/x-mixed-replace; boundary=frame", stream=next_part, stream_interval_s=0.05)

    srv = serve_http("test", "127.0.0.1", 0, route, limits=FAST)
    try:
        with connect(srv) as sock:
            sock.sendall(get("/stream"))
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
        assert b"one" in body and b"two" in body and body.endswith(b"0\r\n\r\n")  # chunked, ended, then closed
        assert len(calls) == 4 and all(name.startswith("test-handler") for name in calls)
    finally:
        srv.shutdown()
