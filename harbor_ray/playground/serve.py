"""`harbor-ray playground`: the app made from the command line's choices, and served.

On loopback it needs no key (whoever reaches the port is this machine's user). Bound to
any other address it refuses to start without a key file (`--key-file`, the online
service's format: created with a fresh key, mode 600, when missing), and it keeps the
Host check, so a web page cannot reach it through DNS rebinding either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import uvicorn

from harbor_ray.errors import DatasetError, PlaygroundError, ServeError, UnknownAgentError
from harbor_ray.host_names import LOOPBACK_NAMES, is_loopback, names_served
from harbor_ray.info import gather
from harbor_ray.listening import base_url, bind
from harbor_ray.online.controller_key import load_or_create_key
from harbor_ray.playground.access import Access
from harbor_ray.playground.app import Playground, build_playground_app
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.dataset_sink import DatasetSink
from harbor_ray.playground.launch import MAX_QUEUED, MAX_RUNS, Launcher, allowed_agents
from harbor_ray.playground.runs import RunBoard
from harbor_ray.playground.visitor_engine import VisitorEngines
from harbor_ray.report.tokenizer import Tokenizers, token_section
from harbor_ray.trials.datasets import resolve_dataset

__all__ = ["open_playground", "serve_playground"]


def open_playground(
    datasets: Sequence[str],
    *,
    out: Path,
    llm_url: str | None = None,
    key: str | None = None,
    share_runs: bool = False,
    max_runs: int = MAX_RUNS,
    max_queued: int = MAX_QUEUED,
    datasets_dir: Path | None = None,
    tokenizer: str | None = None,
    agents: Sequence[str] = (),
    allow_private_engines: bool = False,
) -> Playground:
    """The playground of `datasets` (specs, resolved now: one that names no dataset is
    refused before anything is served); runs may write datasets under `datasets_dir`;
    calls show their ids as text with `tokenizer`, or the served model's when it is on
    this machine (a `tokenizer` that cannot be read is refused now); a form may name a
    Harbor agent or one of the import paths `agents`, and a visitor's engine on loopback
    or a private network only with `allow_private_engines`."""
    try:
        catalog = Catalog([resolve_dataset(spec) for spec in datasets])
        allowed = allowed_agents(tuple(agents))
    except (DatasetError, UnknownAgentError) as exc:
        raise PlaygroundError(f"the playground cannot serve it: {exc}") from exc

    async def setup() -> dict[str, Any]:
        # The form lists these agents, and only these are run.
        return {**await gather(llm_url, list(datasets)), "agents": allowed.describe()}

    tokenizers = Tokenizers(tokenizer)

    def token_pieces(model: str, ids: list[int]) -> dict[str, Any]:
        section = token_section(tokenizers.for_model(model or None), ids)
        return {
            "pieces": section["pieces"] if section["tokenizer"] else None,
            "note": section["note"],
        }

    board = RunBoard(share=share_runs, token_pieces=token_pieces)
    launcher = Launcher(
        board,
        catalog,
        out=out,
        llm_url=llm_url,
        max_runs=max_runs,
        max_queued=max_queued,
        datasets=DatasetSink(datasets_dir),
        agents=allowed,
        engines=VisitorEngines(allow_private=allow_private_engines),
    )
    return Playground(catalog=catalog, launcher=launcher, access=Access.create(key), setup=setup)


def serve_playground(
    datasets: Sequence[str],
    *,
    out: Path,
    host: str = "127.0.0.1",
    port: int = 8767,
    llm_url: str | None = None,
    key_file: Path | None = None,
    share_runs: bool = False,
    max_runs: int = MAX_RUNS,
    max_queued: int = MAX_QUEUED,
    allowed_hosts: Iterable[str] = (),
    datasets_dir: Path | None = None,
    tokenizer: str | None = None,
    agents: Sequence[str] = (),
    allow_private_engines: bool = False,
    on_ready: Callable[[str], object] = print,
) -> None:
    """Serve the playground until interrupted."""
    if key_file is None and not is_loopback(host):
        raise PlaygroundError(
            f"bound to {host} the playground is reachable by others: "
            "give --key-file (its key is asked of every visitor)"
        )
    key = load_or_create_key(key_file)[0] if key_file is not None else None
    playground = open_playground(
        datasets,
        out=out,
        llm_url=llm_url,
        key=key,
        share_runs=share_runs,
        max_runs=max_runs,
        max_queued=max_queued,
        datasets_dir=datasets_dir,
        tokenizer=tokenizer,
        agents=agents,
        allow_private_engines=allow_private_engines,
    )
    try:
        sock = bind(host, port)
    except ServeError as exc:
        raise PlaygroundError(f"the playground cannot start: {exc}") from exc
    app = build_playground_app(
        playground,
        llm_url=llm_url,
        allowed_hosts=names_served((*LOOPBACK_NAMES, *allowed_hosts), host),
    )
    on_ready(base_url(sock))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    asyncio.run(server.serve(sockets=[sock]))
