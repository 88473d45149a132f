"""The service API (kvsim/service/): the same numbers as the CLI, the CLI's checks and messages, bounded work,
nothing read outside its folders, jobs that can be cancelled."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

import warnings  # noqa: E402

with warnings.catch_warnings():  # starlette's note about httpx2, not ours to act on
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from kvsim.cli import main as cli_main  # noqa: E402
from kvsim.service.app import ServiceConfig, create_app  # noqa: E402
from kvsim.service.jobs import Limits  # noqa: E402
from kvsim.service.questions import QUESTIONS  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "kvsim" / "service" / "examples"
WALL_CLOCK_COLUMNS = {"wall_s", "sim_wall_s"}  # how long the run took on this machine, not a result


@pytest.fixture()
def client(tmp_path):
    app = create_app(ServiceConfig(tmp_path / "svc"))
    with TestClient(app) as c:
        yield c


def submit(c, question: str, inputs: dict | None = None, status: int = 201) -> dict:
    r = c.post("/api/v1/jobs", json={"question": question, "inputs": inputs or {}})
    assert r.status_code == status, r.text
    return r.json()


def finished(c, job: dict, timeout_s: float = 120) -> dict:
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        job = c.get(f"/api/v1/jobs/{job['id']}", params={"wait_s": 5}).json()
        if job["state"] not in ("queued", "running"):
            return job
    raise AssertionError(f"job {job['id']} still {job['state']} after {timeout_s} s")


def test_questions_take_the_options_table_inputs(client):
    from kvsim.option_table import BY_KEY

    qs = {q["name"]: q for q in client.get("/api/v1/questions").json()}
    assert set(qs) == {"memory", "latency", "compare", "plan", "autoscale", "fleet", "validate"}
    for q in qs.values():
        keys = {f["key"] for f in q["fields"]}
        assert "out" not in keys and "workers" not in keys  # set by the service, or unbounded fan-out
        for f in q["fields"]:
            if f["key"] in BY_KEY:  # an option: the table's default, flag and choices
                o = BY_KEY[f["key"]]
                assert f["flag"] == o.flag
                assert f["default"] == o.default or (isinstance(o.default, float) and f["default"] == str(o.default))
                assert f["choices"] == (list(o.allowed()) if o.allowed() else None)
        assert set(q["defaults"]) <= keys
    mem = {f["key"]: f for f in qs["memory"]["fields"]}
    assert mem["tensor_parallel_size"]["kind"] == "int" and mem["tensor_parallel_size"]["default"] == 1
    assert mem["context"]["many"] and qs["validate"]["fields"][0]["file"]


def _cli_argv(job: dict) -> list[str]:
    """The command line the job shows, its example files as paths."""
    import shlex

    words = shlex.split(job["command"])[1:]
    return [str(EXAMPLES / w) if (EXAMPLES / w).is_file() else w for w in words]


def _tables(folder: Path) -> dict[str, object]:
    import pandas as pd

    out: dict[str, object] = {}
    for p in sorted(folder.iterdir()):
        if p.suffix == ".csv":
            df = pd.read_csv(p)
            out[p.name] = df.drop(columns=[c for c in df.columns if c in WALL_CLOCK_COLUMNS])
        elif p.name == "vllm_serve.sh":
            out[p.name] = p.read_text()
    return out


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_each_page_default_question_gives_the_cli_numbers(client, tmp_path, question):
    import pandas as pd

    job = finished(client, submit(client, question))
    assert job["state"] == "done", job
    assert job["command"].startswith("kvsim ")
    served = {f["name"] for f in client.get(f"/api/v1/jobs/{job['id']}/files").json()}
    cli_out = tmp_path / "cli"
    q = QUESTIONS[question]
    if q.out != "out":  # the command writes one file
        cli_out.mkdir()
    target = cli_out if q.out == "out" else cli_out / Path(q.out).name
    assert cli_main([*_cli_argv(job), "--out", str(target)]) == 0
    ours = _tables(cli_out)
    assert {n for n in ours} <= served and ours
    svc_out = tmp_path / "svc-files"
    svc_out.mkdir()
    for name in ours:
        r = client.get(f"/api/v1/jobs/{job['id']}/files/{name}")
        assert r.status_code == 200
        (svc_out / name).write_bytes(r.content)
    theirs = _tables(svc_out)
    for name, a in ours.items():
        b = theirs[name]
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        else:
            assert a == b
    for q_table in QUESTIONS[question].tables:  # the page's tables, as JSON, hold the file's values
        if f"{q_table}.csv" in served:
            t = client.get(f"/api/v1/jobs/{job['id']}/tables/{q_table}", params={"limit": 10**9}).json()
            df = pd.read_csv(svc_out / f"{q_table}.csv") if (svc_out / f"{q_table}.csv").exists() else None
            if df is not None:
                assert t["columns"] == list(df.columns) and t["total_rows"] == len(df)
                assert t["rows"] == [[_plain(v) for v in row] for row in df.itertuples(index=False, name=None)]


def _plain(v):
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return None if isinstance(v, float) and v != v else v


@pytest.mark.parametrize(
    "question,inputs,message",
    [
        ("memory", {"tensor_parallel_size": 0}, "--tensor-parallel-size: must be >= 1, got 0"),
        ("memory", {"kv_cache_dtype": "fp7"}, "--kv-cache-dtype: 'fp7' is not one of"),
        ("memory", {"tensor_paralel_size": 2}, "did you mean 'tensor_parallel_size'"),
        ("memory", {"context": [-5]}, "argument --context: must be >= 1"),
        ("memory", {"model": "/etc/passwd"}, "looks like a path"),
        ("memory", {"gpu": "../../secret.yaml"}, "looks like a path"),
        ("memory", {"gpu": "~/gpu.yaml"}, "looks like a path"),
        ("memory", {"gpu": "C:\\gpu.yaml"}, "looks like a path"),
        ("memory", {"model": "x" * 5000}, "longer than"),
        ("memory", {"model": "a\nb"}, "control characters"),
        ("memory", {"model": ["a", "b"]}, "takes one value"),
        ("memory", {"model": {"x": 1}}, "expected a number or text"),
        ("memory", {"model": True}, "expected a value"),
        ("memory", {"enable_expert_parallel": "yes"}, "expected true or false"),
        ("memory", {"context": list(range(1, 100))}, "at most 64 values"),
        ("memory", {"out": "/tmp/x"}, "unknown input 'out'"),
        ("plan", {"workers": 64}, "unknown input 'workers'"),
        ("compare", {"trace": "example:nope.jsonl"}, "no example 'nope.jsonl'"),
        ("compare", {"trace": "example:README.md"}, "no example 'README.md'"),
        ("compare", {"trace": "upload:0123456789ab"}, "no upload"),
        ("compare", {"trace": "upload:../../etc"}, "looks like a path"),
        ("nope", {}, "unknown question 'nope'"),
        ("plan", {"slo": None}, "the following arguments are required: --slo"),
    ],
)
def test_bad_inputs_are_refused_with_the_clis_message(client, question, inputs, message):
    r = client.post("/api/v1/jobs", json={"question": question, "inputs": inputs})
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]
    assert client.get("/api/v1/jobs").json() == []  # nothing ran


@pytest.mark.parametrize(
    "body", ["not json", json.dumps([1, 2]), json.dumps({"inputs": {}}), json.dumps({"question": 3, "inputs": 4})]
)
def test_malformed_requests_are_400_not_500(client, body):
    r = client.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]


def test_request_bodies_are_bounded(client):
    big = json.dumps({"question": "memory", "inputs": {"model": "x" * (2 << 20)}})
    r = client.post("/api/v1/jobs", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413

    def chunks():
        yield b'{"question": "memory", '
        yield b'"inputs": {}}'

    r = client.post("/api/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 411


def _values():
    from hypothesis import strategies as st

    scalar = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=40),
        st.sampled_from(["example:chat.jsonl", "upload:0123456789ab", "../x", "-1", "32k", "inf", "fp8"]),
    )
    return st.one_of(scalar, st.lists(scalar, max_size=4), st.dictionaries(st.text(max_size=5), scalar, max_size=2))


def test_no_input_crashes_the_service(tmp_path):
    """Random inputs to every question: a 400 with a message, or a job that starts (cancelled at once); never a
    500, and the service answers after."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    app = create_app(ServiceConfig(tmp_path / "svc", limits=Limits(max_queued=100)))
    with TestClient(app) as c:
        keys = {q["name"]: [f["key"] for f in q["fields"]] for q in c.get("/api/v1/questions").json()}

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(
            st.sampled_from(sorted(keys) + ["nope"]),
            st.data(),
        )
        def check(question, data):
            names = st.sampled_from(keys.get(question, ["model"]) + ["bogus"])
            inputs = data.draw(st.dictionaries(names, _values(), max_size=4))
            r = c.post("/api/v1/jobs", json={"question": question, "inputs": inputs})
            assert r.status_code in (201, 400), r.text
            if r.status_code == 400:
                assert r.json()["error"]
            else:
                c.delete(f"/api/v1/jobs/{r.json()['id']}")

        check()
        assert c.get("/api/v1/health").json()["status"] == "ok"


