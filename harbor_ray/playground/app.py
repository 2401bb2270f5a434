"""The playground's HTTP app: the page, and the JSON it reads and posts.

Routes: `/` the page (static: it holds no data, so it is served to anyone who passes the
Host check), and the same page at each view's own URL (`/tasks`, `/task/DATASET/NAME`,
`/runs`, `/run/ID`, `/compare/ID,ID`, `/setup`: the page opens the view its path names,
so reload, Back and a shared link work); any other path the app's own 404 page;
`POST /login` (the key, when there is one), and under `/api/`: `session`,
`tasks`, `task`, `file`, `setup`, `runs` (GET: the visitor's runs; POST: start one),
`run`, `calls` (a run's model calls after a cursor: `?id=RUN&after=N`). Every API
route checks the key, resolves the visitor from its signed cookie (a new one gets a
fresh id) and answers a refusal as JSON with its status, never a 5xx.
Every answer passes a last scrub (`scrub.Scrub`): no response body holds the key, the
server's engine URL (which may carry a credential) or any URL's credentials.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from harbor_ray.errors import PlaygroundRefusal
from harbor_ray.host_names import LOOPBACK_NAMES, HostGuard
from harbor_ray.playground.access import KEY_COOKIE, VISITOR_COOKIE, Access
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.form import RunForm
from harbor_ray.playground.launch import Launcher
from harbor_ray.playground.scrub import Scrub
from harbor_ray.query_numbers import COUNT_DIGITS, parse_count
from harbor_ray.report.page import token_view_script

__all__ = ["Playground", "build_playground_app"]

_NO_CACHE = {"cache-control": "no-store"}
_MAX_CURSOR = 10**COUNT_DIGITS - 1
Setup = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Playground:
    """What the app serves: the tasks, the runs' launcher, who may use it, and the
    Setup tab's content (gathered once, on first ask)."""

    catalog: Catalog
    launcher: Launcher
    access: Access
    setup: Setup


@cache
def _asset(name: str) -> str:
    return resources.files("harbor_ray.playground").joinpath("assets", name).read_text()


def page_html() -> str:
    return "".join(
        [
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<title>harbor_ray playground</title><link rel="icon" href="data:,">',
            f"<style>{_asset('playground.css')}</style></head>\n<body>",
            _asset("body.html"),
            f"<script>{token_view_script()}</script>",
            f"<script>{_asset('playground.js')}</script>",
            "</body></html>\n",
        ]
    )


@dataclass
class _Served:
    """What every endpoint reads (the app's `state.served`): the playground, the last
    scrub of every answer, and the Setup tab's content once gathered."""

    playground: Playground
    scrub: Scrub
    setup: dict[str, Any] | None = None

    def answer(self, data: Any, status: int = 200) -> Response:
        body = self.scrub(orjson.dumps(data))
        return Response(body, status, media_type="application/json", headers=_NO_CACHE)


def _served(request: Request) -> _Served:
    served: _Served = request.app.state.served
    return served


ApiHandler = Callable[[Playground, Request, str], Awaitable[Any]]


@dataclass(frozen=True)
class _Api:
    """An `/api/` route: the key checked, the visitor resolved from its signed cookie (a
    new one gets a fresh id), a refusal answered as JSON with its status."""

    handler: ApiHandler

    async def endpoint(self, request: Request) -> Response:
        served = _served(request)
        access = served.playground.access
        if not access.admits(request.cookies, request.headers.get("authorization")):
            return served.answer({"error": "a key is needed: log in"}, 401)
        visitor = access.visitor(request.cookies.get(VISITOR_COOKIE))
        cookie = None
        if visitor is None:
            visitor, cookie = access.new_visitor()
        try:
            response = served.answer(await self.handler(served.playground, request, visitor))
        except PlaygroundRefusal as exc:
            response = served.answer({"error": str(exc)}, exc.status)
        if cookie is not None:
            response.set_cookie(VISITOR_COOKIE, cookie, httponly=True, samesite="strict")
        return response


async def page(_: Request) -> Response:
    return HTMLResponse(page_html(), headers=_NO_CACHE)


async def not_found(request: Request, _: Exception) -> Response:
    if request.url.path.startswith("/api/"):
        return _served(request).answer({"error": "no such route"}, 404)
    return HTMLResponse(_NOT_FOUND, 404, headers=_NO_CACHE)


async def login(request: Request) -> Response:
    served = _served(request)
    access = served.playground.access
    offered = str((await request.form()).get("key", ""))
    if not access.key_matches(offered):
        return served.answer({"error": "that is not the key"}, 401)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(KEY_COOKIE, access.key_cookie(), httponly=True, samesite="strict")
    return response


