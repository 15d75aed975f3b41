"""`posttrain dashboard`: the FastAPI app serving the live page and the JSON it polls.

Covers: `create_dashboard_app(paths)`, whose runs are the run directories under `paths` (found again on every
`/api/runs`, so a run started after the dashboard appears), the page and its bundled assets (`static/`: the
page's script and styles, uPlot's minified build and its licence; nothing is fetched from the network), and
one read-only JSON route per view of a run (`reader.py`). Every route reads the store with a fresh read-only
connection in FastAPI's thread pool: a slow read never holds the event loop or the trainer. Every JSON answer
carries the store's version as its ETag (`Cache-Control: no-cache`): a poll of an unchanged store is a 304
after two `stat` calls, with no SQLite read, no JSON and no body.
Does not cover: the CLI command (`cli/dashboard.py`), what is read (`reader.py`), or drawing (`static/dashboard.js`).
"""

# no `from __future__ import annotations`: FastAPI resolves the route annotations
import hashlib
import json
import sqlite3
import threading
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import Any

from posttrain.dashboard.reader import RunReader, find_runs
from posttrain.extras import require

ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css", "uPlot.iife.min.js": "text/javascript",
          "uPlot.min.css": "text/css", "LICENSE.uPlot": "text/plain"}


# points per series on a page's first load of a long run, min/max-decimated: a chart's plot is ~320 px wide, so two
# points (the bucket's minimum and maximum) per pixel column draw the same picture as every step
CHART_POINTS = 640


def require_dashboard_extra() -> None:
    """Raise `MissingExtraError` naming the `serve` extra unless FastAPI and uvicorn import."""
    for module in ("fastapi", "uvicorn"):
        require(module, "serve", "posttrain dashboard")


def _asset(name: str) -> bytes:
    return resources.files("posttrain.dashboard").joinpath("static", name).read_bytes()


class _Answers:
    """JSON answers tagged with their store's version: a 304 when the page already holds that version, and the
    newest 64 bodies kept by URL, so an answer already serialised for this URL and version is sent again as it is
    (each new page over a long run asks the same first-load URLs)."""

    def __init__(self) -> None:
        self.bodies: OrderedDict[str, tuple[str, bytes]] = OrderedDict()  # URL -> (ETag, JSON)
        self.lock = threading.Lock()  # the routes run in FastAPI's thread pool

    def answer(self, request, etag: str, compute):
        """`compute()` as compact JSON tagged `etag`, or 304 (nothing) when the page already holds that version."""
        from fastapi.responses import Response

        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        url = str(request.url)
        with self.lock:
            hit = self.bodies.get(url)
        if hit is None or hit[0] != etag:
            hit = (etag, json.dumps(compute(), separators=(",", ":")).encode())
        with self.lock:
            self.bodies[url] = hit
            self.bodies.move_to_end(url)
            while len(self.bodies) > 64:
                self.bodies.popitem(last=False)
        return Response(hit[1], media_type="application/json", headers=headers)

    def tagged(self, request, r: RunReader, key: str, compute):
        """`compute()` through the run's memo, tagged with the run's store version."""
        return self.answer(request, f'"{r.version()}"', lambda: r.memo(key, compute))