def test_a_run_the_cli_refuses_fails_with_its_message(client):
    up = client.post("/api/v1/uploads", params={"name": "../../run.json"}, content=b"{}").json()
    assert up["name"] == "run.json" and up["bytes"] == 2  # the name's folders are dropped
    job = finished(client, submit(client, "validate", {"results": [up["ref"]]}))
    assert job["state"] == "failed" and job["returncode"] == 2
    assert job["error"].startswith("run.json: no per-request fields")  # named as uploaded, not inputs/run.json
    assert "kvsim: error:" in client.get(f"/api/v1/jobs/{job['id']}/log").text


def test_uploads_are_bounded(tmp_path):
    app = create_app(ServiceConfig(tmp_path / "svc", max_upload_bytes=1000, max_uploads=2))
    with TestClient(app) as c:
        assert c.post("/api/v1/uploads", content=b"x" * 1001).status_code == 413

        def chunks():
            for _ in range(10):
                yield b"y" * 200  # no Content-Length: counted as it streams

        assert c.post("/api/v1/uploads", content=chunks()).status_code == 413
        refs = [c.post("/api/v1/uploads", content=b"z" * 10).json()["ref"] for _ in range(3)]
        assert len(list((tmp_path / "svc" / "uploads").iterdir())) == 2  # the oldest removed
        assert refs[-1].startswith("upload:")


