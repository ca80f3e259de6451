"""How many connections a listening socket's kernel queue takes while nobody accepts (its listen backlog, seen)."""

from __future__ import annotations

import selectors
import socket
import time


def handshakes_while_not_accepting(address: tuple[str, int], connections: int, timeout_s: float = 1.0) -> int:
    """
    Start ``connections`` TCP connections to ``address`` at once and count those whose handshake completes within
    ``timeout_s`` seconds. Call it while the server does not accept (its serving loop stopped): what completes is what
    the listen backlog holds; the kernel drops the rest's SYNs, and each would wait out TCP's retransmission timeout
    (1 s, then 3 s, ...) before trying again.

    :param address: ``(host, port)`` of a listening socket.
    :param connections: how many to start.
    :param timeout_s: seconds to wait for the handshakes.
    """
    socks = []
    with selectors.DefaultSelector() as selector:
        try:
            for _ in range(connections):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                sock.connect_ex(address)
                socks.append(sock)
                selector.register(sock, selectors.EVENT_WRITE)
            done = 0
            deadline = time.monotonic() + timeout_s
            while done < connections and (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(left):
                    selector.unregister(key.fileobj)
                    if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:  # type: ignore[union-attr]
                        done += 1
            return done
        finally:
            for sock in socks:
                sock.close()
