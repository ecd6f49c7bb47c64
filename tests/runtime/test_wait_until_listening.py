"""A rank that is not rank 0 waits for the store's port to listen before torch connects (torch
would back off for 0.25-0.75 s after its first refused connection)."""

from __future__ import annotations

import socket
import threading
import time

from scaletrain.runtime.network import wait_until_listening
from tests.conftest import free_port


def test_returns_once_the_port_listens_and_not_before() -> None:
    port = free_port()
    listening = threading.Event()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        server.bind(("127.0.0.1", port))
        server.listen()
        listening.set()

    timer = threading.Timer(0.5, listen_later)
    timer.start()
    try:
        assert wait_until_listening("127.0.0.1", port, timeout_s=60) is None
        assert listening.is_set()
    finally:
        timer.join()
        server.close()


def test_gives_up_where_nothing_will_listen_and_says_why() -> None:
    """Refused until the timeout; an unresolvable name at once (waiting would not help)."""
    started = time.monotonic()
    refused = wait_until_listening("127.0.0.1", free_port(), timeout_s=0.3)
    assert isinstance(refused, ConnectionRefusedError)
    assert time.monotonic() - started >= 0.3
    unresolvable = wait_until_listening("name-that-does-not-resolve.invalid", 29500, timeout_s=60)
    assert isinstance(unresolvable, socket.gaierror)
