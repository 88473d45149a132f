"""The page in a real browser: the system's Chromium, driven by Selenium through the system's chromedriver
(Debian: apt-get install chromium chromium-driver; .ci/run installs them). Nothing is downloaded.

Each page: fill the form, run, see the plot and the table, download the CSV; a long run cancelled; a bad
input's clear error. KVSIM_SCREENSHOT_DIR=docs/images writes the plan page's screenshot for the README.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="no Chromium and chromedriver on this machine (apt-get install chromium chromium-driver)",
)
EXAMPLES = Path(__file__).resolve().parents[1] / "kvsim" / "service" / "examples"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import uvicorn

    from kvsim.service.app import ServiceConfig, create_app

    app = create_app(ServiceConfig(tmp_path_factory.mktemp("svc")))
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    t_end = time.monotonic() + 30
    while not srv.started and time.monotonic() < t_end:
        time.sleep(0.05)
    assert srv.started, "the service did not start"
    yield f"http://127.0.0.1:{port}/"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not try to download a driver
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    opts.add_experimental_option(
        "prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    )
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield d
    d.quit()


def open_page(browser, server, name: str):
    browser.get(f"{server}?visit={time.monotonic_ns()}#{name}")  # a fresh page, not a hash change
    WebDriverWait(browser, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    page = browser.find_element(By.ID, "page-" + name)
    assert page.is_displayed()
    return page


def fill(page, key: str, value: str) -> None:
    box = page.find_element(By.CSS_SELECTOR, f"[name='{key}']")
    if not box.is_displayed():  # under "more options"
        page.find_element(By.CSS_SELECTOR, "details summary").click()
    box.clear()
    box.send_keys(value)


def run_and_wait(page, timeout_s: float = 120) -> None:
    page.find_element(By.CSS_SELECTOR, "button.run").click()
    WebDriverWait(page.parent, timeout_s).until(
        lambda d: (
            page.find_elements(By.CSS_SELECTOR, ".downloads")
            or page.find_element(By.CSS_SELECTOR, ".error").is_displayed()
        )
    )
    error = page.find_element(By.CSS_SELECTOR, ".error")
    assert not error.is_displayed(), error.text


def download(page, downloads: Path, name: str) -> Path:
    link = page.find_element(By.CSS_SELECTOR, f".downloads a[data-file='{name}']")
    target = downloads / name
    target.unlink(missing_ok=True)
    link.click()
    t_end = time.monotonic() + 20

    def done() -> bool:  # Chrome reserves the name with an empty file and writes into a .crdownload beside it
        return target.exists() and target.stat().st_size > 0 and not any(downloads.glob("*.crdownload"))

    while not done() and time.monotonic() < t_end:
        time.sleep(0.1)
    assert done(), f"{name} was not downloaded"
    return target


PAGES = {  # page: (inputs typed into the form, a plot it draws, a table it shows, a CSV to download)
    "memory": ({"tensor_parallel_size": "2", "gpu": "h100-80gb"}, "memory", "memory", "memory.csv"),
    "latency": ({"batch": "64", "gpu": "h100-80gb"}, "latency", "latency", "latency.csv"),
    "compare": ({"allocators": "max,paged"}, "memory_timeline", "runs", "runs.csv"),
    "plan": ({}, "pareto", "fleet_plan", "fleet_plan.csv"),
    "autoscale": ({"plan_requests": "800"}, "replicas_over_time", "autoscale", "autoscale.csv"),
    "fleet": ({"replicas": "2"}, "prefix_hit_rate_tokens", "replicas", "replicas.csv"),
    "validate": ({}, "predicted_vs_measured", "requests", "requests.csv"),
}


@pytest.mark.parametrize("name", list(PAGES))
def test_each_page_answers_its_question(browser, server, downloads, name):
    import pandas as pd

    inputs, plot, table, csv = PAGES[name]
    page = open_page(browser, server, name)
    for key, value in inputs.items():
        fill(page, key, value)
    run_and_wait(page)
    assert page.find_element(By.CSS_SELECTOR, f"[data-plot='{plot}'] .main-svg").is_displayed()
    rows = page.find_elements(By.CSS_SELECTOR, f"[data-table='{table}'] tbody tr")
    assert rows
    command = page.find_element(By.CSS_SELECTOR, ".cli code").text
    assert command.startswith("kvsim ") and all(v in command for v in inputs.values())
    df = pd.read_csv(download(page, downloads, csv))
    assert len(df) == min(len(rows), 200) or len(df) > 200
    if name == "memory":
        assert df["gpu"][0] == "h100-80gb" and df["tp"][0] == 2
    if name == "plan":
        serve = page.find_element(By.CSS_SELECTOR, ".serve pre").text
        assert "vllm serve" in serve
        out = os.environ.get("KVSIM_SCREENSHOT_DIR")
        browser.execute_script("window.scrollTo(0, 0)")
        shot = Path(out) / "ui-plan.png" if out else downloads / "ui-plan.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(shot))


def test_an_uploaded_file_is_validated(browser, server, downloads):
    page = open_page(browser, server, "validate")
    page.find_element(By.CSS_SELECTOR, ".field[data-key='results'] input[type=file]").send_keys(
        str(EXAMPLES / "vllm_bench_result.json")
    )
    WebDriverWait(browser, 20).until(
        lambda d: page.find_element(By.CSS_SELECTOR, "[name='results']").get_attribute("value").startswith("upload:")
    )
    run_and_wait(page)
    assert "vllm_bench_result.json" in page.find_element(By.CSS_SELECTOR, ".cli code").text
    assert page.find_elements(By.CSS_SELECTOR, "[data-plot='predicted_vs_measured'] .main-svg")


def test_the_fleet_page_draws_an_autoscaled_fleet_over_time(browser, server):
    page = open_page(browser, server, "fleet")
    fill(page, "replicas", "1")
    fill(page, "routers", "least-requests")
    fill(page, "autoscaler", "threshold:target=2,max=3")
    run_and_wait(page)
    assert "--autoscaler threshold:target=2,max=3" in page.find_element(By.CSS_SELECTOR, ".cli code").text
    for name in ("replicas_over_time", "ttft_over_time"):
        assert page.find_element(By.CSS_SELECTOR, f"[data-plot='{name}'] .main-svg").is_displayed()


def test_a_bad_input_shows_the_clis_error(browser, server):
    page = open_page(browser, server, "memory")
    fill(page, "tensor_parallel_size", "0")
    page.find_element(By.CSS_SELECTOR, "button.run").click()
    error = page.find_element(By.CSS_SELECTOR, ".error")
    WebDriverWait(browser, 20).until(lambda d: error.is_displayed())
    assert "--tensor-parallel-size: must be >= 1, got 0" in error.text


def test_a_long_run_is_cancelled_from_the_page(browser, server):
    page = open_page(browser, server, "compare")
    Select(page.find_element(By.CSS_SELECTOR, "[name='trace']")).select_by_value("")  # a generated workload
    fill(page, "num_prompts", "5000000")
    fill(page, "allocators", "paged")
    page.find_element(By.CSS_SELECTOR, "details summary").click()
    Select(page.find_element(By.CSS_SELECTOR, "[name='dataset_name']")).select_by_value("random")
    page.find_element(By.CSS_SELECTOR, "button.run").click()
    status = page.find_element(By.CSS_SELECTOR, ".status-text")
    WebDriverWait(browser, 60).until(lambda d: status.text.startswith("running"))
    page.find_element(By.CSS_SELECTOR, "button.cancel").click()
    WebDriverWait(browser, 30).until(lambda d: "cancelled" in status.text)
    WebDriverWait(browser, 30).until(lambda d: page.find_element(By.CSS_SELECTOR, "button.run").is_enabled())
    assert not page.find_elements(By.CSS_SELECTOR, ".downloads")
