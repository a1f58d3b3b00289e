"""The listening socket of every server the project runs (`awm serve` and the adapters beside it).

Made with protocol IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on an accepted connection only when its
socket says it is TCP (`sock.proto`), and an accepted socket inherits the listener's protocol number. With
protocol 0, Nagle's algorithm stays on, and an answer written in two parts (headers, then body) waits for
the client's delayed ACK: about 40 ms per call on Linux loopback. TCP_NODELAY is also set on the listener
itself (Linux copies it to accepted connections), so a server that never consults `proto` is covered too.
"""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int, *, backlog: int = 1024) -> socket.socket:
    """A bound, listening TCP socket on (host, port) with Nagle off; OSError when it cannot bind.

    The backlog is large so that clients connecting right after the server says it is ready wait in
    the queue instead of being refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def nodelay(sock: socket.socket) -> bool:
    """Whether Nagle's algorithm is off on `sock` (what the tests check on an accepted connection)."""
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
