"""A local stand-in for the Hugging Face hub: the part of its HTTP API that
huggingface_hub's `snapshot_download` calls for a dataset repo.

- `GET /api/datasets/{org}/{name}/revision/{revision}`: the repo's info, whose `sha`
  is the commit the revision points to;
- `GET /api/datasets/{org}/{name}/tree/{commit}?recursive=...`: the file listing;
- `HEAD` and `GET /datasets/{org}/{name}/resolve/{commit}/{path}`: a file, with the
  headers huggingface_hub reads (`X-Repo-Commit`, `ETag`, `Content-Length`).

Each repo is a dict of path -> bytes at one commit; `requests` records every path asked,
so a test can tell whether the hub was reached at all.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclass
class HubRepo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)


@dataclass
class HubStandIn:
    repos: dict[str, HubRepo]
    requests: list[str] = field(default_factory=list)
    url: str = ""


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _handler(hub: HubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, *, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append(path)
            for prefix in ("/api/datasets/", "/datasets/"):
                if not path.startswith(prefix):
                    continue
                org, name, kind, rest = [*path.removeprefix(prefix).split("/", 3), "", ""][:4]
                repo = hub.repos.get(f"{org}/{name}")
                if repo is None:
                    break
                if prefix == "/api/datasets/" and kind == "revision" and rest in repo.revisions:
                    return self._json({"id": f"{org}/{name}", "sha": repo.commit})
                if prefix == "/api/datasets/" and kind == "tree" and rest == repo.commit:
                    return self._json(_tree(repo))
                commit, _, file = rest.partition("/")
                if kind == "resolve" and commit == repo.commit and file in repo.files:
                    return self._file(repo, repo.files[file], body=body)
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _json(self, value: object) -> None:
            data = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _file(self, repo: HubRepo, data: bytes, *, body: bool) -> None:
            self.send_response(200)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{_blob_id(data)}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


def _tree(repo: HubRepo) -> list[dict[str, object]]:
    folders = {
        "/".join(parts[:depth])
        for parts in (path.split("/") for path in repo.files)
        for depth in range(1, len(parts))
    }
    return [
        {"type": "directory", "path": folder, "oid": "0" * 40, "size": 0}
        for folder in sorted(folders)
    ] + [
        {"type": "file", "path": path, "oid": _blob_id(data), "size": len(data)}
        for path, data in sorted(repo.files.items())
    ]


@contextmanager
def serve_hub(repos: dict[str, HubRepo]) -> Iterator[HubStandIn]:
    """The stand-in, listening on loopback until the block ends."""
    hub = HubStandIn(repos=repos)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
