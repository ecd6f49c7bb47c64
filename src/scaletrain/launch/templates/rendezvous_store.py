"""The rendezvous store of one multi-node torchrun or accelerate launch, held by the job's
batch shell instead of the first node's launcher. The job runs this file's text with the job's
own Python (`python3 - HOST PORT`): standard library and torch only, because the site's image
or module may have no scaletrain.

torchrun's agents wait for each other when their processes have ended (the exit barrier),
on the rendezvous store. When the first node's agent holds the store, it may exit the moment
it has the barrier's answer, while the last agent to arrive is still asking for it; that
agent then logs "Error waiting on exit barrier ... Failed to recv" after a successful run
(pytorch/pytorch#69520). Held here, the store lives until the launch has ended on every
node; the launchers connect to it as clients (`--rdzv_conf=is_host=false`).

Listens on HOST's own address (IPv4 first, as torch's store client connects), not on every
interface: accelerate refuses to start on the first node when something listens on the port
at localhost. Runs until SIGTERM or SIGINT.
"""

import datetime
import ipaddress
import signal
import socket
import sys

# Connections the kernel queues before the store accepts them: one per agent, with room for
# thousands of nodes joining at once.
BACKLOG = 4096


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on the address of `host` that the launchers connect to.

    Where the name resolves to a loopback address here (a hosts file that maps the machine's
    own name to 127.0.1.1), the other nodes reach it by another address: then every interface.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, address = infos[0][0], str(infos[0][4][0])
    if ipaddress.ip_address(address).is_loopback:
        address = "::" if family == socket.AF_INET6 else "0.0.0.0"
    listener = socket.socket(family, socket.SOCK_STREAM)
    # The previous launch's store used this port a moment ago.
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(BACKLOG)
    return listener


def serve(host: str, port: int) -> None:
    """Hold the store until asked to stop."""
    # Bound before torch's import (a second or more): a launcher that connects meanwhile
    # waits in the queue instead of being refused.
    listener = listening_socket(host, port)
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    # Blocked before the store starts its threads, which inherit the mask: the signal then
    # reaches sigwait below, in this thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    import torch.distributed as dist

    store = dist.TCPStore(  # type: ignore[attr-defined]  # public, re-exported from C++
        host,
        port,
        is_master=True,
        master_listen_fd=listener.fileno(),
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=60),
        # libuv's server does not take a listening socket from outside in torch 2.7 (clients
        # time out); the classic server does, in every release.
        use_libuv=False,
    )
    signal.sigwait(stop_signals)
    del store


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python3 - HOST PORT < rendezvous_store.py", file=sys.stderr)
        return 2
    host, port = argv[0], int(argv[1])
    try:
        serve(host, port)
    except OSError as error:
        print(
            f"scaletrain: cannot hold the rendezvous store on {host}:{port}: {error}. "
            "HINT: another job on this node may use the port; submit again.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
