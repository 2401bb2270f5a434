"""The admin routes: opening, listing, exporting and deleting sessions, over the
`AdminStore` that holds them, behind the admin key when the app has one.

Only an app that holds its sessions has them; a cluster replica, whose sessions their
owner actors open and export, does not.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from harbor_ray.capture.core.auxiliary import MainLoop
from harbor_ray.capture.core.sampling import INT64_MAX, Sampling
from harbor_ray.capture.core.session_keys import extract_key
from harbor_ray.capture.proxy.fast_json import JSONResponse
from harbor_ray.capture.proxy.refusals import NOTHING, _ClientGone, _HttpError
from harbor_ray.capture.proxy.request_body import read_body
from harbor_ray.capture.proxy.session import AdminStore

if TYPE_CHECKING:
    from harbor_ray.capture.proxy.settings import CaptureSettings


class SessionRequest(BaseModel):
    """The body of `POST /sessions`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    budget: int | None = Field(
        None, ge=0, le=INT64_MAX, description="Model calls allowed; None: no limit."
    )
    sampling: Sampling | None = Field(None, description="Imposed on every call.")
    main_model: str | None = Field(
        None,
        max_length=1024,
        description="The model name the agent's main loop asks for: calls asking for "
        "another are marked auxiliary (side calls).",
    )
    agent: str | None = Field(
        None, max_length=1024, description="The agent's Harbor name, for its own side-call rules."
    )


def is_admin_path(path: str) -> bool:
    return path == "/sessions" or path.startswith("/sessions/")


class AdminRoutes:
    """Opening, listing, exporting and deleting sessions, over the store that holds them."""

    def __init__(self, admin: AdminStore, settings: CaptureSettings) -> None:
        self.admin, self.settings = admin, settings

    def routes(self) -> list[Route]:
        return [
            Route("/sessions", self.create_session, methods=["POST"]),
            Route("/sessions", self.list_sessions, methods=["GET"]),
            Route("/sessions/{session_id}/export", self.export_session, methods=["GET"]),
            Route("/sessions/{session_id}", self.delete_session, methods=["DELETE"]),
        ]

    def _denied(self, request: Request) -> Response | None:
        expected = self.settings.admin_key
        if expected is None:
            return None
        given = extract_key(request.headers, request.query_params) or ""
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
        return JSONResponse({"error": "admin key required"}, status_code=401)

    async def create_session(self, request: Request) -> ASGIApp:
        if denied := self._denied(request):
            return denied
        try:
            body = await read_body(request, self.settings.max_body_bytes)
            spec = SessionRequest.model_validate_json(body or b"{}")
        except _ClientGone:
            return NOTHING
        except _HttpError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        except ValidationError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        budget = spec.budget if "budget" in spec.model_fields_set else self.settings.default_budget
        main_loop = (
            MainLoop(model=spec.main_model, agent=spec.agent)
            if spec.main_model or spec.agent
            else None
        )
        info = await self.admin.open_session(
            budget=budget, sampling=spec.sampling, main_loop=main_loop
        )
        return JSONResponse(
            {
                "session_id": info.session_id,
                "key": info.key,
                "budget": info.budget,
                "sampling": info.sampling.model_dump(exclude_none=True) if info.sampling else None,
            },
            status_code=201,
        )

    async def list_sessions(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        return JSONResponse({"sessions": self.admin.session_ids()})

    async def export_session(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        doc = await self.admin.export(request.path_params["session_id"])
        if doc is None:
            return JSONResponse({"error": "no such session"}, status_code=404)
        return JSONResponse(doc)

    async def delete_session(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        if not await self.admin.delete(request.path_params["session_id"]):
            return JSONResponse({"error": "no such session"}, status_code=404)
        return Response(status_code=204)
