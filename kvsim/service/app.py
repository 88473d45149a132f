"""The service: the API under /api/v1 (OpenAPI schema at /api/v1/openapi.json) and the page at /.

Every input goes through the CLI's own parser and the options table's rules (kvsim/service/inputs.py); runs
are jobs in processes of their own (kvsim/service/jobs.py); uploads and job folders live under the service's
data folder and nothing outside it and the package's examples is read. A refused request is a JSON
``{"error": ...}`` with a 4xx status, never a traceback.
"""

from __future__ import annotations

import hmac
from contextlib import asynccontextmanager
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from kvsim import __version__
from kvsim.errors import KvsimError
from kvsim.service.inputs import FileInput, InputError, build_command
from kvsim.service.jobs import Busy, Jobs, Limits
from kvsim.service.questions import QUESTIONS, question_schema
from kvsim.service.results import NotFound, read_table, read_text, result_file, result_files

API = "/api/v1"
_ID = re.compile(r"^[0-9a-f]{12}$")
MAX_REQUEST_BYTES = 1 << 20  # a question's inputs; files are uploads


@dataclass(frozen=True)
class ServiceConfig:
    data_dir: Path  # uploads and job folders
    token: str | None = None  # required on /api/* when set (Authorization: Bearer ..., or ?token=)
    max_upload_bytes: int = 64 << 20
    max_uploads: int = 100  # kept; the oldest are removed
    # Host names the service answers to (None: any). `kvsim ui` on this machine without a token answers only to
    # its loopback names, so that a web page elsewhere cannot reach it through DNS rebinding
    allowed_hosts: tuple[str, ...] | None = None
    limits: Limits = field(default_factory=Limits)


class JobRequest(BaseModel):
    question: str = Field(description="memory, compare, plan, fleet or validate (GET /api/v1/questions)")
    inputs: dict[str, Any] = Field(
        default_factory=dict,
        description="option keys (GET /api/v1/questions) and values; files as 'upload:ID' or 'example:NAME'",
    )


class JobView(BaseModel):
    id: str
    question: str
    state: str = Field(description="queued, running, done, failed, cancelled or timed out")
    command: str = Field(description="the same run on the command line")
    created: float
    elapsed_s: float | None
    progress: dict[str, Any] | None = Field(description="the command's current progress bar: label, done, total")
    error: str | None
    returncode: int | None


class UploadView(BaseModel):
    id: str
    name: str
    bytes: int
    ref: str = Field(description="the value to give a file input")


class TableView(BaseModel):
    name: str
    columns: list[str]
    rows: list[list[Any]]
    total_rows: int
    truncated: bool


class ErrorView(BaseModel):
    error: str


def _examples():
    return resources.files("kvsim.service") / "examples"


def _static():
    return resources.files("kvsim.service") / "static"


def _safe_name(name: str) -> str:
    base = re.split(r"[/\\]", name or "")[-1]
    base = re.sub(r"[^A-Za-z0-9._-]", "_", base).lstrip(".-")[:100]
    return base or "upload"


