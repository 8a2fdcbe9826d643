"""`/j/JOB/PORT/...`: the authenticated way into an interactive job's ports.

It is served on its own listener (`corral up --proxy-port`), so the jobs' pages have an origin
of their own: their scripts cannot read the web page's storage (its token) or call the API
with the viewer's credentials. Nothing but `/j/...` is answered there. It applies the API's Host
check (httpguard.py), but not its 1 MiB body cap (a notebook upload is bigger); corral's own
answers carry the API's strict security headers, and relayed ones nosniff and SAMEORIGIN
framing unless the app sets its own (Jupyter sends its own Content-Security-Policy).

HTTP and WebSocket are relayed to the job's port on its node; a `tcp` port (sshd) is reached
by a WebSocket that carries the raw byte stream (`corral ssh` is its ProxyCommand). The rules
are the API's: the owner of the job and admins only; no credentials is 401, another user's
job 403.

Credentials: the API's bearer token in the Authorization header (scripts), or a cookie
(browsers). A browser gets its cookie on the proxy's origin by opening the endpoint's URL with
the token in the fragment (`#token=...`, never sent to any server): the 401 page's script
posts it once, in a header, to `/j/JOB/_login`, which sets a random session cookie scoped to
`/j/JOB/` (HttpOnly, SameSite=Strict). Cookie-authenticated requests that could change something
(anything but GET/HEAD/OPTIONS, and every WebSocket) must come from this origin (Origin or
Referer), so another site cannot ride on the cookie. Our credentials never reach the job: the
Authorization header and our cookie are taken out, and the job's own token is put in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from collections.abc import Iterable
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import httpx

from corral.server.auth import Principal
from corral.server.controlplane import ControlPlane, Refused
from corral.server.httpguard import host_allowed, security_headers
from corral.server.interactive import Interactive

log = logging.getLogger("corral.server")

COOKIE = "corral_proxy"
JOB_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
SESSION_TTL = 7 * 86400.0
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"host",
    b"content-length",
}
WS_DROP = HOP_BY_HOP | {
    b"sec-websocket-key",
    b"sec-websocket-version",
    b"sec-websocket-extensions",
    b"sec-websocket-protocol",
    b"origin",
}

LOGIN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>corral</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body { font: 14px system-ui, sans-serif; margin: 2em }</style></head><body>
<p id="msg">Signing in to this job through corral&hellip;</p>
<noscript>This page needs JavaScript to sign in: it passes your corral token to corral in a
header, never in the address. Or use the API with <code>Authorization: Bearer TOKEN</code>.
</noscript>
<script>
(async () => {
  const msg = document.getElementById("msg");
  const m = location.hash.match(/^#token=(.+)$/);
  history.replaceState(null, "", location.pathname + location.search);
  if (!m) {
    msg.textContent = "Open this link from corral's web page (it adds your token).";
    return;
  }
  const login = location.pathname.split("/").slice(0, 3).join("/") + "/_login";  // /j/JOB
  const headers = {Authorization: "Bearer " + decodeURIComponent(m[1])};
  const r = await fetch(login, {method: "POST", headers});
  if (r.ok) { location.replace(location.pathname + location.search); return; }
  msg.textContent = "corral refused: " + ((await r.json()).detail || r.status);
})();
</script></body></html>"""
# corral's own answers: the login page may run its inline script only, the rest nothing.
OWN_HEADERS = security_headers(LOGIN_PAGE)
# Added to a relayed response that lacks them: no MIME sniffing; framed by its own origin only.
RELAY_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"SAMEORIGIN"))


Scope = dict[str, Any]
Headers = dict[bytes, bytes]
Target = tuple[str, int, str]  # host, port, protocol (Interactive.target)