class _Runs:
    """The run directories under `paths`, found again on each call, with one `RunReader` kept per directory."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.readers: dict[Path, RunReader] = {}

    def all(self) -> list[RunReader]:
        found = find_runs(self.paths)
        for d in found:
            self.readers.setdefault(d, RunReader(d))
        return [self.readers[d] for d in found]

    def get(self, i: int) -> RunReader:
        """The `i`-th run, or a 404."""
        from fastapi import HTTPException

        found = self.all()
        if not 0 <= i < len(found):
            raise HTTPException(404, f"no run {i}")
        return found[i]

    def warm(self) -> None:
        """Read every run once (in the background), so a first page view finds its answers ready."""
        for r in self.all():
            try:
                r.steps_after(-1, CHART_POINTS)
                r.staleness(-1, CHART_POINTS)
                r.failures()
            except Exception:  # noqa: BLE001 - a store being created or damaged: its first request will say
                pass


def _summary(r: RunReader) -> dict[str, Any]:
    try:
        return r.memo("summary", r.summary)
    except sqlite3.Error:  # a store the trainer is creating this instant (no tables yet): listed, read next poll
        return {"name": r.dir.name, "dir": str(r.dir), "status": "starting", "steps": 0, "alerts": 0}


NO_STEPS: dict[str, Any] = {"reset": False, "steps": [], "times": [], "cols": {}}


def _listing(found: list[RunReader], versions: list[str]) -> list[dict[str, Any]]:
    """`/api/runs`' answer: each run's summary with its id and store version."""
    return [{"id": i, "version": v, **_summary(r)} for i, (r, v) in enumerate(zip(found, versions))]


def _listing_tag(found: list[RunReader], versions: list[str], extra: str = "") -> str:
    """An ETag that changes when any run's store changes, a run appears, or `extra` (the request's own terms) does."""
    text = "|".join(f"{r.dir}={v}" for r, v in zip(found, versions)) + "#" + extra
    return '"' + hashlib.blake2b(text.encode(), digest_size=12).hexdigest() + '"'


def _steps_or_none(r: RunReader, after: int, max_points: int | None) -> dict[str, Any]:
    try:
        return r.steps_after(after, max_points)
    except sqlite3.OperationalError:  # a store the trainer is creating this instant (no tables yet): none yet
        return NO_STEPS


def create_dashboard_app(paths: list[Path], poll_ms: int = 1000):
    """A FastAPI app showing the runs under `paths` (run directories or directories of runs), polling every `poll_ms`."""
    require_dashboard_extra()
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    import posttrain.rl.advantages  # noqa: F401  (torch, for the groups' advantages: imported now, not on a first view)

    runs, answers = _Runs(paths), _Answers()

    @asynccontextmanager
    async def lifespan(_app):
        threading.Thread(target=runs.warm, name="dashboard-warm", daemon=True).start()
        yield

    app = FastAPI(title="posttrain dashboard", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    _add_page_routes(app, poll_ms)
    _add_polled_routes(app, runs, answers)
    _add_browsing_routes(app, runs)
    return app


def _add_page_routes(app, poll_ms: int) -> None:
    """The page and its bundled assets."""
    from fastapi import HTTPException
    from fastapi.responses import HTMLResponse, Response

    page = (_asset("index.html").decode().replace("{{POLL_MS}}", str(int(poll_ms)))
            .replace("{{MAX_POINTS}}", str(CHART_POINTS)))

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return page

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPException(404, "no such asset")
        return Response(_asset(name), media_type=ASSETS[name], headers={"Cache-Control": "max-age=3600"})


def _add_polled_routes(app, runs: _Runs, answers: _Answers) -> None:
    """The views the page polls: each answer tagged with its store's version, a 304 while that is unchanged."""
    from fastapi import Request
    from fastapi.responses import Response

    @app.get("/api/runs")
    def list_runs(request: Request) -> Response:
        found = runs.all()
        versions = [r.version() for r in found]  # each run's summary carries its version: the page's change test
        return answers.answer(request, _listing_tag(found, versions), lambda: _listing(found, versions))

    @app.get("/api/runs/{i}/steps")
    def steps(request: Request, i: int, after: int = -1, max_points: int | None = None) -> Response:
        # compact JSON: 10,000 steps of ~30 metrics are megabytes
        r = runs.get(i)
        return answers.answer(request, f'"{r.version()}"', lambda: _steps_or_none(r, after, max_points))

    @app.get("/api/poll")
    def poll(request: Request, after: str = "", max_points: int | None = None) -> Response:
        """A live page's poll in one request: the runs listing and, for each run `after` names (`i:step,...`), its
        steps after that step. A 304 while no store changed (the same page asks the same `after` until one does)."""
        from fastapi import HTTPException

        try:
            wanted = {int(i): int(step) for i, step in (part.split(":") for part in after.split(",") if part)}
        except ValueError:
            raise HTTPException(400, f"after must be run:step pairs separated by commas, got {after!r}") from None
        found = runs.all()
        versions = [r.version() for r in found]  # read before the steps: the steps sent hold at least these versions
        etag = _listing_tag(found, versions, f"{after}&{max_points}")
        return answers.answer(request, etag, lambda: {
            "runs": _listing(found, versions),
            "steps": {str(i): _steps_or_none(found[i], step, max_points) for i, step in wanted.items()
                      if 0 <= i < len(found)}})

    @app.get("/api/runs/{i}/evals")
    def evals(request: Request, i: int) -> Response:
        return answers.tagged(request, runs.get(i), "evals", runs.get(i).evals)

    @app.get("/api/runs/{i}/alerts")
    def alerts(request: Request, i: int) -> Response:
        return answers.tagged(request, runs.get(i), "alerts", runs.get(i).alerts)

    @app.get("/api/runs/{i}/domains")
    def domains(request: Request, i: int) -> Response:
        return answers.tagged(request, runs.get(i), "domains", runs.get(i).domains)

    @app.get("/api/runs/{i}/failures")
    def failures(request: Request, i: int) -> Response:
        r = runs.get(i)
        return answers.answer(request, f'"{r.version()}"', r.failures)

    @app.get("/api/runs/{i}/staleness")
    def staleness(request: Request, i: int, after: int = -1, max_points: int | None = None) -> Response:
        r = runs.get(i)
        return answers.answer(request, f'"{r.version()}"', lambda: r.staleness(after, max_points))


def _add_browsing_routes(app, runs: _Runs) -> None:
    """What a click opens (a step's groups, samples, agent episodes): read on request, never polled."""
    from fastapi import HTTPException

    @app.get("/api/runs/{i}/groups/{step}")
    def groups(i: int, step: int, tokens: bool = False) -> dict[str, Any]:
        return runs.get(i).groups(step, tokens)

    @app.get("/api/runs/{i}/samples")
    def samples(i: int, q: str = "", failed: bool = False, limit: int = 100, tokens: bool = False) -> list[dict[str, Any]]:
        return runs.get(i).samples(q, failed, min(max(limit, 1), 1000), tokens)

    @app.get("/api/runs/{i}/episodes")
    def episodes(i: int, step: int | None = None) -> list[dict[str, Any]]:
        return runs.get(i).episodes(step)

    @app.get("/api/runs/{i}/episodes/{step}/{idx}")
    def episode(i: int, step: int, idx: int) -> dict[str, Any]:
        found = runs.get(i).episode(step, idx)
        if found is None:
            raise HTTPException(404, f"no episode {step}:{idx}")
        return found
