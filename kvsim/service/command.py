"""`kvsim ui`: the web page and service API on this machine (registered by kvsim/cli.py, so that the commands
under kvsim/commands/ never import the service that reads them)."""

from __future__ import annotations

import argparse
import sys

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def cmd_ui(a: argparse.Namespace) -> int:
    import secrets
    from pathlib import Path

    from kvsim.errors import ConfigError
    from kvsim.files import prepare_output_dir

    try:
        import uvicorn

        from kvsim.service.app import ServiceConfig, create_app
        from kvsim.service.jobs import Limits
    except ImportError as e:
        raise ConfigError(
            f"kvsim ui needs the page's libraries ({e.name} is missing): pip install 'kvsim[ui]'"
        ) from None
    token = a.token
    if a.host not in LOOPBACK and not token:
        token = secrets.token_urlsafe(18)  # open to a team: never without a token
    _check_free(a.host, a.port)
    data = prepare_output_dir(Path(a.data_dir), "--data-dir")
    limits = Limits(
        max_running=a.max_running,
        max_queued=a.max_queued,
        timeout_s=a.job_timeout_s,
        memory_gb=a.job_memory_gb,
    )
    hosts = ("127.0.0.1", "localhost", "::1", "[::1]") if a.host in LOOPBACK and not token else None
    app = create_app(ServiceConfig(data, token, int(a.max_upload_mb * 2**20), limits=limits, allowed_hosts=hosts))
    host = a.host
    if host in ("0.0.0.0", "::"):  # every address: a teammate reaches it by this machine's name
        import socket

        host = socket.gethostname()
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{a.port}/" + (f"?token={token}" if token else "")
    print(f"kvsim ui: open {url}  (the API: {url.split('?')[0]}api/v1/openapi.json; Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(app, host=a.host, port=a.port, log_level="warning")
    return 0


def _check_free(host: str, port: int) -> None:
    """A one-line error now rather than uvicorn's after the link is printed: the address is taken or not ours."""
    import socket

    from kvsim.errors import ConfigError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise ConfigError(
            f"--host {host} --port {port}: cannot listen there ({e.strerror or e}); give another --port"
        ) from None


def register(sub) -> None:
    from kvsim.commands.args import non_negative, positive, positive_int

    u = sub.add_parser(
        "ui",
        help="the web page and service API (planner's questions in a browser)",
        description="Start a local web server with pages for the planner's questions (memory, compare, plan, "
        "fleet, validate) and the JSON API under them (/api/v1, OpenAPI schema at /api/v1/openapi.json). "
        "Needs pip install 'kvsim[ui]'; every script is served from the installed packages (no internet).",
    )
    u.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; another than this machine's "
        "(e.g. 0.0.0.0, to open it to a team) always takes a token [default: 127.0.0.1]",
    )
    u.add_argument("--port", type=positive_int, default=8765, help="port [default: 8765]")
    u.add_argument(
        "--token",
        help="token every API call must carry (Authorization: Bearer TOKEN, or the "
        "page's link ?token=TOKEN) [default: none on 127.0.0.1; a random one on other addresses]",
    )
    u.add_argument(
        "--data-dir", default="kvsim-out/ui", help="folder of uploads and job results [default: kvsim-out/ui]"
    )
    u.add_argument(
        "--max-upload-mb", type=positive, default=64.0, help="largest file one upload may be, MiB [default: 64]"
    )
    u.add_argument("--max-running", type=positive_int, default=1, help="jobs run at once [default: 1]")
    u.add_argument(
        "--max-queued", type=positive_int, default=8, help="jobs waiting at most; more are refused [default: 8]"
    )
    u.add_argument(
        "--job-timeout-s", type=positive, default=1800.0, help="wall-clock seconds one job may run [default: 1800]"
    )
    u.add_argument(
        "--job-memory-gb",
        type=non_negative,
        default=16.0,
        help="address space one job may use, GiB (0: no limit) [default: 16]",
    )
    u.set_defaults(func=cmd_ui)