class Sessions:
    """Browser sessions for the proxy: cookie value -> (token, job, expiry). A session dies
    with its token (checked on every use, in memory, as for a bearer token) and after
    SESSION_TTL; kept in memory only, so a restart of the control plane asks the browser to
    sign in again (one click from the web page)."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[str, str, float]] = {}

    def new(self, token: str, job_id: str) -> str:
        now = time.time()
        self._by_id = {k: v for k, v in self._by_id.items() if v[2] > now}
        sid = secrets.token_urlsafe(32)
        self._by_id[sid] = (token, job_id, now + SESSION_TTL)
        return sid

    def principal(self, cp: ControlPlane, sid: str, job_id: str) -> Principal | None:
        found = self._by_id.get(sid)
        if found is None or found[1] != job_id or found[2] < time.time():
            return None
        return cp.tokens.check(found[0])


def _headers(scope: dict[str, Any]) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope["headers"]}


def _cookie(headers: dict[bytes, bytes]) -> str | None:
    raw = headers.get(b"cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    with contextlib.suppress(Exception):
        jar.load(raw.decode("latin-1"))
    morsel = jar.get(COOKIE)
    return morsel.value if morsel else None


def _strip_cookie(raw: bytes) -> bytes:
    kept = [c for c in raw.split(b";") if not c.strip().startswith(COOKIE.encode() + b"=")]
    return b";".join(kept).strip()


def _same_origin(headers: dict[bytes, bytes]) -> bool:
    host = headers.get(b"host", b"").decode("latin-1")
    source = headers.get(b"origin") or headers.get(b"referer")
    if not source or not host:
        return False
    return urlsplit(source.decode("latin-1")).netloc == host


class JobProxy:
    """ASGI app for the proxy's own listener: `/j/...` only."""

    def __init__(self, cp: ControlPlane, interactive: Interactive, allowed_hosts: Iterable[str]):
        self.cp = cp
        self.interactive = interactive
        self.hosts = frozenset(h.lower() for h in allowed_hosts)
        self.sessions = Sessions()
        self._http: httpx.AsyncClient | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        headers = _headers(scope)
        if not host_allowed(headers.get(b"host", b"").decode("latin-1"), self.hosts):
            # The API's rule (httpguard): a DNS-rebinding page must not reach a job either.
            await self._refuse(scope, send, 400, "Host is not this server (corral up --allow-host)")
            return
        parts = scope["path"].split("/", 4)  # "", "j", job, port, rest
        if parts[1:2] != ["j"]:
            await self._refuse(scope, send, 404, "only interactive jobs, /j/JOB/PORT/, are here")
            return
        if len(parts) < 4 or not parts[2] or not parts[3]:
            await self._refuse(scope, send, 404, "expected /j/JOB/PORT/")
            return
        job_id, port_name = parts[2], parts[3]
        if not JOB_ID.fullmatch(job_id):
            await self._refuse(scope, send, 404, "no such job")
            return
        try:
            if port_name == "_login" and scope["type"] == "http":
                await self._login(scope, send, headers, job_id)
                return
            if len(parts) == 4:  # /j/JOB/PORT without the slash: relative links need it
                await _redirect(send, scope["path"] + "/" + _query(scope))
                return
            row = self._authorize(scope, headers, job_id)
            target = self.interactive.target(row.id, port_name)
            if target is None or row.state != "running":
                raise Refused(404, f"job {row.id} has no port {port_name!r} open (is it running?)")
        except Refused as err:
            if err.status == 401 and _wants_html(scope, headers):
                await _login_page(send)
            else:
                await self._refuse(scope, send, err.status, err.message)
            return
        self.interactive.mark(row.id)
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send, row.id, target, headers)
        elif target[2] == "tcp":
            await self._refuse(scope, send, 400, f"port {port_name} is a TCP port: use a WebSocket")
        else:
            await self._http_relay(scope, receive, send, row.id, target, headers)

    # -- authentication --------------------------------------------------------------------

    def _authorize(self, scope: dict[str, Any], headers: dict[bytes, bytes], job_id: str) -> Any:
        cp = self.cp
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, token = auth.partition(" ")
        who: Principal | None = None
        if scheme.lower() == "bearer" and token.strip():
            who = cp.tokens.check(token.strip())
            if who is None:
                raise Refused(401, "invalid token")
        else:
            sid = _cookie(headers)
            if sid:
                who = self.sessions.principal(cp, sid, job_id)
            if who is None:
                raise Refused(401, "sign in: a bearer token, or open the job's link from corral")
            unsafe = scope["type"] == "websocket" or scope["method"] not in SAFE_METHODS
            if unsafe and not _same_origin(headers):
                raise Refused(403, "cross-site request refused (Origin is not this server)")
        row = cp.live.get(job_id) or cp.store.job(job_id)
        if row is None:
            raise Refused(404, f"no job {job_id}")
        cp.check_owner(who, row)
        return row

    async def _login(
        self, scope: dict[str, Any], send: Any, headers: dict[bytes, bytes], job_id: str
    ) -> None:
        if scope["method"] != "POST":
            raise Refused(405, "POST your token in the Authorization header")
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(401, "missing bearer token")
        self._authorize(scope, headers, job_id)
        sid = self.sessions.new(token.strip(), job_id)
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = (
            f"{COOKIE}={sid}; Path=/j/{job_id}/; HttpOnly; SameSite=Strict"
            f"; Max-Age={int(SESSION_TTL)}{secure}"
        )
        await _respond(send, 204, b"", [(b"set-cookie", cookie.encode())])

    async def _refuse(self, scope: dict[str, Any], send: Any, status: int, message: str) -> None:
        if scope["type"] == "websocket":
            # Before accepting: the server answers the handshake with this status.
            await send({"type": "websocket.close", "code": 4000 + status, "reason": message})
            return
        from corral.server import fastjson

        body = fastjson.dumps_bytes({"detail": message})
        await _respond(send, status, body, [(b"content-type", b"application/json")])

    # -- relaying --------------------------------------------------------------------------

    def _forward_headers(self, job_id: str, headers: dict[bytes, bytes], drop: set[bytes]):
        out = []
        for key, value in headers.items():
            if key in drop or key == b"authorization":
                continue
            if key == b"cookie":
                value = _strip_cookie(value)
                if not value:
                    continue
            out.append((key.decode("latin-1"), value.decode("latin-1")))
        out.append(("authorization", f"token {self.interactive.job_token(job_id)}"))
        return out

    async def _http_relay(
        self, scope: Scope, receive: Any, send: Any, job_id: str, target: Target, headers: Headers
    ) -> None:
        host, port, _ = target
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0))

        async def body():
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        path = scope.get("raw_path") or scope["path"].encode("latin-1")
        url = f"http://{host}:{port}{path.decode('latin-1')}"
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        request = self._http.build_request(
            scope["method"],
            url,
            headers=self._forward_headers(job_id, headers, HOP_BY_HOP),
            content=body() if scope["method"] not in ("GET", "HEAD") else None,
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as err:
            await self._refuse(scope, send, 502, f"job {job_id} did not answer: {err}")
            return
        try:
            out = [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in response.headers.multi_items()
                if k.lower().encode() not in HOP_BY_HOP - {b"content-length"}
            ]
            out += [h for h in RELAY_HEADERS if h[0].decode() not in response.headers]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": out}
            )
            async for chunk in response.aiter_raw():
                self.interactive.mark(job_id)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def _websocket(
        self, scope: Scope, receive: Any, send: Any, job_id: str, target: Target, headers: Headers
    ) -> None:
        host, port, protocol = target
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        if protocol == "tcp":
            await self._tunnel(send, receive, job_id, host, port)
            return
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        url = f"ws://{host}:{port}{scope['path']}"
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        try:
            backend = await connect(
                url,
                additional_headers=self._forward_headers(job_id, headers, WS_DROP),
                subprotocols=scope.get("subprotocols") or None,
                max_size=None,
                compression=None,
            )
        except (OSError, WebSocketException) as err:
            await send({"type": "websocket.close", "code": 1011, "reason": str(err)[:100]})
            return
        await send({"type": "websocket.accept", "subprotocol": backend.subprotocol})

        async def client_to_job() -> None:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return
                self.interactive.mark(job_id)
                data = message.get("bytes")
                await backend.send(data if data is not None else message.get("text", ""))

        async def job_to_client() -> None:
            async for data in backend:
                self.interactive.mark(job_id)
                key = "bytes" if isinstance(data, bytes) else "text"
                await send({"type": "websocket.send", key: data})

        await _first_done(client_to_job(), job_to_client())
        await backend.close()
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": 1000})

    async def _tunnel(self, send: Any, receive: Any, job_id: str, host: str, port: int) -> None:
        """A byte stream to a TCP port, carried in binary WebSocket messages."""
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as err:
            await send({"type": "websocket.close", "code": 1011, "reason": str(err)[:100]})
            return
        await send({"type": "websocket.accept"})
        self.interactive.stream(job_id, +1)

        async def client_to_job() -> None:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return
                writer.write(message.get("bytes") or message.get("text", "").encode())
                await writer.drain()

        async def job_to_client() -> None:
            while data := await reader.read(65536):
                await send({"type": "websocket.send", "bytes": data})

        try:
            await _first_done(client_to_job(), job_to_client())
        finally:
            self.interactive.stream(job_id, -1)
            writer.close()
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": 1000})


async def _first_done(*coros: Any) -> None:
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _query(scope: dict[str, Any]) -> str:
    q = scope.get("query_string") or b""
    return "?" + q.decode("latin-1") if q else ""


def _wants_html(scope: dict[str, Any], headers: dict[bytes, bytes]) -> bool:
    return scope["type"] == "http" and b"text/html" in headers.get(b"accept", b"")


async def _respond(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    if not any(k == b"content-security-policy" for k, _ in headers):
        headers += OWN_HEADERS[""]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Any, location: str) -> None:
    await _respond(send, 307, b"", [(b"location", location.encode("latin-1"))])


async def _login_page(send: Any) -> None:
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"cache-control", b"no-store"),
        (b"referrer-policy", b"no-referrer"),
        *OWN_HEADERS["/"],
    ]
    await _respond(send, 401, LOGIN_PAGE.encode(), headers)
