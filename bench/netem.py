"""A network with a delay: the benchmark's servers behind a veth pair, ``tc netem`` on both ends.

On one machine the client reaches its servers over loopback in a few microseconds; a real
deployment pays a network round trip (~0.25 ms inside a data centre) for every statement. The
``netem`` leg (:mod:`bench.legs.netem`) runs the comparisons on such a network, built here out
of two network namespaces the benchmark makes itself and removes at exit:

- ``slb<pid>c``, the client's: this process moves into it (``setns``) before it starts anything,
  so the store, the raw baseline, the peer and every child process connect from there;
- ``slb<pid>s``, the servers': ``mariadbd`` runs in it (``ip netns exec``), listening on
  :data:`SERVER_ADDRESS` only;
- a veth pair between the two, :data:`CLIENT_ADDRESS` and :data:`SERVER_ADDRESS` (a /30 that
  exists only inside these two namespaces: no other host, interface or route is touched, and
  the machine's own namespace is left as it was).

:meth:`Network.delay` puts ``netem delay`` on both ends of the pair (half the round trip each
way) for as long as the leg runs, and takes it off again. Needs root (``CAP_NET_ADMIN``),
``ip`` and ``tc`` (iproute2) and a kernel with ``sch_netem``; :func:`create` says which one is
missing (:class:`Refused`) and the leg reports that instead of numbers.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

CLIENT_ADDRESS = "10.200.0.1"
SERVER_ADDRESS = "10.200.0.2"
PREFIX_LENGTH = 30
CLONE_NEWNET = 0x40000000


class Refused(RuntimeError):
    """The machine will not build the delayed network; the message says what refused."""


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().rstrip(".")
        if "netem" in command and "qdisc kind is unknown" in detail:
            detail += " (the kernel has no sch_netem: CONFIG_NET_SCH_NETEM)"
        raise Refused(f"`{' '.join(command)}` failed: {detail}")


def _enter(namespace: str) -> None:
    """Move this process into a named network namespace (Python 3.11 has no ``os.setns``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise Refused(f"setns into {namespace}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


@dataclass
class Network:
    """Two namespaces joined by a veth pair; this process lives in the client's."""

    client: str  # namespace names
    server: str
    client_link: str  # the veth ends
    server_link: str
    delay_ms: float = 0.0  # the round trip netem adds now

    @property
    def server_prefix(self) -> list[str]:
        """The command prefix that runs a program (``mariadbd``) in the servers' namespace."""
        return ["ip", "netns", "exec", self.server]

    def _tc(self, namespace: str, link: str, *args: str) -> None:
        _run("ip", "netns", "exec", namespace, "tc", "qdisc", *args, "dev", link, "root", "netem")

    def set_delay(self, round_trip_ms: float) -> None:
        """``netem delay`` of half ``round_trip_ms`` on each end; 0 takes netem off."""
        ends = ((self.client, self.client_link), (self.server, self.server_link))
        if round_trip_ms <= 0:
            for namespace, link in ends:
                with contextlib.suppress(Refused):
                    self._tc(namespace, link, "del")
        else:
            half = f"{round_trip_ms * 1000 / 2:.0f}us"
            for namespace, link in ends:
                _run(
                    *("ip", "netns", "exec", namespace, "tc", "qdisc", "replace"),
                    *("dev", link, "root", "netem", "delay", half),
                )
        self.delay_ms = max(round_trip_ms, 0.0)

    @contextlib.contextmanager
    def delay(self, round_trip_ms: float) -> Iterator[None]:
        self.set_delay(round_trip_ms)
        try:
            yield
        finally:
            self.set_delay(0)

    def remove(self) -> None:
        """Delete both namespaces (the veth pair goes with them)."""
        for namespace in (self.client, self.server):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)


def create(round_trip_ms: float) -> Network:
    """Build the two namespaces and the veth pair, check that netem accepts ``round_trip_ms``
    on it (when above 0), and move this process into the client's namespace; removed at
    interpreter exit.

    Call it before any thread or connection exists. Raises :class:`Refused` (with nothing left
    behind and this process where it was) when the machine refuses any step.
    """
    if os.geteuid() != 0:
        raise Refused("not root: network namespaces and tc need CAP_NET_ADMIN")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise Refused(f"`{tool}` not found: install iproute2")
    pid = os.getpid()
    network = Network(
        client=f"slb{pid}c",
        server=f"slb{pid}s",
        client_link=f"slb{pid}c0",
        server_link=f"slb{pid}s0",
    )
    try:
        _run("ip", "netns", "add", network.client)
        _run("ip", "netns", "add", network.server)
        _run(
            *("ip", "link", "add", network.client_link, "netns", network.client, "type", "veth"),
            *("peer", "name", network.server_link, "netns", network.server),
        )
        for namespace, link, address in (
            (network.client, network.client_link, CLIENT_ADDRESS),
            (network.server, network.server_link, SERVER_ADDRESS),
        ):
            _run("ip", "-n", namespace, "addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", link)
            _run("ip", "-n", namespace, "link", "set", link, "up")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
        if round_trip_ms > 0:  # netem accepted here, or Refused now rather than mid-run
            network.set_delay(round_trip_ms)
            network.set_delay(0)
        _enter(network.client)
    except Refused:
        network.remove()
        raise
    atexit.register(network.remove)
    return network
