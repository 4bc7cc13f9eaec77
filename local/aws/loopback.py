"""An HTTP server on a free loopback port, open as a context manager: the base of the local
stand-ins for the AWS APIs the trigger calls (control_plane.py, cache_plane.py,
logs_plane.py). A subclass answers one :class:`Request` with a :data:`Reply`."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

HOST = "127.0.0.1"
Reply = tuple[int, dict[str, str], bytes]  # status, headers, body


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query string
    headers: Mapping[str, str]
    body: bytes


class LoopbackServer:
    """Serves :meth:`answer` on a free port of 127.0.0.1 while open."""

    title = "local API"  # for errors and thread names

    def __init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"the {self.title} is not running")
        return f"http://{HOST}:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._server = ThreadingHTTPServer((HOST, 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name=self.title,
                         daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def answer(self, request: Request) -> Reply:
        raise NotImplementedError


def _handler(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, headers, body = server.answer(Request(
                method, self.path.split("?")[0], dict(self.headers.items()),
                self.rfile.read(length) if length else b""))
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._reply("GET")

        def do_POST(self) -> None:
            self._reply("POST")

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the run prints
            return

    return Handler
