"""A real HTTP server for webhook tests (stdlib ``http.server`` on a loopback port, in a thread): it answers given
statuses in turn, or hangs (reads each request and never answers)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A real HTTP server on a loopback port. ``statuses`` are answered to the first requests in turn, then 200;
    with ``hang`` set, requests get no answer until the test ends."""

    def __init__(self, statuses: tuple[int, ...] = (), hang: bool = False) -> None:
        self.batches: list[list[dict]] = []
        self.headers: list[dict[str, str]] = []
        self.requests = 0
        self.release = threading.Event()
        statuses_left = list(statuses)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests += 1
                if hang:
                    receiver.release.wait(600)
                    return
                status = statuses_left.pop(0) if statuses_left else 200
                if status == 200:
                    receiver.batches.append(json.loads(body))
                    receiver.headers.append(dict(self.headers))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
