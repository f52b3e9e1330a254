"""What the tests need besides the client: the service's address and the owner's side of the API.

`npm test` (packages/python/test/python.test.ts) starts a real service on 127.0.0.1 and passes, in
the environment, its address, an owner's API token, a bot with an active card and a bot with a
funded partner wallet. Without them the tests that need the service are skipped (for a quick run of
the others: `cd packages/python && python3 -m unittest`); `npm test` fails on any skip.
"""

from __future__ import annotations

import json
import os
import threading
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

BASE_URL = os.environ.get("BOTPAY_URL", "")
OWNER_TOKEN = os.environ.get("BOTPAY_OWNER_TOKEN", "")

needs_service = unittest.skipUnless(BASE_URL and OWNER_TOKEN, "BOTPAY_URL and BOTPAY_OWNER_TOKEN not set")


def owner(method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Tuple[int, Dict[str, Any]]:
    """A call of the owner API with the owner's token (what the owner's dashboard does)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {OWNER_TOKEN}"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(BASE_URL + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as answer:
        return answer.code, json.loads(answer.read() or b"{}")


Handler = Callable[[BaseHTTPRequestHandler, bytes], Tuple[int, Dict[str, str], bytes]]


class LocalServer:
    """A real HTTP server on 127.0.0.1 answering with `handler`; every request is recorded."""

    def __init__(self, handler: Handler) -> None:
        self.requests: List[Tuple[str, str, Dict[str, str], bytes]] = []
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.requests.append((self.command, self.path, dict(self.headers.items()), body))
                status, headers, payload = handler(self, body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _answer
            do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
