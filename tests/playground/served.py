"""A playground served over loopback from a thread, its runs going through a stand-in
for `run_rollouts` (same call, same callbacks): no sandbox or engine is started."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from harbor_ray.capture.proxy.certify import Certification
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.errors import CertificationError
from harbor_ray.jobs.rollouts import RolloutRequest
from harbor_ray.playground.access import Access
from harbor_ray.playground.app import Playground, build_playground_app
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.launch import Launcher
from harbor_ray.playground.runs import RunBoard
from tests.data.rollouts import rollout
from tests.fixtures.threaded import serve_in_thread

KEY = "the-playground-key-0123456789"
ENGINE = "http://trainer:s3cret-token@engine.internal:8000"


class FakeRollouts:
    """`run_rollouts`' stand-in: plans the request's attempts, lands each one (reward
    0.5) once `release` is set, or raises `fail`."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.requests: list[RolloutRequest] = []
        self.release = threading.Event()
        self.release.set()
        self.fail = fail

    def __call__(self, request: RolloutRequest, *,
                 on_planned: Callable[[int], None] | None = None,
                 on_result: Callable[[RolloutRecord], None] | None = None,
                 ) -> list[RolloutRecord]:
        self.requests.append(request)
        if self.fail is not None:
            raise self.fail
        assert on_planned is not None and on_result is not None
        on_planned(request.attempts)
        self.release.wait(10)
        records = [rollout(f"r{i}", None, reward=0.5) for i in range(request.attempts)]
        for record in records:
            on_result(record)
        return records


@contextmanager
def served(catalog: Catalog, tmp_path: Path, *, key: str | None = None,
           share: bool = False, rollouts: FakeRollouts | None = None) -> Iterator[str]:
    """The playground served over loopback from a thread; yields its URL."""
    async def setup() -> dict[str, Any]:
        return {"agents": [{"agent": "oracle", "runs": "host", "needs_model": False,
                            "dialect": None, "wired": True, "note": ""}],
                "installed_agents": [], "sandboxes": [],
                "engine": {"certified": False, "url": ENGINE, "error": f"{ENGINE} refused"}}

    async def refuse(url: str) -> Certification:
        raise CertificationError(f"{url} lists no models")

    launcher = Launcher(RunBoard(share=share), catalog, out=tmp_path, llm_url=ENGINE,
                        rollouts=rollouts or FakeRollouts(), certify=refuse)
    playground = Playground(catalog=catalog, launcher=launcher, access=Access.create(key),
                            setup=setup)
    app = build_playground_app(playground, llm_url=ENGINE)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    with serve_in_thread(app, config=config) as url:
        yield url


@contextmanager
def client_of(catalog: Catalog, tmp_path: Path, **options: Any) -> Iterator[httpx.Client]:
    """One visitor (a browser: its own cookies) of a playground served for it."""
    with served(catalog, tmp_path, **options) as url, httpx.Client(base_url=url) as client:
        yield client