def create_app(config: ServiceConfig) -> FastAPI:
    """The service's application (run it with uvicorn: ``kvsim ui``)."""
    data = Path(config.data_dir)
    uploads = data / "uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    jobs = Jobs(data / "jobs", config.limits)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        jobs.close()  # running jobs' processes are stopped with the service

    app = FastAPI(
        lifespan=lifespan,
        title="kvsim service",
        version=__version__,
        description="The planner's questions of kvsim (memory, compare, plan, fleet, validate) as jobs; inputs "
        "are the CLI's options, results the files the CLI writes.",
        openapi_url=f"{API}/openapi.json",
        docs_url=None,  # Swagger's page loads scripts from the internet; the schema is enough
        redoc_url=None,
        responses={400: {"model": ErrorView}, 404: {"model": ErrorView}},
    )
    app.state.jobs = jobs
    if config.allowed_hosts is not None:
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(config.allowed_hosts))

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors()[:5]:
            where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        return error(400, "; ".join(parts) or "invalid request")

    @app.exception_handler(InputError)
    async def _input(request: Request, exc: InputError) -> JSONResponse:
        return error(400, str(exc))

    @app.exception_handler(NotFound)
    async def _missing(request: Request, exc: NotFound) -> JSONResponse:
        return error(404, str(exc))

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy) -> JSONResponse:
        return error(429, str(exc))

    @app.exception_handler(KvsimError)
    async def _kvsim(request: Request, exc: KvsimError) -> JSONResponse:
        return error(400, str(exc))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:  # never a traceback to the client
        return error(500, f"internal error: {type(exc).__name__}; the service goes on")

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        if request.method in ("POST", "PUT", "PATCH") and not request.url.path.startswith(f"{API}/uploads"):
            size = request.headers.get("content-length")
            if size is None or not size.isdigit():  # a body of unknown length would be read whole
                return error(411, "the request needs a Content-Length")
            if int(size) > MAX_REQUEST_BYTES:
                return error(413, f"the request is larger than {MAX_REQUEST_BYTES:,} bytes (files go to {API}/uploads)")
        if config.token and request.url.path.startswith(API):
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            given = given or request.query_params.get("token", "")
            if not hmac.compare_digest(given.encode(), config.token.encode()):
                return error(401, "this service needs its token (Authorization: Bearer TOKEN, or ?token=TOKEN)")
        response = await call_next(request)
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    def job_or_404(job_id: str):
        job = jobs.get(job_id) if _ID.match(job_id) else None
        if job is None:
            raise NotFound(f"no job {job_id!r}")
        return job

    def resolve(key: str, ref: str) -> FileInput:
        kind, _, name = ref.partition(":")
        if kind == "example":
            p = _examples() / name
            if name.endswith(".md") or not p.is_file():
                raise InputError(f"{key}: no example {name!r} (GET {API}/examples lists them)")
            return FileInput(Path(str(p)), name)
        folder = uploads / name
        if not _ID.match(name) or not folder.is_dir():
            raise InputError(f"{key}: no upload {name!r} (POST {API}/uploads first)")
        files = [p for p in folder.iterdir() if p.is_file() and not p.is_symlink()]
        if len(files) != 1:
            raise InputError(f"{key}: upload {name!r} is incomplete")
        return FileInput(files[0], files[0].name)

    # --- API
    @app.get(f"{API}/questions", summary="the questions and their inputs (from the CLI's options)")
    def questions() -> list[dict[str, Any]]:
        return [question_schema(q) for q in QUESTIONS.values()]

    @app.get(f"{API}/examples", summary="example input files, given as 'example:NAME'")
    def examples() -> list[str]:
        return sorted(p.name for p in _examples().iterdir() if p.is_file() and not p.name.endswith((".md", ".py")))

    @app.post(
        f"{API}/uploads",
        summary="send a file (the request body); its 'ref' is the value of a file input",
        response_model=UploadView,
        status_code=201,
    )
    async def upload(request: Request, name: str = "upload") -> UploadView:
        too_large = f"the file is larger than the service's limit of {config.max_upload_bytes:,} bytes"
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > config.max_upload_bytes:
            return error(413, too_large)  # type: ignore[return-value]
        upload_id = secrets.token_hex(6)
        folder = uploads / upload_id
        folder.mkdir()
        path = folder / _safe_name(name)
        size = 0
        try:
            with open(path, "wb") as fh:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > config.max_upload_bytes:
                        break
                    fh.write(chunk)
        except BaseException:  # the client went away: no half file stays to be given as an input
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if size > config.max_upload_bytes:
            shutil.rmtree(folder, ignore_errors=True)
            return error(413, too_large)  # type: ignore[return-value]
        kept = sorted(uploads.iterdir(), key=lambda p: p.stat().st_mtime)
        for old in kept[: max(0, len(kept) - config.max_uploads)]:
            shutil.rmtree(old, ignore_errors=True)
        return UploadView(id=upload_id, name=path.name, bytes=size, ref=f"upload:{upload_id}")

    @app.post(
        f"{API}/jobs",
        summary="ask a question: the run starts as a job",
        response_model=JobView,
        status_code=201,
        responses={429: {"model": ErrorView}},
    )
    def submit(req: JobRequest) -> dict[str, Any]:
        q = QUESTIONS.get(req.question)
        if q is None:
            raise InputError(f"unknown question {req.question!r}; one of {', '.join(QUESTIONS)}")
        command = build_command(q, req.inputs, resolve)
        return jobs.submit(q.name, command).view()

    @app.get(f"{API}/jobs", summary="the jobs the service holds", response_model=list[JobView])
    def list_jobs() -> list[dict[str, Any]]:
        return [j.view() for j in jobs.all()]

    @app.get(f"{API}/jobs/{{job_id}}", summary="a job's state, progress and error", response_model=JobView)
    def get_job(job_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        job = job_or_404(job_id)
        if wait_s > 0:
            job = jobs.wait(job.id, min(wait_s, 30.0)) or job
        return job.view()

    @app.delete(f"{API}/jobs/{{job_id}}", summary="cancel a job (its process is stopped)", response_model=JobView)
    def cancel_job(job_id: str) -> dict[str, Any]:
        job = job_or_404(job_id)
        jobs.cancel(job.id)
        return job.view()

    @app.get(f"{API}/jobs/{{job_id}}/log", summary="what the command printed", response_class=PlainTextResponse)
    def job_log(job_id: str) -> str:
        return job_or_404(job_id).log()

    @app.get(f"{API}/jobs/{{job_id}}/files", summary="the files the command wrote")
    def job_files(job_id: str) -> list[dict[str, Any]]:
        return result_files(job_or_404(job_id).out)

    @app.get(f"{API}/jobs/{{job_id}}/files/{{name}}", summary="download a result file")
    def job_file(job_id: str, name: str) -> FileResponse:
        return FileResponse(result_file(job_or_404(job_id).out, name), filename=name)

    @app.get(f"{API}/jobs/{{job_id}}/text/{{name}}", summary="a text result file", response_class=PlainTextResponse)
    def job_text(job_id: str, name: str) -> str:
        return read_text(job_or_404(job_id).out, name)

    @app.get(f"{API}/jobs/{{job_id}}/tables/{{name}}", summary="a result table as JSON", response_model=TableView)
    def job_table(job_id: str, name: str, limit: int = 5000) -> dict[str, Any]:
        return read_table(job_or_404(job_id).out, name, limit)

    @app.get(f"{API}/health", summary="the service is up")
    def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    # --- the page
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> str:
        return (_static() / "index.html").read_text(encoding="utf-8")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name == "plotly.min.js":  # served from the plotly package: no internet at run time
            import plotly

            return FileResponse(
                Path(plotly.__file__).parent / "package_data" / "plotly.min.js", media_type="text/javascript"
            )
        p = _static() / name
        if not re.match(r"^[a-z0-9_-]+\.(js|css|svg)$", name) or not p.is_file():
            raise NotFound(f"no file {name!r}")
        kind = {"js": "text/javascript", "css": "text/css", "svg": "image/svg+xml"}[name.rsplit(".", 1)[1]]
        return Response(p.read_bytes(), media_type=kind)

    return app


def default_data_dir() -> Path:
    return Path(os.environ.get("KVSIM_UI_DATA", "kvsim-out/ui"))
