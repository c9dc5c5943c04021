"""A free TCP port on this host, for the servers and rendezvous the project starts locally."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A local port nothing listens on now (the OS picks it). Servers and torchrun's rendezvous are
    given one, not port 0, because every party must know the same number before any binds."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``host:port`` already (a second server there would exit at once,
    or, worse, leave its clients talking to the first)."""
    with socket.socket() as sock:
        # As the servers bind: a port left in TIME_WAIT by the last server's connections is free to them.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False
