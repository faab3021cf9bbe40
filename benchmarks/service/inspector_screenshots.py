"""Screenshots of the inspector page (``/inspector``) against a running ``c3m serve``, for docs/img.

    c3m serve --store /tmp/svc/hard-store --port 8799 --perception scene-encoder &
    python benchmarks/service/inspector_screenshots.py --base http://127.0.0.1:8799 \\
        --key-file /tmp/svc/hard-admin-key.json --namespace dev-00000 \\
        --question "What is the current colour of my pillow?" --subject pillow --out docs/img

Drives headless Chromium (selenium; /usr/bin/chromium and chromedriver): the active index, the relation chain
of an updated entry (the one naming ``--subject`` if any), the route of ``--question``, and the Raw Node of a
chosen context item with an image. Writes inspector-{index,chain,trace,node}.png, each quantized to a palette
when it would be over ``--max-kib``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait


def shrink(path: Path, max_kib: int) -> None:
    if path.stat().st_size <= max_kib * 1024:
        return
    from PIL import Image

    im = Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    im.save(path, optimize=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="http://127.0.0.1:8799")
    ap.add_argument("--key", help="API key (or --key-file)")
    ap.add_argument("--key-file", help='JSON file with a "key" field')
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--question", required=True)
    ap.add_argument("--subject", default="", help="prefer the updated entry whose text names this word")
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--size", default="1400,1000")
    ap.add_argument("--max-kib", type=int, default=300)
    a = ap.parse_args(argv)
    key = a.key or json.loads(Path(a.key_file).read_text())["key"]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={a.size}",
                "--hide-scrollbars"):
        opts.add_argument(arg)
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    drv = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=opts)
    wait = WebDriverWait(drv, 120)
    js = drv.execute_script

    def shot(name: str) -> None:
        time.sleep(0.4)  # let object-URL images paint
        p = out / f"inspector-{name}.png"
        drv.save_screenshot(str(p))
        shrink(p, a.max_kib)
        print(p, p.stat().st_size // 1024, "KiB")

    try:
        drv.get(f"{a.base}/inspector#key={key}&ns={a.namespace}")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#index-usage .bar")) == 4)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#index-pages .entry"))
        shot("index")

        # the chain of an updated entry (most states; the one naming --subject first)
        eid = js("""const subj = arguments[0].toLowerCase();
            const es = [...document.querySelectorAll('#index-pages .entry')].map(e => ({id: e.dataset.entryId,
              n: parseInt((e.querySelector('.chip.chain') || {textContent: '0'}).textContent),
              real: !e.querySelector('.chip.kind').textContent.includes('spill'),
              s: subj && e.querySelector('.entry-text').textContent.toLowerCase().includes(subj)}));
            const rank = (x) => [x.n > 1 && x.real, x.s, x.real, x.n];
            es.sort((x, y) => { const a = rank(x), b = rank(y);
              for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return b[i] - a[i]; return 0; });
            return es.length ? es[0].id : null;""", a.subject)
        entry = drv.find_element(By.CSS_SELECTOR, f"#index-pages .entry[data-entry-id='{eid}']")
        js("""const pages = document.getElementById('index-pages');
            pages.scrollTop = arguments[0].offsetTop - 40; window.scrollTo(0, 0);
            arguments[0].style.outline = '2px solid #2f6fde';""", entry)
        entry.find_element(By.CLASS_NAME, "entry-link").click()
        wait.until(EC.visibility_of_element_located((By.ID, "chain-panel")))
        js("window.scrollTo(0, 0)")
        shot("chain")
        js("arguments[0].style.outline = ''", entry)

        # the route of a question
        drv.find_element(By.CSS_SELECTOR, "#chain-panel [data-close]").click()
        q = drv.find_element(By.ID, "query-input")
        q.clear()
        q.send_keys(a.question)
        drv.find_element(By.ID, "query-run").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#stage-context .ctx-item"))
        js("window.scrollTo(0, document.getElementById('query-section').getBoundingClientRect().top + scrollY - 70)")
        shot("trace")

        # a chosen item's Raw Node, with an image when one was chosen
        link = js("""const withImg = document.querySelector('#stage-context .ctx-item .ctx-image');
            const item = withImg ? withImg.closest('.ctx-item') : document.querySelector('#stage-context .ctx-item');
            return item.querySelector('.node-link');""")
        link.click()
        wait.until(EC.visibility_of_element_located((By.ID, "node-panel")))
        wait.until(lambda d: all(js("return arguments[0].complete && arguments[0].naturalWidth > 0", im)
                                 for im in d.find_elements(By.CSS_SELECTOR, "#node-panel img")))
        shot("node")
    finally:
        drv.quit()


if __name__ == "__main__":
    main()
