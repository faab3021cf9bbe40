"""The inspector page (``/inspector``) in a real headless Chromium against a real ``c3m serve`` app.

Builds a small store (a bike painted red, later blue, and a turn with a PNG), serves it with uvicorn on a free
loopback port with an API key, and drives the page with selenium: namespace picker, index budget bars and
entries, an entry's relation chain (red then blue), a query's route and chosen context, a node's original
image (fetched with the key header), and the error box for a wrong key. Screenshots go to ``tmp_path``
(and to ``$C3M_SCREENSHOTS`` when set). Skipped without selenium, ``chromium`` or ``chromedriver``.
"""
from __future__ import annotations

import io
import os
import shutil
import socket
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

# CI sets C3M_REQUIRE_BROWSER=1 after installing Debian's chromium + chromium-driver: there a missing browser is a
# failure, not a skip (a skipped browser test would look like a passing one)
REQUIRED = os.environ.get("C3M_REQUIRE_BROWSER") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if not REQUIRED:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("headless browser test needs chromium and chromedriver on PATH", allow_module_level=True)
else:
    assert CHROMIUM and CHROMEDRIVER, "C3M_REQUIRE_BROWSER=1 but chromium/chromedriver are not on PATH"
    from selenium import webdriver
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is not installed")

from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from c3m import Memory, Session, Turn  # noqa: E402
from c3m.config import MemoryConfig  # noqa: E402
from c3m.server.app import create_app  # noqa: E402
from c3m.server.auth import KeyRing  # noqa: E402

CFG = MemoryConfig(method="c3m", text_embedder="hashing")


