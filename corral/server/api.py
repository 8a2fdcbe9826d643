"""The HTTP API (FastAPI; OpenAPI at /docs). Pydantic lives only here, at the edge.

Every error is a 4xx with {"detail": "<one line saying what is wrong>"}; nothing is written
unless the whole request is accepted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from corral.formats.jobspec import MAX_RESTARTS, parse_jobspec
from corral.formats.types import FormatError
from corral.server import fastjson
from corral.server.auth import Principal, digest, token_id
from corral.server.controlplane import ControlPlane, Refused, Submission
from corral.server.httpguard import MAX_BODY_BYTES, HttpGuard
from corral.server.store import TokenRow
from corral.server.views import Views
from corral.server.web import PAGE

log = logging.getLogger("corral.server")

JobState = Literal["pending", "running", "succeeded", "failed", "cancelled"]
_PLACEHOLDER_NAME = "unnamed"  # lets a spec without a name parse; the job id replaces it

# Runs on any pool: the project and accelerator default to the user's and the pool's own.
SPEC_EXAMPLE = {
    "name": "llama-sft",
    "priority": 0,
    "command": "python train.py --lr 3e-4",
    "env": {"WANDB_MODE": "offline"},
    "resources": {"per_worker": 1, "workers": 1},
    "max_restarts": 1,
    "max_runtime": "72h",
}


_SPEC_SCHEMA = {
    "type": "object",
    "required": ["command"],
    "properties": {
        "name": {
            "type": "string",
            "maxLength": 63,
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            "description": "DNS-1123 label; unique among live jobs; `j` and digits is reserved"
            " for automatic ids",
        },
        "project": {"type": "string"},
        "priority": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        "command": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "env": {
            "type": "object",
            "additionalProperties": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        },
        "resources": {
            "type": "object",
            "properties": {
                "accelerator": {"type": "string"},
                "per_worker": {"type": "integer", "minimum": 1},
                "workers": {"type": "integer", "minimum": 1},
                "slices": {"type": "integer", "minimum": 1},
                "exclusive": {"type": "boolean"},
            },
        },
        "max_restarts": {"type": "integer", "minimum": 0, "maximum": MAX_RESTARTS},
        "preemptible": {"type": "boolean"},
        "max_runtime": {"oneOf": [{"type": "number"}, {"type": "string"}]},
        "kind": {"enum": ["batch", "interactive"]},
        "workdir": {"type": "string", "description": "absolute path on the node"},
        "template": {"type": "string", "description": "interactive: jupyter, tensorboard, ..."},
        "idle_timeout": {"oneOf": [{"type": "number"}, {"type": "string"}]},
        "crypt_proxy": {
            "type": "object",
            "description": "an encrypting storage gateway beside the workers (docs/crypt.md)",
            "required": ["backend"],
            "properties": {"backend": {"type": "string"}, "keyring": {"type": "string"}},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
_SUBMIT_DOC = {
    "security": [{"HTTPBearer": []}],
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _SPEC_SCHEMA, "example": SPEC_EXAMPLE}},
    },
}

_TIME_OR_NULL = {"type": ["number", "null"]}
# A job as answers show it, in part (they carry more fields).
_JOB_SCHEMA = {
    "type": "object",
    "required": ["id", "name", "project", "user", "state", "predicted_start", "predicted_at"],
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "project": {"type": "string"},
        "user": {"type": "string"},
        "state": {"enum": ["pending", "running", "succeeded", "failed", "cancelled"]},
        "submitted_at": {"type": "number", "description": "Unix time"},
        "started_at": _TIME_OR_NULL,
        "finished_at": _TIME_OR_NULL,
        "predicted_start": _TIME_OR_NULL
        | {
            "description": "a pending job's predicted start (Unix time), from a replay of the"
            " policy with each job running its whole max_runtime and no new arrivals; null"
            " where it is not known (it waits for a job without a max_runtime, or is beyond what"
            " the forecast reached) and for jobs not pending (docs/scheduling.md)"
        },
        "predicted_at": _TIME_OR_NULL
        | {"description": "when the forecast behind predicted_start was made (pending jobs)"},
    },
}
# The answers that are jobs: (path, method) -> one job or a list of them.
_JOB_ANSWERS = {
    ("/v1/jobs", "get"): True,
    ("/v1/queue", "get"): True,
    ("/v1/jobs/{job}", "get"): False,
    ("/v1/jobs/{job}/cancel", "post"): False,
}


class TokenRequest(BaseModel):
    # Strict like the job spec: an unknown key or "admin": "yes" is a mistake, not a default.
    model_config = ConfigDict(extra="forbid")

    user: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.@-]+$")
    admin: StrictBool = False


class TokenCreated(BaseModel):
    id: str
    user: str
    admin: bool
    token: str


class TokenInfo(BaseModel):
    id: str
    user: str
    admin: bool
    created_at: float


def _token_info(t: TokenRow) -> TokenInfo:
    return TokenInfo(id=token_id(t.hash), user=t.user, admin=t.admin, created_at=t.created_at)


class Refusal(BaseModel):
    detail: str


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Refusal} for code in (401, 403, 404, 409, 422)
}
# Answered by HttpGuard for any path: a Host that is not this server (400), a body over
# MAX_BODY_BYTES (413).
_GUARD_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": Refusal, "description": "Host header not accepted, or malformed request"},
    413: {"model": Refusal, "description": f"body larger than {MAX_BODY_BYTES} bytes"},
}


def _one_line(err: RequestValidationError) -> str:
    first = err.errors()[0] if err.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path"))
    msg = str(first.get("msg", "invalid"))
    given = first.get("input")
    if isinstance(given, str | int | float) and not isinstance(given, bool):
        msg += f", got {str(given)[:80]!r}"
    return f"{where}: {msg}" if where else msg


_bearer = HTTPBearer(auto_error=False, description="a token from `corral token create`")


def _authenticate(cp: ControlPlane, header: str | None) -> Principal:
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Refused(401, "missing bearer token (set CORRAL_TOKEN or CORRAL_TOKEN_FILE)")
    found = cp.tokens.check(token.strip())
    if found is None:
        raise Refused(401, "invalid token")
    return found


async def _who(  # async: pure CPU, so no hop through the thread pool on every request
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],  # for /docs
) -> Principal:
    return _authenticate(request.app.state.cp, request.headers.get("authorization"))


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = fastjson.loads(body)
        if _has_huge_float(data):  # orjson reads an integer beyond 64 bits as a float
            data = json.loads(body)
    except ValueError as err:
        raise Refused(422, f"body: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise Refused(422, "body: expected a JSON object (a job spec)")
    return data


def _has_huge_float(data: Any) -> bool:
    if isinstance(data, float):
        return abs(data) >= 2.0**63
    if isinstance(data, dict):
        return any(_has_huge_float(v) for v in data.values())
    if isinstance(data, list):
        return any(_has_huge_float(v) for v in data)
    return False


# Module level: FastAPI resolves these (string) annotations against the module's globals.
User = Annotated[Principal, Depends(_who)]


def _default_resources(data: dict[str, Any], types: list[str]) -> None:
    """Fill what a one-type pool makes obvious: the accelerator, and 1 per worker."""
    res = data.get("resources", {})
    if not isinstance(res, dict):
        return  # the parser says what is wrong with it
    res = dict(res)
    if "accelerator" not in res and len(types) == 1:
        res["accelerator"] = types[0]
    res.setdefault("per_worker", 1)
    data["resources"] = res


MAX_INT = 2**63 - 1  # the largest integer SQLite (and a file offset) holds


def _from_jobset(data: dict[str, Any], projects: list[str]) -> dict[str, Any]:
    """The job spec a JobSet stands for (fields corral ignores are dropped without a word here:
    `corral submit -f` prints a warning for each)."""
    from corral.formats.jobset import jobset_to_spec

    try:
        return jobset_to_spec(data, "JobSet", projects)[0]
    except FormatError as err:
        raise Refused(422, str(err)) from None


class Submitter:
    """The submit path: authenticate, parse, then store with group commit.

    Submissions that reach the event loop together are stored in one SQLite transaction
    (`ControlPlane.submit_many`) and answered only after it committed, so every 2xx still
    means the job is durable, while a burst from several clients costs one commit, not one
    each. The first submission of a batch schedules the flush with `call_soon`: it runs after
    every request task already ready on the loop has parsed its spec and joined the batch.
    """

    def __init__(self, cp: ControlPlane, views: Views):
        self._cp = cp
        self._views = views
        self._batch: list[tuple[Submission, asyncio.Future[bytes]]] = []

    async def handle(self, authorization: str | None, body: bytes) -> tuple[int, bytes]:
        """(HTTP status, JSON body) for one submission."""
        try:
            item = self._prepare(authorization, body)
            loop = asyncio.get_running_loop()
            done: asyncio.Future[bytes] = loop.create_future()
            if not self._batch:
                loop.call_soon(self._flush)
            self._batch.append((item, done))
            return 201, await done
        except Refused as err:
            return err.status, _detail(err.message)

    def _prepare(self, authorization: str | None, body: bytes) -> Submission:
        cp = self._cp
        user = _authenticate(cp, authorization)
        data = _json_object(body)
        if "apiVersion" in data:  # a JobSet manifest, as `corral submit -f` would translate it
            data = _from_jobset(data, cp.quota.projects_of(user.user))
        auto_name = "name" not in data
        if auto_name:
            data["name"] = _PLACEHOLDER_NAME
        if "project" not in data:
            data["project"] = cp.default_project(user)
        _default_resources(data, cp.inventory.types)
        try:
            parsed = parse_jobspec(data, "job spec")
            if cp.interactive is not None:
                parsed = cp.interactive.expand(parsed, cp.quota)
        except (FormatError, ValueError) as err:
            raise Refused(422, str(err)) from None
        if not parsed.command:  # the file format allows none (simulated jobs); a live job not
            raise Refused(422, "command: required; a string (run by /bin/sh -c) or an argv list")
        return user, parsed, auto_name

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        try:
            results = self._cp.submit_many([item for item, _ in batch])
            with self._cp.locked():
                # Rendered here, as bytes: FastAPI's encoder would walk the dict again.
                answers = [
                    err if isinstance(err := r, Refused) else _json(self._views.job_summary(r))
                    for r in results
                ]
        except Exception as err:  # the store failed: every waiter gets the error (a 500)
            for _, done in batch:
                if not done.done():
                    done.set_exception(err)
            return
        for (_, done), answer in zip(batch, answers, strict=True):
            if done.done():  # the client went away
                continue
            if isinstance(answer, Refused):
                done.set_exception(answer)
            else:
                done.set_result(answer)


def _json(data: Any) -> bytes:
    return fastjson.dumps_bytes(data)


def _detail(message: str) -> bytes:
    return _json({"detail": message})


class SubmitFastPath:
    """ASGI wrapper that serves `POST /v1/jobs` straight from the Submitter and passes
    everything else to the FastAPI app. Submission is the one call made thousands of times a
    second; FastAPI's routing, middleware and exception layers cost more than storing the job
    (bench/bench_api.py). Same answers as the documented route: 201 with the job summary, or a
    4xx with {"detail": "..."}."""

    def __init__(self, app: FastAPI):
        self.app = app
        self.submitter: Submitter = app.state.submitter

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/jobs" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        # HttpGuard in front has read the whole body, within its size and time limits.
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        try:
            status, body = await self.submitter.handle(authorization, message.get("body", b""))
        except Exception:  # a bug or a store failure: logged; the client gets a 500
            log.exception("submission failed")
            status, body = 500, _detail("internal error; see the corral up log")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def create_asgi(cp: ControlPlane, allowed_hosts: Sequence[str] = ()) -> HttpGuard:
    """The app `corral up` serves: the FastAPI app with the submit fast path in front, and
    the HTTP guard (Host check, body limits, security headers) in front of both."""
    return HttpGuard(SubmitFastPath(create_app(cp)), PAGE, allowed_hosts)


def create_app(cp: ControlPlane) -> FastAPI:
    app = FastAPI(
        title="corral",
        version="0.1.0",
        description="Fair-share gang scheduler: submit, watch and cancel jobs on a GPU pool.",
        responses=_GUARD_ERRORS,
        docs_url=None,  # served by webui.py from the package's own Swagger UI files
        redoc_url=None,
    )
    views = Views(cp)
    submitter = Submitter(cp, views)
    app.state.cp = cp
    app.state.submitter = submitter

    @app.exception_handler(Refused)
    def _refused(_: Request, err: Refused) -> JSONResponse:
        return JSONResponse({"detail": err.message}, status_code=err.status)

    @app.exception_handler(RequestValidationError)
    def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _one_line(err)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        headers = dict(err.headers or {})
        if err.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(app, request.scope))
        return JSONResponse({"detail": err.detail}, status_code=err.status_code, headers=headers)

    # Handlers that only take the control plane's lock briefly are async: they run on the
    # event loop, skipping a thread-pool hop per request. Handlers that read many rows or
    # files stay sync (FastAPI runs them in its thread pool) so they never stall the loop.

    @app.get("/j/{rest:path}", include_in_schema=False)
    async def moved_to_proxy(request: Request) -> Response:
        """Interactive jobs are served on the proxy's own origin (docs/interactive.md), never
        beside the web page; an old link is sent there."""
        if cp.interactive is None:
            raise Refused(404, "no interactive jobs here")
        query = f"?{request.url.query}" if request.url.query else ""
        location = cp.interactive.proxy_url + request.url.path + query
        return Response(status_code=307, headers={"Location": location})

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, Any]:
        return {"ok": True}

    @app.get("/metrics", tags=["meta"], response_class=Response)
    def metrics() -> Response:
        return Response(cp.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/", include_in_schema=False, response_class=HTMLResponse)
    def home() -> str:
        return PAGE

    @app.get("/v1/whoami", tags=["meta"])
    async def whoami(user: User) -> dict[str, Any]:
        return {
            "user": user.user,
            "admin": cp.is_admin(user),
            "projects": cp.quota.projects_of(user.user),
        }

    @app.post(
        "/v1/jobs",
        status_code=201,
        tags=["jobs"],
        responses=_ERRORS,
        openapi_extra=_SUBMIT_DOC,
        description="Submit a job spec (DESIGN §2). `name` defaults to the job id, `project` to "
        "your only project, `resources.accelerator` to the pool's only type, `per_worker` to 1.",
    )
    async def submit(request: Request) -> Response:
        # Served by SubmitFastPath in `corral up`; this route documents it in OpenAPI and
        # serves it when the app is mounted without the fast path.
        status, body = await submitter.handle(
            request.headers.get("authorization"), await request.body()
        )
        return Response(body, status_code=status, media_type="application/json")

    @app.get("/v1/jobs", tags=["jobs"], responses=_ERRORS)
    def list_jobs(
        user: User,
        state: Annotated[list[JobState] | None, Query(description="filter; repeatable")] = None,
        all: Annotated[bool, Query(description="every user's jobs (admins)")] = False,  # noqa: A002
        limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
        project: Annotated[list[str] | None, Query(description="filter; repeatable")] = None,
        owner: Annotated[
            str | None, Query(alias="user", description="this user's jobs (others': admins)")
        ] = None,
        since: Annotated[
            float | None, Query(ge=0, le=1e11, description="submitted at or after (Unix time)")
        ] = None,
    ) -> list[dict[str, Any]]:
        return views.jobs(user, state, all, limit, user=owner, projects=project, since=since)

    @app.get("/v1/jobs/{job}", tags=["jobs"], responses=_ERRORS)
    def show(user: User, job: str) -> dict[str, Any]:
        return views.job_detail(views.find(user, job))

    @app.post("/v1/jobs/{job}/cancel", tags=["jobs"], responses=_ERRORS)
    async def cancel(user: User, job: str) -> dict[str, Any]:
        row = cp.cancel(user, views.find(user, job).id)
        with cp.locked():
            return views.job_summary(row)

    @app.get("/v1/jobs/{job}/events", tags=["jobs"], responses=_ERRORS)
    def events(user: User, job: str) -> list[dict[str, Any]]:
        row = views.find(user, job)
        return [
            {"t": e.t, "event": e.event, "job": e.job, "project": e.project, **e.data}
            for e in cp.store.events(job=row.id)
        ]

    @app.get(
        "/v1/events",
        tags=["admin"],
        responses=_ERRORS,
        description="The event log (DESIGN §2 event objects, plus `seq`), oldest first, "
        "after sequence number `after`: poll with the last seq seen to tail it. Admins only.",
    )
    def all_events(
        user: User,
        after: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[dict[str, Any]]:
        if not cp.is_admin(user):
            raise Refused(403, "only admins may read the whole event log")
        return [
            {"seq": e.seq, "t": e.t, "event": e.event, "job": e.job, "project": e.project} | e.data
            for e in cp.store.events(after=after, limit=limit)
        ]

    @app.get(
        "/v1/jobs/{job}/logs",
        tags=["jobs"],
        responses=_ERRORS,
        response_class=Response,
        description="Raw bytes of one worker's log from `offset`. Headers: X-Corral-Offset "
        "(next offset), X-Corral-Attempt, X-Corral-Done (1: the attempt ended and all was "
        "read), X-Corral-State (the job's state), X-Corral-Latest (the job's latest attempt "
        "so far; absent before the first).",
    )
    def logs(
        user: User,
        job: str,
        worker: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
        attempt: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
        offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
        tail: Annotated[
            int | None, Query(ge=0, le=100_000, description="from the last N lines, not offset")
        ] = None,
    ) -> Response:
        row = views.find(user, job)
        data, nxt, chosen, done, latest = views.logs(row, worker, attempt, offset, tail)
        state = cp.live.get(row.id, row).state
        headers = {
            "X-Corral-Offset": str(nxt),
            "X-Corral-Attempt": str(chosen),
            "X-Corral-Done": "1" if done else "0",
            "X-Corral-State": state,
        }
        if latest is not None:
            headers["X-Corral-Latest"] = str(latest)
        return Response(data, media_type="application/octet-stream", headers=headers)

    @app.get("/v1/queue", tags=["queue"], responses=_ERRORS)
    def queue(user: User, project: str | None = None) -> list[dict[str, Any]]:
        return views.queue(user, project)

    @app.get("/v1/quota", tags=["queue"], responses=_ERRORS)
    def quota(user: User) -> dict[str, Any]:
        return views.quota(user)

    @app.get(
        "/v1/acct",
        tags=["queue"],
        responses=_ERRORS,
        description="Accounting (docs/live.md): per project, user and accelerator type, and per "
        "day or week with `by`, accelerator-hours, jobs submitted and ended, wait (all time "
        "pending: before the first start and after each preemption or restart) and "
        "preemptions in [since, until). Users see their projects; admins all.",
    )
    def acct(
        user: User,
        since: Annotated[float, Query(ge=0, le=1e11, description="Unix time")] = 0.0,
        until: Annotated[float | None, Query(ge=0, le=1e11, description="default: now")] = None,
        by: Annotated[str, Query(description="total, day or week")] = "total",
        project: Annotated[list[str] | None, Query(description="filter; repeatable")] = None,
        owner: Annotated[str | None, Query(alias="user", description="this user's jobs")] = None,
    ) -> list[dict[str, Any]]:
        from corral.server.acct import PERIODS, account

        if by not in PERIODS:
            raise Refused(422, f"by: {by!r} is not one of {', '.join(PERIODS)}")
        allowed = views.visible_projects(user)
        denied = sorted(set(project or ()) - set(allowed)) if allowed is not None else []
        if denied:
            raise Refused(403, f"user {user.user} is not a member of project {denied[0]!r}")
        projects = project if project is not None else allowed
        until = time.time() if until is None else until
        rows = account(cp.store, since, until, by, projects, owner)
        return [r.as_dict() for r in rows]

    @app.get("/v1/nodes", tags=["queue"], responses=_ERRORS)
    def nodes(user: User) -> list[dict[str, Any]]:
        return views.nodes(user)

    @app.post("/v1/tokens", status_code=201, tags=["admin"], responses=_ERRORS)
    def create_token(user: User, req: TokenRequest) -> TokenCreated:
        if not cp.is_admin(user):
            raise Refused(403, "only admins may create tokens")
        token = cp.tokens.create(req.user, req.admin)
        return TokenCreated(id=token_id(digest(token)), user=req.user, admin=req.admin, token=token)

    @app.get("/v1/tokens", tags=["admin"], responses=_ERRORS)
    def list_tokens(user: User) -> list[TokenInfo]:
        if not cp.is_admin(user):
            raise Refused(403, "only admins may list tokens")
        return [_token_info(t) for t in cp.tokens.rows()]

    @app.delete(
        "/v1/tokens/{ref}",
        tags=["admin"],
        responses=_ERRORS,
        description="Revoke a token by its id (`tok-...`, from GET /v1/tokens or at creation), "
        "or every token of a user by the user's name. A revoked token is refused (401) from "
        "the next request on. Refused (409) if no admin token would be left. Admins only.",
    )
    def revoke_token(user: User, ref: str) -> list[TokenInfo]:
        if not cp.is_admin(user):
            raise Refused(403, "only admins may revoke tokens")

        def keeps_admin(left: list[TokenRow]) -> bool:
            return any(cp.is_admin(Principal(t.user, t.admin)) for t in left)

        try:
            gone = cp.tokens.revoke(ref, keeps_admin)
        except LookupError as err:
            raise Refused(404, str(err.args[0])) from None
        except ValueError as err:
            raise Refused(409, str(err)) from None
        return [_token_info(t) for t in gone]

    from corral.server.interactive_api import interactive_routes
    from corral.server.webui import PoolHistory, mount_swagger, web_routes

    app.include_router(interactive_routes(cp))
    history = PoolHistory(cp)
    app.router.add_event_handler("startup", history.start)
    app.router.add_event_handler("shutdown", history.stop)
    app.include_router(web_routes(cp, history))
    mount_swagger(app)
    app.openapi = lambda: _openapi_as_served(app)  # type: ignore[method-assign]
    return app


def _openapi_as_served(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, corrected to what the server answers: every error body is
    {"detail": "<one line>"} (FastAPI documents its own 422 list), and every operation that
    takes a token says it may answer 401."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        refusal = {"application/json": {"schema": {"$ref": "#/components/schemas/Refusal"}}}
        for item in schema["paths"].values():
            for op in item.values():
                responses = op.setdefault("responses", {})
                if op.get("security"):
                    responses.setdefault("401", {"description": "no token, or not a valid one"})
                for code, response in responses.items():
                    if code.startswith("4"):
                        response["content"] = refusal
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        schemas["Job"] = _JOB_SCHEMA
        job = {"$ref": "#/components/schemas/Job"}
        for (path, method), many in _JOB_ANSWERS.items():
            answer = schema["paths"][path][method]["responses"]["200"]
            answer["content"] = {
                "application/json": {"schema": {"type": "array", "items": job} if many else job}
            }
        app.openapi_schema = schema
    return app.openapi_schema


def _allowed_methods(app: FastAPI, scope: dict[str, Any]) -> list[str]:
    """Every method some route serves at this path (Starlette's 405 names only one route's)."""
    methods: set[str] = set()
    for route in app.routes:
        if isinstance(route, APIRoute | Route) and route.path_regex.match(scope["path"]):
            methods |= route.methods or set()
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)
