"""A backend that daemonises a helper only when asked, long after it became ready.

    python tests/fakes/late_helper_backend.py --port N --pidfile FILE

``GET /health`` answers 200 at once. ``POST /spawn`` runs ``helper_spawner.py --mode daemon``
(a double fork and ``setsid()``), waits until the helper has written its pid to FILE and its
parents are gone, then answers 200: the helper is an orphan, adopted by the backend's keeper, and
no snapshot of the tree taken before the request can have seen it — the gap a killed keeper
leaves (issue 33). Only the standard library.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SPAWNER = Path(__file__).with_name("helper_spawner.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pidfile", required=True)
    args = parser.parse_args()
    spawn = [sys.executable, str(SPAWNER), "--mode", "daemon", "--pidfile", args.pidfile]

    class Handler(BaseHTTPRequestHandler):
        def answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self.answer(200 if self.path == "/health" else 404)

        def do_POST(self) -> None:
            if self.path != "/spawn":
                self.answer(404)
                return
            subprocess.run([*spawn, "--", "true"], check=True, timeout=30)
            self.answer(200)

        def log_message(self, format: str, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
