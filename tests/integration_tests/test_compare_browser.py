"""`hetc compare --html` opened in a headless browser (Debian's chromium): the page renders from the
file alone, and the screenshot shows its charts — the latency CDFs' and the Pareto chart's colours
(matplotlib's first two line colours) are on screen, which they are only if the inlined pictures
were decoded and drawn. Slow (a browser start). Without chromium the test is skipped, except under
CI=true, where it fails: install it with `apt-get install chromium` (`make browser`)."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from hetc.partitioner.planner import PlanRequest, make_plan
from hetc.plan import save_plan
from tests.conftest import FIXTURES, two_type_cluster

pytestmark = pytest.mark.slow

MODEL = str(FIXTURES / "tiny-llama")
BLUE, ORANGE = (31, 119, 180), (255, 127, 14)  # matplotlib's C0 and C1: the first two plans' lines


def _browser() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: CI needs it for this test (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return exe


def _near(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 30) -> int:
    return int((np.abs(img[..., :3].astype(int) - np.array(rgb)).max(axis=-1) <= tol).sum())


def test_report_opens_and_shows_its_charts(tmp_path):
    from PIL import Image

    exe = _browser()
    two_type_cluster(tmp_path, "0.6 MB", "2 MB", a_count=2)
    kw = dict(model=MODEL, profiles=str(tmp_path / "c.yaml"), dtype="fp32", input_len=32, output_len=16, time_limit=2)
    save_plan(make_plan(PlanRequest(**kw)), tmp_path / "best.json")
    save_plan(make_plan(PlanRequest(**kw, placement="b:0")), tmp_path / "slow.json")
    page = tmp_path / "report.html"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hetc.cli",
            "compare",
            str(tmp_path / "best.json"),
            str(tmp_path / "slow.json"),
            "--rate",
            "200",
            "--requests",
            "100",
            "--html",
            str(page),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    shot = tmp_path / "shot.png"
    # no network for the page: every request other than the file itself fails
    subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,2600",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    img = np.asarray(Image.open(shot).convert("RGB"))
    assert img.shape[0] >= 2000 and img.shape[1] >= 1300
    assert _near(img, BLUE) > 500 and _near(img, ORANGE) > 500, "the charts are not on the screenshot"
    (tmp_path / "blank.html").write_text("<html><body><table><tr><td>x</td></tr></table></body></html>")
    blank = tmp_path / "blank.png"
    subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,2600", f"--screenshot={blank}", (tmp_path / "blank.html").as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert _near(np.asarray(Image.open(blank).convert("RGB")), BLUE) == 0  # the check can fail: a page without charts
