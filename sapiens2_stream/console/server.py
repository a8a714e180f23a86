"""The web console, served from the running pipeline's own event loop (Starlette on uvicorn).

The pipeline stays first: the console only reads numbers, hands out fragments the recorder already encoded, and
starts or stops sources through the same code as the YAML; a slow viewer loses fragments, never slows a source.
uvicorn is told not to take SIGINT/SIGTERM (the pipeline's Ctrl-C handling stays as it is) and to give open
connections (a live view, an MJPEG stream) at most two seconds when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import os
import socket
import ssl
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..config import from_dict
from ..errors import Sapiens2StreamError
from ..io.draw import BODY_LINKS
from ..io.options import SourceConfig
from ..models.metadata import pose_metadata
from ..runtime.options import ConsoleConfig, ServerTls
from ..runtime.pipeline_config import check_config
from ..runtime.threads import census

STATIC = Path(__file__).with_name("static")
COOKIE = "sapiens2_console"
MJPEG_FPS = 5.0
SNAPSHOT_WAIT_S = 3.0  # how long a snapshot waits for a first picture


def console_token(cfg: ConsoleConfig) -> str | None:
    """The token requests must bring, or None; refuses (one line) a console reachable from other machines
    without one."""
    token = None
    if cfg.token_env:
        token = os.environ.get(cfg.token_env)
        if not token:
            raise Sapiens2StreamError(f"runtime.console.token_env: the environment variable {cfg.token_env} is "
                                      "not set (or empty)")  # fmt: skip
    try:
        loopback = ipaddress.ip_address(cfg.host).is_loopback
    except ValueError:
        loopback = cfg.host == "localhost"
    if not loopback and token is None:
        raise Sapiens2StreamError(f"runtime.console.host {cfg.host} lets other machines in: set "
                                  "runtime.console.token_env to a variable holding a token")  # fmt: skip
    return token


class TokenGate:
    """Every HTTP request and WebSocket needs the token (a Bearer header, the cookie, or `?token=` once, which sets
    the cookie); a WebSocket from a page of another origin is refused, token or not. Refusals are HTTP answers, on
    a WebSocket's handshake too (ASGI's denial response, which uvicorn supports): 401 without the token (log in),
    403 for a foreign origin (forbidden)."""

    def __init__(self, app, token: str | None, secure: bool = False) -> None:
        self.app, self.token = app, token
        self.cookie_flags = "HttpOnly; SameSite=Strict; Path=/" + ("; Secure" if secure else "")

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["type"] == "websocket" and not same_origin(headers):
            return await refuse(scope, receive, send, 403, "another origin's page may not open this console")
        if self.token is None:
            return await self.app(scope, receive, send)
        query = dict(parse_qsl(scope["query_string"].decode("latin-1")))  # percent-decoded, as the page encoded it
        given = [headers.get("authorization", "").removeprefix("Bearer "), cookie(headers, COOKIE),
                 query.get("token", "")]  # fmt: skip
        if not any(g and hmac.compare_digest(g, self.token) for g in given):
            return await refuse(scope, receive, send, 401, "a token is needed")
        if scope["type"] == "http" and query.get("token"):

            async def with_cookie(message):
                if message["type"] == "http.response.start":
                    value = f"{COOKIE}={self.token}; {self.cookie_flags}"
                    message["headers"] = [*message.get("headers", []), (b"set-cookie", value.encode())]
                await send(message)

            return await self.app(scope, receive, with_cookie)
        return await self.app(scope, receive, send)


def check_server_tls(tls: ServerTls) -> None:
    """`runtime.console.tls`'s files exist and make a server certificate with its key (else one line, exit 2)."""
    for key in ("certfile", "keyfile"):
        if not Path(getattr(tls, key)).is_file():
            raise Sapiens2StreamError(f"runtime.console.tls.{key}: {getattr(tls, key)}: no such file")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tls.certfile, tls.keyfile)
    except ssl.SSLError as e:
        raise Sapiens2StreamError(
            f"runtime.console.tls: the certificate and key do not make a pair ({e.reason or e})"
        ) from None