def _long_compare() -> dict:
    # a generated workload far longer than any test waits: it runs until cancelled or stopped
    return {
        "trace": None,
        "dataset_name": "random",
        "num_prompts": 5_000_000,
        "random_input_len": 64,
        "random_output_len": 64,
        "allocators": "paged",
    }


def test_a_long_run_can_be_cancelled(client):
    job = submit(client, "compare", _long_compare())
    t_end = time.monotonic() + 60
    while client.get(f"/api/v1/jobs/{job['id']}").json()["state"] != "running" and time.monotonic() < t_end:
        time.sleep(0.05)
    r = client.delete(f"/api/v1/jobs/{job['id']}")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    j = client.app.state.jobs.get(job["id"])
    assert j.proc is not None and j.proc.poll() is not None  # the process is gone
    assert client.delete(f"/api/v1/jobs/{job['id']}").json()["state"] == "cancelled"  # idempotent


def test_work_is_bounded_in_time_and_in_jobs(tmp_path):
    app = create_app(ServiceConfig(tmp_path / "svc", limits=Limits(max_running=1, max_queued=1, timeout_s=1.5)))
    with TestClient(app) as c:
        first = submit(c, "compare", _long_compare())
        t_end = time.monotonic() + 60
        while c.get(f"/api/v1/jobs/{first['id']}").json()["state"] == "queued" and time.monotonic() < t_end:
            time.sleep(0.05)
        second = submit(c, "memory")  # waits behind the first
        r = c.post("/api/v1/jobs", json={"question": "memory", "inputs": {}})
        assert r.status_code == 429 and "waiting" in r.json()["error"]
        done = finished(c, first, 60)
        assert done["state"] == "timed out" and "1.5 s" in done["error"]
        assert finished(c, second, 60)["state"] == "done"


def test_the_token_guards_the_api(tmp_path):
    app = create_app(ServiceConfig(tmp_path / "svc", token="s3cret"))
    with TestClient(app) as c:
        assert c.get("/api/v1/questions").status_code == 401
        assert c.get("/api/v1/questions", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/v1/questions", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/api/v1/questions", params={"token": "s3cret"}).status_code == 200
        assert c.get("/").status_code == 200  # the page itself; it sends the token it was opened with


