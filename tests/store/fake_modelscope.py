"""A tiny stand-in for the ModelScope hub API on 127.0.0.1, enough for snapshot downloads:
the file listing (``/api/v1/models/<id>/repo/files``) and file downloads
(``/api/v1/models/<id>/repo?FilePath=...``, with Range). Anything else answers 404."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class FakeModelScope:
    def __init__(self, model_id: str, files: dict[str, bytes]) -> None:
        self.model_id = model_id
        self.files = files
        self.requests: list[str] = []
        self.downloads: list[str] = []
        self.missing: set[str] = set()  # listed, but downloading them answers 404
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeModelScope:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def listing(self) -> dict:
        entries = [
            {
                "Name": p.rsplit("/", 1)[-1],
                "Path": p,
                "Type": "blob",
                "Size": len(data),
                "Sha256": hashlib.sha256(data).hexdigest(),
            }
            for p, data in sorted(self.files.items())
        ]
        return {"Code": 200, "Data": {"Files": entries}, "Success": True}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._serve(head=True)

            def do_GET(self) -> None:
                self._serve(head=False)

            def _serve(self, head: bool) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                fake.requests.append(f"{self.command} {self.path}")
                base = f"/api/v1/models/{fake.model_id}/repo"
                if url.path == base + "/files":
                    return self._json(fake.listing())
                if url.path == base and "FilePath" in query:
                    path = query["FilePath"][0]
                    if path not in fake.files or path in fake.missing:
                        return self._json({"Code": 404, "Message": "not found"}, 404)
                    return self._file(fake.files[path], head, path)
                return self._json({"Code": 404, "Message": "not found"}, 404)

            def _json(self, body: dict, status: int = 200) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _file(self, data: bytes, head: bool, path: str) -> None:
                start, end = 0, len(data) - 1
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    first, _, last = rng[6:].partition("-")
                    start = int(first or 0)
                    end = int(last) if last else len(data) - 1
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start : end + 1]
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if not head:
                    fake.downloads.append(path)
                    self.wfile.write(body)

        return Handler
