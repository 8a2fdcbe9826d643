"""What the web page needs beyond the API it shares with the CLI: the pool over time, and the
API reference served offline (Swagger UI's files from the swagger-ui-py package, not a CDN).

The pool's history is sampled in memory (every SAMPLE_INTERVAL seconds, the last HISTORY
samples): usage per project and accelerator type, and the queue length. A restart of the
control plane starts it afresh; the long view belongs to Prometheus (/metrics).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from corral.server.api import User
from corral.server.controlplane import ControlPlane

SAMPLE_INTERVAL = 5.0
HISTORY = 1440  # two hours at 5 s


class PoolHistory:
    def __init__(self, cp: ControlPlane, interval: float = SAMPLE_INTERVAL):
        self.cp = cp
        self.interval = interval
        self.samples: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        cp = self.cp
        with cp.locked():
            usage = {p: dict(c) for p, c in cp.snap.usage.items() if any(c.values())}
            queued = len(cp.snap.pending.jobs)
        self.samples.append({"t": time.time(), "queue": queued, "usage": usage})

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="corral-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


def web_routes(cp: ControlPlane, history: PoolHistory) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/pool/history", tags=["queue"])
    def pool_history(user: User) -> dict[str, Any]:
        """Usage per project and type, and the queue length, sampled every few seconds
        (in memory, since the control plane started). Non-admins see their projects only."""
        allowed = None if cp.is_admin(user) else set(cp.quota.projects_of(user.user))
        with cp.locked():
            guarantee = {p: dict(g) for p, g in cp.snap.guarantee.items()}
        if allowed is not None:
            guarantee = {p: g for p, g in guarantee.items() if p in allowed}
        samples = [
            s
            if allowed is None
            else {**s, "usage": {p: u for p, u in s["usage"].items() if p in allowed}}
            for s in list(history.samples)
        ]
        return {"interval": history.interval, "guarantee": guarantee, "samples": samples}

    @router.get("/docs", include_in_schema=False, response_class=HTMLResponse)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="corral API",
            swagger_js_url="/static/swagger/swagger-ui-bundle.js",
            swagger_css_url="/static/swagger/swagger-ui.css",
            swagger_favicon_url="/static/swagger/favicon-32x32.png",
        )

    return router


def mount_swagger(app: Any) -> None:
    """Swagger UI's own files (5.x: it reads OpenAPI 3.1), from the swagger-ui-py package:
    /docs works offline."""
    import swagger_ui

    static = Path(swagger_ui.__file__).parent / "static"
    app.mount("/static/swagger", StaticFiles(directory=static), name="swagger")
