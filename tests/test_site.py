"""The documentation site stands on its own (issue 44, item 8): `make docs` builds a site that loads no script,
stylesheet or font from elsewhere and keeps no 404 page of root-absolute links; in Chromium (Debian's, which
`make test-slow` installs) at 1280 px the speed page's widest table, and every other table, shows its last column
and code blocks are highlighted, checked on the rendered page and saved as a screenshot."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = re.compile(r"^(https?:)?//")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_site_loads_nothing_from_elsewhere(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20 and not (site / "404.html").exists()
    for page in pages:
        html = page.read_text(encoding="utf-8")
        for tag, attr in re.findall(r"<(script|link|img|iframe)\b[^>]*?\b(?:src|href)=\"([^\"]*)\"", html):
            assert not EXTERNAL.match(attr), (page, tag, attr)  # what a page loads (links to read are <a>)
    for sheet in site.rglob("*.css"):
        css = sheet.read_text(encoding="utf-8", errors="replace")
        assert not re.search(r"url\(\s*['\"]?(https?:)?//|@import\s+(url\()?['\"]?(https?:)?//", css), sheet
    code = (site / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert 'class="codehilite"' in code and '<span class="' in code  # highlighted when built, no script needed


@pytest.mark.slow
def test_chromium_shows_the_speed_table_whole_and_highlighted_code(site, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert browser and driver_path, "Chromium and its driver: `make test-slow` installs Debian's chromium packages"
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_path), options=options)
    try:
        driver.get((site / "speed" / "index.html").as_uri())
        widest = driver.execute_script("""
            const tables = [...document.querySelectorAll('.rst-content table')];
            const t = tables.reduce((a, b) => (b.rows[0].cells.length > a.rows[0].cells.length ? b : a));
            const last = t.rows[0].cells[t.rows[0].cells.length - 1].getBoundingClientRect();
            const box = t.getBoundingClientRect();
            return {columns: t.rows[0].cells.length, right: last.right, box: box.right, width: window.innerWidth,
                    scroll: t.scrollWidth - t.clientWidth, text: t.rows[0].cells[t.rows[0].cells.length - 1].innerText};
        """)
        assert widest["columns"] >= 9, widest
        assert widest["scroll"] <= 1 and widest["right"] <= min(widest["box"], widest["width"]) + 1, widest
        driver.save_screenshot(str(tmp_path / "speed.png"))
        assert (tmp_path / "speed.png").stat().st_size > 10_000
        # every table of every page shows its last column (issue 54: the 12-column recipes table did not)
        cut = []
        for page in sorted(site.rglob("index.html")):
            driver.get(page.as_uri())
            cut += [f"{page.parent.relative_to(site)}: {t}" for t in driver.execute_script("""
                return [...document.querySelectorAll('.rst-content table')].filter(t => {
                    const cells = t.rows[0].cells, last = cells[cells.length - 1].getBoundingClientRect();
                    return t.scrollWidth - t.clientWidth > 1 || last.right > Math.min(t.getBoundingClientRect().right,
                                                                                      window.innerWidth) + 1;
                }).map(t => [...t.rows[0].cells].map(c => c.innerText).join(' | '));
            """)]
        assert cut == []
        driver.get((site / "getting-started" / "index.html").as_uri())
        colours = driver.execute_script("""
            const spans = [...document.querySelectorAll('.codehilite pre span')];
            return [...new Set(spans.map(s => getComputedStyle(s).color))];
        """)
        assert len(colours) >= 3, colours  # keywords, strings, names: more than the text's one colour
    finally:
        driver.quit()
