"""A throwaway Redis server for tests and benchmarks: a real ``redis-server`` on a free port,
keeping nothing on disk, stopped at interpreter exit (like :mod:`.mariadb`'s servers)."""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .mariadb import ServerError, free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    """One ``redis-server`` process; :meth:`cache_config` gives a ``CACHES`` entry for it."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="schemaless-redis-"))
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.root / "redis.log"

    def cache_config(self) -> dict[str, Any]:
        """A ``CACHES`` entry for the entity cache on this server (the store's serializer)."""
        from ..cache.backend import cache_from_url

        return cache_from_url(self.url, timeout=1)

    def start(self, timeout: float = 30) -> RedisServer:
        if not Path(REDIS_SERVER).exists():
            raise ServerError(f"redis-server not found ({REDIS_SERVER}); install redis-server")
        if not self.port:
            self.port = free_port()
        self.process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
                "--logfile",
                str(self.log_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None:
                raise ServerError(
                    f"redis-server exited ({self.process.returncode}):\n{self._log()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"redis-server not ready after {timeout}s")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def _log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-2000:]
        return "(no log)"

    def pause(self) -> None:
        """SIGSTOP the server: it holds its connections and answers nothing (a hung cache)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
        shutil.rmtree(self.root, ignore_errors=True)


def start_redis() -> RedisServer:
    """Start a server that stops at interpreter exit."""
    server = RedisServer()
    atexit.register(server.stop)
    try:
        return server.start()
    except Exception:
        server.stop()
        raise
