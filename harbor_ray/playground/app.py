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
    return "".join([
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        "<title>harbor_ray playground</title><link rel=\"icon\" href=\"data:,\">",
        f"<style>{_asset('playground.css')}</style></head>\n<body>",
        _asset("body.html"), f"<script>{token_view_script()}</script>",
        f"<script>{_asset('playground.js')}</script>",
        "</body></html>\n"])


def build_playground_app(playground: Playground, *, llm_url: str | None = None,
                         allowed_hosts: Iterable[str] = LOOPBACK_NAMES) -> HostGuard:
    access = playground.access
    scrub = Scrub(key=access.key, llm_url=llm_url)
    setup_cache: dict[str, Any] = {}

    def answer(data: Any, status: int = 200) -> Response:
        body = scrub(orjson.dumps(data))
        return Response(body, status, media_type="application/json", headers=_NO_CACHE)

    Handler = Callable[[Request, str], Awaitable[Any]]

    def api(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if not access.admits(request.cookies, request.headers.get("authorization")):
                return answer({"error": "a key is needed: log in"}, 401)
            visitor = access.visitor(request.cookies.get(VISITOR_COOKIE))
            cookie = None
            if visitor is None:
                visitor, cookie = access.new_visitor()
            try:
                response = answer(await handler(request, visitor))
            except PlaygroundRefusal as exc:
                response = answer({"error": str(exc)}, exc.status)
            if cookie is not None:
                response.set_cookie(VISITOR_COOKIE, cookie, httponly=True,
                                    samesite="strict")
            return response
        return endpoint

    async def page(_: Request) -> Response:
        return HTMLResponse(page_html(), headers=_NO_CACHE)

    async def not_found(request: Request, _: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return answer({"error": "no such route"}, 404)
        return HTMLResponse(_NOT_FOUND, 404, headers=_NO_CACHE)

    async def login(request: Request) -> Response:
        offered = str((await request.form()).get("key", ""))
        if not access.key_matches(offered):
            return answer({"error": "that is not the key"}, 401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(KEY_COOKIE, access.key_cookie(), httponly=True,
                            samesite="strict")
        return response

    async def session(request: Request) -> Response:
        return answer({"needs_key": access.key is not None,
                       "admitted": access.admits(request.cookies,
                                                 request.headers.get("authorization"))})

    async def tasks(_: Request, __: str) -> Any:
        catalog = playground.catalog
        return {"datasets": catalog.datasets, "problems": catalog.problems,
                "tasks": [asdict(t) for t in catalog.summaries()]}

    async def task(request: Request, _: str) -> Any:
        query = request.query_params
        return playground.catalog.detail(query.get("dataset", ""), query.get("task", ""))

    async def file(request: Request, _: str) -> Any:
        query = request.query_params
        return {"text": playground.catalog.file_text(
            query.get("dataset", ""), query.get("task", ""), query.get("path", ""))}

    async def setup(_: Request, __: str) -> Any:
        if "data" not in setup_cache:
            setup_cache["data"] = await playground.setup()
        return setup_cache["data"]

    async def runs(request: Request, visitor: str) -> Any:
        launcher = playground.launcher
        if request.method == "POST":
            try:
                form = RunForm.model_validate_json(await request.body())
            except ValidationError as exc:
                raise PlaygroundRefusal(_first_problem(exc.errors()), status=400) from exc
            return (await launcher.start(visitor, form)).view()
        return {"runs": [run.view() for run in launcher.board.visible(visitor)],
                "server_engine": launcher.llm_url is not None,
                "writes_datasets": launcher.datasets.root is not None}

    async def run(request: Request, visitor: str) -> Any:
        return playground.launcher.board.get(visitor, request.query_params.get("id", "")
                                             ).view()

    async def calls(request: Request, visitor: str) -> Any:
        # Polled with a cursor rather than streamed (SSE): each poll is one short
        # answer through the same key, visitor and scrub checks as every other route.
        query = request.query_params
        cursor = parse_count(query.get("after", "0"), _MAX_CURSOR)
        if cursor is None:
            raise PlaygroundRefusal(f"after: a count of calls already read, in at most "
                                    f"{COUNT_DIGITS} ASCII digits", status=400)
        run, found, after = playground.launcher.board.calls(
            visitor, query.get("id", ""), cursor)
        return {"run": run.view(), "calls": found, "next": after,
                "more": after < run.calls}

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await playground.launcher.aclose()

    views = [Route(path, page) for path in (
        "/", "/tasks", "/runs", "/setup", "/task/{rest:path}", "/run/{id}",
        "/compare/{ids}")]
    routes = [*views, Route("/login", login, methods=["POST"]),
              Route("/api/session", session), Route("/api/tasks", api(tasks)),
              Route("/api/task", api(task)), Route("/api/file", api(file)),
              Route("/api/setup", api(setup)),
              Route("/api/runs", api(runs), methods=["GET", "POST"]),
              Route("/api/run", api(run)), Route("/api/calls", api(calls))]
    return HostGuard(Starlette(routes=routes, lifespan=lifespan,
                               exception_handlers={404: not_found}), allowed_hosts)


_NOT_FOUND = (
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    "<title>Not here: harbor_ray playground</title></head><body style=\"font-family: "
    "system-ui, sans-serif; margin: 1em\"><h1>harbor_ray playground: no page here</h1>"
    "<p>The playground's pages are <a href=\"/\">its tasks</a>, a task at "
    "<code>/task/DATASET/NAME</code>, a run at <code>/run/ID</code> and runs side by "
    "side at <code>/compare/ID,ID</code>.</p></body></html>\n")


def _first_problem(errors: Iterable[Mapping[str, Any]]) -> str:
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ())) or "body"
        return f"{where}: {error.get('msg', 'invalid')}"
    return "invalid form"