def _png() -> bytes:
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (96, 64), (235, 240, 230))
    d = ImageDraw.Draw(im)
    d.rectangle((10, 30, 86, 58), fill=(60, 140, 60))
    d.ellipse((36, 6, 60, 30), fill=(230, 180, 20))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _build(root: Path) -> None:
    t = datetime.fromisoformat
    with Memory(root, "alice", config=CFG) as mem:
        for s in (
            Session("s1", t("2026-03-01T10:00:00"), (Turn("user", "I painted my bike red this weekend."),
                                                     Turn("assistant", "Nice colour."))),
            Session("s2", t("2026-03-08T10:00:00"), (Turn("user", "Here is a photo of my garden with the sunflower.",
                                                          (_png(),)),
                                                     Turn("assistant", "Lovely garden."))),
            Session("s3", t("2026-03-20T10:00:00"), (Turn("user", "I started baking sourdough bread on Sundays."),
                                                     Turn("assistant", "Yum."))),
            Session("s4", t("2026-04-02T10:00:00"), (Turn("user", "I repainted my bike blue this weekend."),
                                                     Turn("assistant", "Blue should look great."))),
        ):
            mem.add_session(s)
    with Memory(root, "bob", config=CFG) as mem:
        mem.add_session(Session("b1", t("2026-03-02T09:00:00"), (Turn("user", "I drink green tea every morning."),)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspector")
    store = root / "store"
    _build(store)
    ring = KeyRing(root / "keys.json")
    key, _ = ring.add(["alice", "bob"], label="inspector test")
    app = create_app(store, CFG, keys=ring)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            if time.time() > deadline or not thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.1)
    yield base, key
    server.should_exit = True
    thread.join(timeout=15)


@pytest.fixture(scope="module")
def browser():
    opts = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.binary_location = CHROMIUM
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield drv
    drv.quit()


def _shot(drv, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"inspector-{name}.png"
    drv.save_screenshot(str(path))
    out = os.environ.get("C3M_SCREENSHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / path.name)


def _all(drv, css):
    return drv.find_elements(By.CSS_SELECTOR, css)


def test_inspector_page_end_to_end(served, browser, tmp_path):
    base, key = served
    drv = browser
    wait = WebDriverWait(drv, 20)
    drv.get(f"{base}/inspector#key={key}")
    # the fragment is cleared from the address bar (by the page's DOMContentLoaded handler: waited for, since a
    # loaded CI machine once returned from get() before the address bar showed it)
    wait.until(lambda d: "key=" not in d.current_url)

    # 1. namespace picker and stats
    options = "return [...document.getElementById(arguments[0]).options].map(o => o.value)"
    wait.until(lambda d: d.execute_script(options, "ns-select") == ["", "alice", "bob"])
    assert drv.find_element(By.ID, "error-box").is_displayed() is False
    Select(drv.find_element(By.ID, "ns-select")).select_by_value("alice")

    # 2. active index: four budget bars, pages with entries
    wait.until(lambda d: len(_all(d, "#index-usage .bar")) == 4)
    bars = {b.get_attribute("data-name"): (int(b.get_attribute("data-used")), int(b.get_attribute("data-limit")))
            for b in _all(drv, "#index-usage .bar")}
    assert set(bars) == {"entries", "pages", "index_tokens", "index_bytes"}
    assert all(0 < u <= lim for u, lim in bars.values()), bars
    wait.until(lambda d: _all(d, "#index-pages .entry"))
    assert drv.find_element(By.CSS_SELECTOR, "[data-testid=stat-sessions] .stat-v").text == "4"
    entries = _all(drv, "#index-pages .entry")
    assert len(entries) == bars["entries"][0] and len(_all(drv, "#index-pages .page")) == bars["pages"][0]
    texts = drv.execute_script("return Object.fromEntries([...document.querySelectorAll('#index-pages .entry')]"
                               ".map(e => [e.dataset.entryId, e.querySelector('.entry-text').textContent]))")
    bike = [i for i, t in texts.items() if "blue" in t]
    assert bike, texts
    versions = drv.execute_script(options, "version-select")
    assert versions[0] == "4" and versions[-1] == "1"
    _shot(drv, tmp_path, "index")

    # 3. relation chain: red, then blue (current), and the log line that updated it
    drv.find_element(By.CSS_SELECTOR, f"#index-pages .entry[data-entry-id='{bike[0]}'] .entry-link").click()
    wait.until(EC.visibility_of_element_located((By.ID, "chain-panel")))
    steps = _all(drv, "#chain-timeline .chain-step")
    assert len(steps) >= 2
    assert "red" in steps[0].find_element(By.CLASS_NAME, "step-states").text
    assert steps[0].get_attribute("data-current") == "false"
    assert steps[-1].get_attribute("data-current") == "true"
    assert "blue" in steps[-1].find_element(By.CLASS_NAME, "step-states").text
    log = drv.find_element(By.ID, "chain-log").text
    assert "update" in log, log
    _shot(drv, tmp_path, "chain")

    # 4. a query's route: pages -> entries -> pool -> chosen context, with the reader's budget bars
    q = drv.find_element(By.ID, "query-input")
    q.clear()
    q.send_keys("What color is my bike?")
    drv.find_element(By.ID, "query-run").click()
    wait.until(EC.visibility_of_element_located((By.ID, "trace")))
    wait.until(lambda d: _all(d, "#stage-context .ctx-item"))
    assert _all(drv, "#stage-pages .route-item") and _all(drv, "#stage-entries .route-item")
    assert _all(drv, "#stage-pool .route-item[data-chosen=true]")
    tb = {b.get_attribute("data-name"): (int(b.get_attribute("data-used")), int(b.get_attribute("data-limit")))
          for b in _all(drv, "#trace-budget .bar")}
    assert list(tb) == ["pages", "raw_nodes", "images", "text_tokens"] and all(u <= lim for u, lim in tb.values())
    ctx = _all(drv, "#stage-context .ctx-item")
    assert any("blue" in c.text for c in ctx)
    assert {c.get_attribute("data-status") for c in ctx} >= {"current"}
    assert "red" in drv.find_element(By.CSS_SELECTOR, "#stage-context [data-testid=ctx-chain]").text
    drv.execute_script("document.getElementById('query-section').scrollIntoView()")
    _shot(drv, tmp_path, "trace")

    # 5. provenance: the garden photo's node, its original image fetched with the key header
    photo = [i for i, t in texts.items() if "garden" in t]
    assert photo, texts
    drv.execute_script("window.scrollTo(0, 0)")
    drv.find_element(By.CSS_SELECTOR, f"#index-pages .entry[data-entry-id='{photo[0]}'] .node-link").click()
    wait.until(EC.visibility_of_element_located((By.ID, "node-panel")))
    wait.until(lambda d: "garden" in d.find_element(By.ID, "node-text").text)
    assert drv.find_element(By.CSS_SELECTOR, "[data-testid=node-turn]").text == "s2#0"
    img = wait.until(lambda d: _all(d, "#node-images img.node-image"))[0]
    wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) == 96)
    assert img.get_attribute("src").startswith("blob:")
    _shot(drv, tmp_path, "node")

    # the page loaded nothing from anywhere but this server
    urls = drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls and all(u.startswith(base) or u.startswith("blob:") for u in urls), urls

    # an older version of the index: after session 1 only the red state exists
    Select(drv.find_element(By.ID, "version-select")).select_by_value("1")
    wait.until(lambda d: d.execute_script(
        "return document.querySelector('[data-testid=stat-index_version] .stat-v').textContent") == "1")
    old = drv.execute_script("return document.getElementById('index-pages').textContent")
    assert "red" in old and "blue" not in old and "garden" not in old

    # 6. a wrong key: the error box names the problem and the fix
    drv.get("about:blank")  # a new fragment alone would not reload the page
    drv.get(f"{base}/inspector#key=c3m_not-a-real-key")
    box = wait.until(EC.visibility_of_element_located((By.ID, "error-box")))
    assert "unknown API key" in drv.find_element(By.ID, "error-message").text
    assert "Authorization: Bearer" in drv.find_element(By.ID, "error-fix").text
    assert "401" in box.text
    assert drv.execute_script(options, "ns-select") == [""]
    _shot(drv, tmp_path, "error")
