"""Facts about the machine a command runs on, for every folder: its CPU's name and a free port."""

from __future__ import annotations

import platform
import random
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


_LOWEST = 10000  # below this, ports that well-known services use


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port free on the loopback now, below the kernel's ephemeral range where there is room.

    A port the kernel may hand out (an outgoing connection's, another process's bind to port 0, as
    gloo's pairs do) can be taken between this check and its owner's bind; one below the range can
    only be taken by an explicit bind. Falls back to the OS's pick when no port below the range binds.
    """
    top = _ephemeral_start()
    for port in random.sample(range(_LOWEST, top), min(64, max(top - _LOWEST, 0))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
