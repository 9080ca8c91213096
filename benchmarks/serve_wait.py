"""Wait for a `hetc serve` started by a benchmark to answer /health (stdlib only: the GPU machines
have neither httpx2 nor the project's other benchmark dependencies)."""

from __future__ import annotations

import subprocess
import time
import urllib.request


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float) -> bool:
    """True once `url`/health answers 200; False when `proc` exits or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:  # not listening yet, or not healthy yet (HTTPError is an OSError too)
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.5)
