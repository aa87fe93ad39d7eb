"""A local HTTP server standing in for the Hugging Face Hub (``HF_ENDPOINT``), for the model-download tests.

It serves the files of one directory at ``/<repo_id>/resolve/<revision>/<path>`` the way the Hub answers
``huggingface_hub``: ``HEAD`` with the commit (``X-Repo-Commit``), an ETag and the size; ``GET`` with the
bytes. It can misbehave on purpose (``damage``: serve a file truncated or altered for its first N GETs) and
counts the GETs of each file. Run it as a script to serve on a port (``make test-install`` does)::

    python tests/hub_stand_in.py --files DIR --repo ORG/NAME --revision SHA --port 0
"""

from __future__ import annotations

import argparse
import hashlib
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


class HubStandIn:
    """Serve ``files`` (a directory) as ``repo_id`` at ``revision`` on 127.0.0.1; start with a ``with`` block."""

    def __init__(self, files: Path, repo_id: str, revision: str, port: int = 0) -> None:
        self.files, self.repo_id, self.revision = Path(files), repo_id, revision
        self.gets: Counter[str] = Counter()
        #: name -> (how, times): serve the file "truncated" or "altered" for its next ``times`` GETs
        self.damage: dict[str, tuple[str, int]] = {}
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _resolve(self) -> Path | None:
                prefix = f"/{stand_in.repo_id}/resolve/{stand_in.revision}/"
                path = unquote(self.path.split("?", 1)[0])
                if not path.startswith(prefix):
                    return None
                name = path[len(prefix):]
                target = (stand_in.files / name).resolve()
                inside = stand_in.files.resolve() in target.parents
                return target if inside and target.is_file() else None

            def _head(self, target: Path, size: int) -> None:
                self.send_response(200)
                self.send_header("X-Repo-Commit", stand_in.revision)
                self.send_header("ETag", '"' + hashlib.sha256(target.read_bytes()).hexdigest() + '"')
                self.send_header("Content-Length", str(size))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                target = self._resolve()
                if target is None:
                    self.send_error(404)
                    return
                self._head(target, target.stat().st_size)

            def do_GET(self) -> None:  # noqa: N802
                target = self._resolve()
                if target is None:
                    self.send_error(404)
                    return
                name = target.relative_to(stand_in.files.resolve()).as_posix()
                stand_in.gets[name] += 1
                data = target.read_bytes()
                how, times = stand_in.damage.get(name, ("", 0))
                if times > 0:
                    stand_in.damage[name] = (how, times - 1)
                    data = data[: len(data) // 2] if how == "truncated" else bytes([data[0] ^ 0xFF]) + data[1:]
                self._head(target, len(data))
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=Path, required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--revision", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with HubStandIn(args.files, args.repo, args.revision, args.port) as hub:
        print(hub.endpoint, flush=True)
        hub.thread.join()


if __name__ == "__main__":
    main()
