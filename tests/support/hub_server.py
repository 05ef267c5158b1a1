"""An HTTPS server on loopback, certified by a test CA, that serves files two ways:

- plain files: `GET /files/<path>` answers the bytes of `root/<path>`;
- `GET /go/<anything>?to=<url>` redirects (302) to `<url>`, wherever it points;
- as the Hugging Face Hub does: `GET /api/models/<org>/<name>/revision/<rev>` lists the
  repository folder `root/hub/<org>/<name>/<rev>/` as `{"siblings": [{"rfilename": ...}]}`,
  and `GET /<org>/<name>/resolve/<rev>/<file>` redirects (302) to the file, as the hub
  redirects to its CDN.

It runs in a thread of the test process and counts the requests it answered.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import trustme


@dataclass
class HubServer:
    """A running server: its base URL (host name `localhost`) and the folder it serves."""

    url: str
    root: Path
    requests: list[str]


def _handler(root: Path, requests: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            """Quiet: the test output is not the place for an access log."""

        def do_GET(self) -> None:
            requests.append(self.path)
            parts = [unquote(p) for p in self.path.split("?", 1)[0].strip("/").split("/")]
            if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
                self._listing(root / "hub" / parts[2] / parts[3] / parts[5])
            elif len(parts) == 5 and parts[2] == "resolve":
                self.send_response(302)
                self.send_header("Location", "/files/hub/" + "/".join(parts[:2] + parts[3:]))
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parts[0] == "go" and "?to=" in self.path:
                self.send_response(302)
                self.send_header("Location", unquote(self.path.split("?to=", 1)[1]))
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parts[0] == "files" and ".." not in parts:
                self._file(root.joinpath(*parts[1:]))
            else:
                self._answer(404, b"{}")

        def _listing(self, folder: Path) -> None:
            if not folder.is_dir():
                self._answer(404, b'{"error": "Repository not found"}')
                return
            siblings = [{"rfilename": p.name} for p in sorted(folder.iterdir())]
            self._answer(200, json.dumps({"siblings": siblings}).encode())

        def _file(self, path: Path) -> None:
            if not path.is_file():
                self._answer(404, b"")
                return
            self._answer(200, path.read_bytes())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@contextmanager
def hub_server(root: Path, ca: trustme.CA) -> Iterator[HubServer]:
    """Serve `root` over HTTPS on 127.0.0.1 with a certificate for `localhost`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    requests: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(root, requests))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield HubServer(f"https://localhost:{server.server_address[1]}", root, requests)
    finally:
        server.shutdown()
        server.server_close()