async def session(request: Request) -> Response:
    served = _served(request)
    access = served.playground.access
    return served.answer(
        {
            "needs_key": access.key is not None,
            "admitted": access.admits(request.cookies, request.headers.get("authorization")),
        }
    )


async def tasks(playground: Playground, _: Request, __: str) -> Any:
    catalog = playground.catalog
    return {
        "datasets": catalog.datasets,
        "problems": catalog.problems,
        "tasks": [asdict(t) for t in catalog.summaries()],
    }


async def task(playground: Playground, request: Request, _: str) -> Any:
    query = request.query_params
    return playground.catalog.detail(query.get("dataset", ""), query.get("task", ""))


async def file(playground: Playground, request: Request, _: str) -> Any:
    query = request.query_params
    return {
        "text": playground.catalog.file_text(
            query.get("dataset", ""), query.get("task", ""), query.get("path", "")
        )
    }


async def setup(playground: Playground, request: Request, _: str) -> Any:
    served = _served(request)
    if served.setup is None:  # gathered once, on first ask
        served.setup = await playground.setup()
    return served.setup


async def runs(playground: Playground, request: Request, visitor: str) -> Any:
    launcher = playground.launcher
    if request.method == "POST":
        try:
            form = RunForm.model_validate_json(await request.body())
        except ValidationError as exc:
            raise PlaygroundRefusal(_first_problem(exc.errors()), status=400) from exc
        return (await launcher.start(visitor, form)).view()
    return {
        "runs": [run.view() for run in launcher.board.visible(visitor)],
        "server_engine": launcher.llm_url is not None,
        "writes_datasets": launcher.datasets.root is not None,
    }


async def run(playground: Playground, request: Request, visitor: str) -> Any:
    return playground.launcher.board.get(visitor, request.query_params.get("id", "")).view()


async def calls(playground: Playground, request: Request, visitor: str) -> Any:
    # Polled with a cursor rather than streamed (SSE): each poll is one short answer
    # through the same key, visitor and scrub checks as every other route.
    query = request.query_params
    cursor = parse_count(query.get("after", "0"), _MAX_CURSOR)
    if cursor is None:
        raise PlaygroundRefusal(
            f"after: a count of calls already read, in at most {COUNT_DIGITS} ASCII digits",
            status=400,
        )
    found_run, found, after = playground.launcher.board.calls(visitor, query.get("id", ""), cursor)
    return {"run": found_run.view(), "calls": found, "next": after, "more": after < found_run.calls}


# Every route, in one table: the page at each view's own URL, the login, and the API.
ROUTES = (
    *(
        Route(path, page)
        for path in (
            "/",
            "/tasks",
            "/runs",
            "/setup",
            "/task/{rest:path}",
            "/run/{id}",
            "/compare/{ids}",
        )
    ),
    Route("/login", login, methods=["POST"]),
    Route("/api/session", session),
    Route("/api/tasks", _Api(tasks).endpoint),
    Route("/api/task", _Api(task).endpoint),
    Route("/api/file", _Api(file).endpoint),
    Route("/api/setup", _Api(setup).endpoint),
    Route("/api/runs", _Api(runs).endpoint, methods=["GET", "POST"]),
    Route("/api/run", _Api(run).endpoint),
    Route("/api/calls", _Api(calls).endpoint),
)


def build_playground_app(
    playground: Playground,
    *,
    llm_url: str | None = None,
    allowed_hosts: Iterable[str] = LOOPBACK_NAMES,
) -> HostGuard:
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await playground.launcher.aclose()

    app = Starlette(routes=list(ROUTES), lifespan=lifespan, exception_handlers={404: not_found})
    app.state.served = _Served(playground, Scrub(key=playground.access.key, llm_url=llm_url))
    return HostGuard(app, allowed_hosts)


_NOT_FOUND = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    '<title>Not here: harbor_ray playground</title></head><body style="font-family: '
    'system-ui, sans-serif; margin: 1em"><h1>harbor_ray playground: no page here</h1>'
    '<p>The playground\'s pages are <a href="/">its tasks</a>, a task at '
    "<code>/task/DATASET/NAME</code>, a run at <code>/run/ID</code> and runs side by "
    "side at <code>/compare/ID,ID</code>.</p></body></html>\n"
)


def _first_problem(errors: Iterable[Mapping[str, Any]]) -> str:
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ())) or "body"
        return f"{where}: {error.get('msg', 'invalid')}"
    return "invalid form"