def test_files_outside_the_results_are_not_served(client):
    job = finished(client, submit(client, "memory"))
    base = f"/api/v1/jobs/{job['id']}"
    assert client.get(f"{base}/files/memory.csv").status_code == 200
    for name in (".kvsim-files", "..%2Fjob.json", "..%2F..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "nope.csv"):
        r = client.get(f"{base}/files/{name}")
        assert r.status_code == 404, name
    assert client.get(f"{base}/text/memory.parquet").status_code == 404
    assert client.get(f"{base}/tables/..%2Fjob").status_code == 404
    assert client.get("/api/v1/jobs/../../etc").status_code == 404
    assert client.get("/api/v1/jobs/0123456789ab").status_code == 404
    assert client.get("/static/app.py").status_code == 404
    assert client.get("/static/..%2Fapp.py").status_code == 404
    assert client.get("/static/plotly.min.js").status_code == 200
    assert client.get("/api/v1/openapi.json").json()["info"]["title"] == "kvsim service"


def test_tables_come_back_bounded_and_json_safe(client):
    job = finished(
        client,
        submit(client, "compare", {"allocators": "paged", "num_prompts": 50, "trace": None, "dataset_name": "random"}),
    )
    assert job["state"] == "done", job
    t = client.get(f"/api/v1/jobs/{job['id']}/tables/requests", params={"limit": 7}).json()
    assert len(t["rows"]) == 7 and t["total_rows"] == 50 and t["truncated"]
    reason = t["columns"].index("reason")
    assert t["rows"][0][reason] is None  # an empty cell is null, not NaN (which is not JSON)
    assert job["progress"] is not None and job["progress"]["done"] == job["progress"]["total"] == 50


def test_parquet_results_are_read_as_the_csv_ones(client):
    pytest.importorskip("pyarrow")
    job = finished(client, submit(client, "compare", {"allocators": "paged", "format": "parquet"}))
    assert job["state"] == "done", job
    names = {f["name"] for f in client.get(f"/api/v1/jobs/{job['id']}/files").json()}
    assert {"runs.parquet", "requests.parquet"} <= names and "runs.csv" not in names
    t = client.get(f"/api/v1/jobs/{job['id']}/tables/runs").json()
    assert t["rows"][0][t["columns"].index("finished")] == 3000


def test_progress_file_follows_the_bars(tmp_path, monkeypatch):
    from kvsim.output import progress

    f = tmp_path / "p.json"
    monkeypatch.setenv(progress.PROGRESS_FILE, str(f))
    with progress.Progress(10, "  paged") as bar:
        first = json.loads(f.read_text())
        bar.update(10)
    last = json.loads(f.read_text())
    assert first["done"] == 0 and first["label"] == "paged" and first["total"] == 10
    assert last["done"] == 10 and last["bar"] == first["bar"]
    assert not os.path.exists(f"{f}.tmp")


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_kvsim_ui_opens_to_a_team_only_with_a_token(monkeypatch, tmp_path, capsys):
    import uvicorn

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, log_level: seen.update(app=app, host=host))
    port = _free_port()
    assert cli_main(["ui", "--host", "0.0.0.0", "--port", port, "--data-dir", str(tmp_path / "d")]) == 0
    err = capsys.readouterr().err
    assert "?token=" in err and seen["host"] == "0.0.0.0"
    with TestClient(seen["app"]) as c:
        assert c.get("/api/v1/questions").status_code == 401
    assert cli_main(["ui", "--port", port, "--data-dir", str(tmp_path / "d")]) == 0
    assert "?token=" not in capsys.readouterr().err
    with TestClient(seen["app"], base_url="http://127.0.0.1:8765") as c:  # on this machine: its own names only
        assert c.get("/api/v1/health").status_code == 200
        assert c.get("/api/v1/health", headers={"Host": "localhost:8765"}).status_code == 200
        assert c.get("/api/v1/health", headers={"Host": "attacker.example:8765"}).status_code == 400


def test_kvsim_ui_on_a_taken_port_says_so_in_one_line(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert cli_main(["ui", "--port", str(port), "--data-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert f"--port {port}: cannot listen there" in err and "open http" not in err
