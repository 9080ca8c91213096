"""SIGTERM drains: the HTTP server keeps answering (new requests get 503 with the reason)
while open requests finish, for up to the drain timeout; those still open then end with an
error, and the server exits so the launcher can stop the workers and exit 0. A second
SIGTERM/SIGINT exits at once.

uvicorn's own handling would stop listening at the first signal (new clients would get a
refused connection, not a 503) and re-raise SIGTERM after its graceful shutdown, ending the
process before the workers are stopped.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable

import uvicorn

__all__ = ["DrainingServer", "drain"]


def drain(engine, timeout: float, log: Callable[[str], None]) -> bool:
    """Refuse new requests (503), let open ones finish for up to `timeout` s, then end the rest
    with an error. Returns True when every open request finished on its own.

    Args:
        engine: the Engine.
        timeout: seconds (--drain-timeout).
        log: progress lines.
    """
    engine.stop_admitting()
    log(f"draining: no new requests; waiting up to {timeout:g} s for {len(engine.requests)} open request(s)")
    if engine.wait_idle(timeout):
        log("drained: every open request finished")
        return True
    n = len(engine.requests)
    engine.cancel_all(f"the server is shutting down and the request did not finish within the drain timeout ({timeout:g} s)")
    log(f"drain timeout ({timeout:g} s): ended {n} unfinished request(s) with an error")
    return False


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first SIGTERM/SIGINT drains the engine before it exits."""

    def __init__(self, config: uvicorn.Config, *, engine, drain_timeout: float, log: Callable[[str], None]):
        super().__init__(config)
        self.engine, self.drain_timeout, self.log = engine, drain_timeout, log
        self._signalled = False

    def _on_signal(self, sig, frame) -> None:
        if self._signalled:
            self.handle_exit(sig, frame)  # a second signal: exit now
            return
        self._signalled = True
        threading.Thread(target=self._drain, name="drain", daemon=True).start()

    def _drain(self) -> None:
        drain(self.engine, self.drain_timeout, self.log)
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self):
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)
