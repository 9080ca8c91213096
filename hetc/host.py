"""Facts about the machine a command runs on, for every folder: its CPU's name and a free port."""

from __future__ import annotations

import platform
import socket

__all__ = ["cpu_name", "free_port"]


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo; the platform's processor string elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def free_port() -> int:
    """A TCP port free on the loopback now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
