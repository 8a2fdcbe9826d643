"""Limits at the HTTP layer, before any request reaches the API or reads a token.

Two pieces, one per layer:

- `GuardedHttpTools`, uvicorn's httptools protocol with what it lacks: a cap on the request
  line and headers (httptools would buffer a 200 MiB header whole), a deadline for them to
  arrive (a client that connects and trickles bytes holds a file descriptor), and a cap on
  open connections (one over it is closed at once, so its descriptor is freed).
- `HttpGuard`, an ASGI wrapper: the Host header must name this server (DNS rebinding), the
  body is capped and must arrive in time (refused from Content-Length before reading a byte),
  and every response carries the security headers a browser honours.

The numbers are in docs/live.md ("Limits").
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = 64 << 10  # request line and headers (nginx: 4 x 8 KiB; Node: 16 KiB)
HEADER_TIMEOUT = 10.0  # seconds from connecting, or from a request's first byte, to its headers
MAX_BODY_BYTES = 1 << 20  # a job spec is a few hundred bytes, a token request less
BODY_TIMEOUT = 30.0  # seconds for the whole body once the headers are in
MAX_CONNECTIONS = 4096  # open at once (fewer if the fd limit is lower); idle ones time out
KEEP_ALIVE = 5.0  # seconds an idle keep-alive connection stays open (uvicorn's default)

_CLOSE = b"content-length: 0\r\nconnection: close\r\n\r\n"


class GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with header size and time limits and a connection cap."""

    max_connections = MAX_CONNECTIONS  # `corral up` lowers it to what its fd limit allows

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_bytes = 0
        self._awaiting_headers = True
        self._header_timer: asyncio.TimerHandle | None = None
        if len(self.connections) > self.max_connections:
            self._refuse(b"503 Service Unavailable")
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._awaiting_headers:
            if self._header_timer is None:
                self._arm_header_timer()
            self._header_bytes += len(data)
        super().data_received(data)
        # Checked after parsing: a chunk that completes the headers may carry body bytes too.
        if self._awaiting_headers and self._header_bytes > MAX_HEADER_BYTES:
            self._refuse(b"431 Request Header Fields Too Large")

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._disarm_header_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_headers = True
        self._header_bytes = 0  # the keep-alive timer covers the idle wait for the next one

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(
            HEADER_TIMEOUT, self._refuse, b"408 Request Timeout"
        )

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _refuse(self, status: bytes) -> None:
        self._disarm_header_timer()
        if not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 " + status + b"\r\n" + _CLOSE)
            self.transport.close()


def _csp_hashes(html: str) -> str:
    """CSP sources for the inline <script> and <style> blocks of a page: exactly those run."""
    blocks = re.findall(r"<(script|style)>(.*?)</\1>", html, flags=re.S)
    digests = {
        kind: " ".join(
            f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
            for k, body in blocks
            if k == kind
        )
        for kind in ("script", "style")
    }
    return f"script-src {digests['script']}; style-src {digests['style']}"


def security_headers(page: str) -> dict[str, list[tuple[bytes, bytes]]]:
    """Response headers by path: the page may run only its own inline code, /docs Swagger UI
    (its files served from the package, webui.py), and nothing else any script at all."""
    common = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY")]
    frame = "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    docs = (
        "default-src 'none'; script-src 'unsafe-inline' 'self'; style-src 'unsafe-inline' 'self';"
        f" img-src 'self' data:; connect-src 'self'; worker-src blob:; {frame}"
    )
    csp = {
        "/": f"default-src 'none'; {_csp_hashes(page)}; connect-src 'self'; {frame}",
        "/docs": docs,
        "/redoc": docs,
        "": f"default-src 'none'; {frame}",
    }
    return {
        path: [*common, (b"content-security-policy", value.encode())] for path, value in csp.items()
    }


def host_allowed(host: str, names: Iterable[str]) -> bool:
    """An IP address, localhost, or a name given with --allow-host (the bind address among
    them). A DNS-rebinding page reaches us under its own domain name, never one of these."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8642
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host in ("localhost", *names):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class _Refusal(Exception):
    def __init__(self, status: int, detail: str):
        self.status = status
        self.detail = detail


class HttpGuard:
    """ASGI wrapper in front of the app: Host check, bounded body, security headers."""

    def __init__(self, app: Any, page: str, allowed_hosts: Iterable[str] = ()):
        self.app = app
        self.names = frozenset(h.lower() for h in allowed_hosts)
        self.headers = security_headers(page)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = self.headers.get(scope["path"], self.headers[""])

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        try:
            length = self._check_headers(scope)
            if length is not None or scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
                receive = _replay(await _read_body(receive), receive)
        except _Refusal as err:
            await _answer(send_with_headers, err.status, err.detail)
            return
        await self.app(scope, receive, send_with_headers)

    def _check_headers(self, scope: dict[str, Any]) -> int | None:
        """The declared body length (None if not declared); _Refusal if the Host or the
        length is not acceptable."""
        length = None
        for name, value in scope["headers"]:
            if name == b"host" and not host_allowed(value.decode("latin-1"), self.names):
                raise _Refusal(
                    400,
                    f"Host {value.decode('latin-1')!r} is not this server; corral answers to its"
                    " IP addresses, localhost and names given with `corral up --allow-host`",
                )
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise _Refusal(400, "Content-Length: not a number") from None
                if length > MAX_BODY_BYTES:
                    raise _Refusal(413, f"body: larger than {MAX_BODY_BYTES} bytes")
        return length


async def _read_body(receive: Any) -> bytes | None:
    """The whole body (None if the client went away), within MAX_BODY_BYTES and BODY_TIMEOUT."""
    chunks: list[bytes] = []
    size = 0
    deadline = asyncio.get_running_loop().time() + BODY_TIMEOUT
    while True:
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            message = await asyncio.wait_for(receive(), max(remaining, 0.0))
        except TimeoutError:
            raise _Refusal(408, f"body: not received within {BODY_TIMEOUT:g}s") from None
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _Refusal(413, f"body: larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes | None, receive: Any) -> Any:
    """A `receive` that hands the app the body already read, then the connection's own."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if body is None:
            return {"type": "http.disconnect"}
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _answer(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),  # what is left of the request is not read
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