async def refuse(scope, receive, send, status: int, reason: str) -> None:
    """An HTTP refusal, also for a WebSocket's handshake (its denial response; a server without that extension
    can only close, which clients see as 403)."""
    response = Response(reason, status, headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 4000 + status})
        return
    await response(scope, receive, send)


def cookie(headers: dict, name: str) -> str:
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


def same_origin(headers: dict) -> bool:
    """A browser's WebSocket says where its page came from; it must be this console (no Origin: not a browser)."""
    origin = headers.get("origin")
    return origin is None or origin.split("://", 1)[-1] == headers.get("host")


class Console:
    """The console; `serve()` runs in an event loop (the pipeline's own, or the fleet driver's) until `close()`.
    What it shows and changes comes from its `backend` (console.pipeline_backend: one pipeline;
    fleet.console_backend: a fleet)."""

    def __init__(self, backend, cfg: ConsoleConfig) -> None:
        self.backend, self.cfg = backend, cfg
        self.token = console_token(cfg)
        self.server = None
        self.closing = False
        self.viewers: set = set()  # the live views' viewers connected now (each ends when the console does)
        self.sock = socket.socket(socket.AF_INET6 if ":" in cfg.host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((cfg.host, cfg.port))
        except OSError as e:
            raise Sapiens2StreamError(
                f"runtime.console: cannot listen on {cfg.host}:{cfg.port} ({e.strerror})"
            ) from None
        self.port = self.sock.getsockname()[1]
        routes = [
            Route("/", self.page("index.html")),
            Route("/sources/{name}", self.page("source.html")),
            Route("/console.js", self.page("console.js", "text/javascript")),
            Route("/api/v1/sources", self.list_sources, methods=["GET"]),
            Route("/api/v1/threads", self.threads, methods=["GET"]),
            Route("/api/v1/3d", self.three_d, methods=["GET"]),
            Route("/api/v1/events", self.events, methods=["GET"]),
            Route("/api/v1/events/{seq:int}/snapshot.jpg", self.event_snapshot, methods=["GET"]),
            Route("/api/v1/sources", self.add_source, methods=["POST"]),
            Route("/api/v1/sources/{name}", self.one_source, methods=["GET"]),
            Route("/api/v1/sources/{name}", self.remove_source, methods=["DELETE"]),
            WebSocketRoute("/api/v1/sources/{name}/live.mp4", self.live_mp4),
            Route("/api/v1/sources/{name}/live.mjpeg", self.live_mjpeg),
            Route("/api/v1/sources/{name}/snapshot.jpg", self.snapshot),
            Route("/api/v1/sources/{name}/recordings", self.recordings),
            Route("/api/v1/sources/{name}/recordings/{file:path}", self.recording),
            Route("/api/v1/sources/{name}/keypoints.jsonl", self.keypoints),
        ]
        self.app = TokenGate(Starlette(routes=routes), self.token, secure=cfg.tls is not None)
        if cfg.tls is not None:
            check_server_tls(cfg.tls)

    # ------------------------------------------------------------------------------------------- running

    async def serve(self) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # the pipeline (or the fleet driver) handles Ctrl-C and SIGTERM itself
                yield

        tls = self.cfg.tls
        https = {} if tls is None else {"ssl_certfile": tls.certfile, "ssl_keyfile": tls.keyfile}
        config = uvicorn.Config(self.app, lifespan="off", log_level="warning", timeout_graceful_shutdown=2,
                                ws="websockets-sansio", **https)  # fmt: skip
        self.server = Server(config)
        ticker = asyncio.create_task(self._tick())
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            ticker.cancel()

    async def _tick(self) -> None:
        while True:
            self.backend.tick(asyncio.get_running_loop())
            await asyncio.sleep(1.0)

    def close(self) -> None:
        """End the console (from its loop, when the run ends): open live views and MJPEG streams end first, so the
        server's graceful shutdown has nothing left to cancel (no traceback on the way out)."""
        self.closing = True
        for viewer in self.viewers:
            while viewer.queue.full():
                viewer.queue.get_nowait()
            viewer.queue.put_nowait(None)  # its handler closes the WebSocket: going away
        if self.server is not None:
            self.server.should_exit = True

    # ------------------------------------------------------------------------------------------- pages

    def page(self, name: str, media_type: str = "text/html"):
        async def serve_page(request: Request) -> Response:
            return Response((STATIC / name).read_text(), media_type=media_type)

        return serve_page

    # ------------------------------------------------------------------------------------------- sources

    def status(self, name: str) -> dict:
        """The named source's status, or a 404."""
        found = self.backend.status(name)
        if found is None:
            raise NotFound(name)
        return found

    async def list_sources(self, request: Request) -> Response:
        return JSONResponse([self.backend.status(n) for n in self.backend.names()])

    async def threads(self, request: Request) -> Response:
        """The process's threads by kind (a leak shows as a kind that keeps growing)."""
        return JSONResponse(census())

    async def three_d(self, request: Request) -> Response:
        """Live motion capture's latest moment (several calibrated cameras): each person's 3-D keypoints in the
        calibration's world frame, with the body's links and their colours to draw them."""
        latest = self.backend.latest_3d()
        if latest is None:
            return JSONResponse({"error": "no live motion capture in this run (threed.calibration naming two "
                                          "cameras or more)"}, 404)  # fmt: skip
        meta = pose_metadata()
        links = list(zip(meta.skeleton, meta.skeleton_colors, strict=True))[:BODY_LINKS]
        return JSONResponse({**latest, "links": [[a, b, list(colour)] for (a, b), colour in links]})

    async def events(self, request: Request) -> Response:
        """The latest events (zones, lines, poses) numbered by `seq`: `?since=N` gives those after N."""
        try:
            since = int(request.query_params.get("since", "0"))
        except ValueError:
            return JSONResponse({"error": "since: expected a whole number"}, 400)
        return JSONResponse(self.backend.recent.since(since))

    async def event_snapshot(self, request: Request) -> Response:
        """The annotated frame an event happened in (while the console keeps the event)."""
        path = self.backend.recent.snapshot(request.path_params["seq"])
        if path is None:
            return JSONResponse({"error": f"no snapshot of event {request.path_params['seq']}"}, 404)
        return FileResponse(path, media_type="image/jpeg")

    async def one_source(self, request: Request) -> Response:
        return self.guarded(lambda: JSONResponse(self.status(request.path_params["name"])))

    async def add_source(self, request: Request) -> Response:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return JSONResponse({"error": "send the source as JSON (Content-Type: application/json)"}, 415)
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            return JSONResponse({"error": f"not JSON: {e}"}, 422)
        try:
            if not isinstance(body, dict):
                raise Sapiens2StreamError("the body must be one sources: entry (a JSON object)")
            source = from_dict(SourceConfig, body, "source")
            running = self.backend.running()
            if any(s.name == source.name for s in running):
                return JSONResponse({"error": f"a source named {source.name!r} is already running"}, 409)
            check_config(replace(self.backend.cfg, sources=[*running, source]), "source")
            return JSONResponse(await self.backend.add(source), 201)
        except Sapiens2StreamError as e:
            return JSONResponse({"error": str(e)}, 422)

    async def remove_source(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not await self.backend.remove(name):
            return JSONResponse({"error": f"no running source named {name!r}"}, 404)
        return Response(status_code=204)

    # ------------------------------------------------------------------------------------------- live view

    async def live_mp4(self, websocket: WebSocket) -> None:
        view = self.backend.view(websocket.path_params["name"])
        if view is None:
            return await websocket.close(4404)
        await websocket.accept()
        viewer, start = view.join()  # watched from now: a source without its own video starts encoding
        self.viewers.add(viewer)
        try:
            while view.info is None and not self.closing:
                await asyncio.sleep(0.05)
            if self.closing:
                return await websocket.close(1001)
            await websocket.send_text(json.dumps(view.info))
            for fragment in start:
                await websocket.send_bytes(fragment)
            while (fragment := await viewer.queue.get()) is not None:
                await websocket.send_bytes(fragment)
            await websocket.close(1001)  # the run ended: going away
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self.viewers.discard(viewer)
            view.leave(viewer)

    async def snapshot(self, request: Request) -> Response:
        view = self.backend.view(request.path_params["name"])
        if view is None:
            return NotFound(request.path_params["name"]).response()
        for _ in range(int(SNAPSHOT_WAIT_S / 0.05)):  # a source drawing only while watched: its next picture
            if (data := view.jpeg()) is not None:
                return Response(data, media_type="image/jpeg", headers={"Cache-Control": "no-store"})
            await asyncio.sleep(0.05)
        return JSONResponse({"error": "no picture yet"}, 404)

    async def live_mjpeg(self, request: Request) -> Response:
        view = self.backend.view(request.path_params["name"])
        if view is None:
            return NotFound(request.path_params["name"]).response()

        async def parts():
            seen = -1
            while not self.closing:
                if view.pictures != seen and (data := view.jpeg()) is not None:  # encoded only while watched
                    seen = view.pictures
                    yield b"--frame\r\nContent-Type: image/jpeg\r\n\r\n" + data + b"\r\n"
                await asyncio.sleep(1 / MJPEG_FPS)

        return StreamingResponse(parts(), media_type="multipart/x-mixed-replace; boundary=frame")

    # ------------------------------------------------------------------------------------------- files

    def folder(self, name: str) -> Path:
        """The named source's output folder, or a 404."""
        self.status(name)
        return self.backend.folder(name).resolve()

    async def recordings(self, request: Request) -> Response:
        def answer():
            name = request.path_params["name"]
            root = self.folder(name)
            open_now = {p.resolve() for p in self.backend.recording_now(name)}
            videos = sorted(p for p in root.rglob("*.mp4") if ".final-tmp" not in p.name and ".previous" not in p.name)
            return JSONResponse([{"file": str(p.relative_to(root)), "bytes": p.stat().st_size,
                                  "modified": round(p.stat().st_mtime, 3), "recording": p.resolve() in open_now}
                                 for p in videos])  # fmt: skip

        return self.guarded(answer)

    async def recording(self, request: Request) -> Response:
        def answer():
            root = self.folder(request.path_params["name"])
            path = (root / request.path_params["file"]).resolve()
            if not path.is_relative_to(root) or not path.is_file() or path.suffix != ".mp4":  # videos of this source
                raise NotFound(request.path_params["file"])
            return FileResponse(path)  # answers Range with 206

        return self.guarded(answer)

    async def keypoints(self, request: Request) -> Response:
        def answer():
            root = self.folder(request.path_params["name"])
            try:
                start = float(request.query_params.get("start", "-inf"))
                end = float(request.query_params.get("end", "inf"))
            except ValueError:
                return JSONResponse({"error": "start and end are seconds of the source's timeline"}, 422)
            files = sorted(root.rglob(self.backend.cfg.outputs.jsonl.name))
            return StreamingResponse(lines_between(files, start, end), media_type="application/x-ndjson")

        return self.guarded(answer)

    def guarded(self, answer) -> Response:
        try:
            return answer()
        except NotFound as e:
            return e.response()


class NotFound(Exception):
    def response(self) -> Response:
        return JSONResponse({"error": f"no source or file named {self.args[0]!r}"}, 404)


def lines_between(files: list[Path], start: float, end: float):
    """The whole result lines whose `pts` lies in [start, end], file after file."""
    for path in files:
        with open(path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # being written
                try:
                    pts = json.loads(line)["pts"]
                except (ValueError, KeyError):
                    continue
                if start <= pts <= end:
                    yield line
