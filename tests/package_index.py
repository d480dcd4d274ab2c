"""A package index on loopback for the tests of the pinned downloads (WordNet's sdist, the tagger's wheel)."""

from __future__ import annotations

import base64
import http.server
import json
import threading


def serve_index(package: str, files: dict[str, bytes], *, login: str | None = None, seen: list | None = None):
    """A PEP 691 JSON page for ``package`` listing ``files``, and the files themselves; with ``login``
    (user:password) behind basic authentication (a request without it gets 401), each request's (path,
    Authorization) appended to ``seen``. Returns the server and its index without the scheme (host:port/simple)."""
    listing = json.dumps({"files": [{"filename": name, "url": f"/files/{name}"} for name in files]}).encode()
    wanted = None if login is None else "Basic " + base64.b64encode(login.encode()).decode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            if seen is not None:
                seen.append((self.path, self.headers.get("Authorization")))
            if wanted is not None and self.headers.get("Authorization") != wanted:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="index"')
                self.end_headers()
                return
            body = listing if self.path.rstrip("/").endswith(f"/{package}") else files.get(self.path.rsplit("/", 1)[-1])
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_port}/simple"
