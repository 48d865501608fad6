"""The demo's users, for locust (docs/deployment.md). Each signs up, then reads the public feed,
users' pages and entries, posts, likes and comments. Every response that is not 2xx/3xx is
written to ``LOAD_BAD_FILE`` and every acknowledged post's id to ``LOAD_ACK_FILE`` (JSON lines),
which ``load.run`` checks after the run."""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
import uuid
from typing import Any

from locust import HttpUser, between, events, task

ENTRY = re.compile(r'href="/e/([0-9a-f-]{36})/"')
USER = re.compile(r'href="/u/([A-Za-z0-9_]{1,30})/"')
_lock = threading.Lock()
_started = time.monotonic()


def _append(variable: str, record: dict[str, Any]) -> None:
    path = os.environ.get(variable)
    if not path:
        return
    with _lock, open(path, "a") as out:
        out.write(json.dumps(record) + "\n")


_times: list[str] = []


@events.request.add_listener
def _record_bad(
    request_type: str, name: str, response_time: float, response: Any, exception: Any, **kwargs: Any
) -> None:
    status = getattr(response, "status_code", 0) if response is not None else 0
    if os.environ.get("LOAD_TIMES_FILE"):  # (wall clock, page, ms, status): latency by phase
        with _lock:
            _times.append(
                json.dumps(
                    [round(time.time(), 3), f"{request_type} {name}", round(response_time), status]
                )
            )
            if len(_times) >= 200:
                _flush_times()
    if exception is not None and not status:
        _append(
            "LOAD_BAD_FILE",
            {
                "name": name,
                "status": 0,
                "error": str(exception)[:200],
                "at": round(time.monotonic() - _started, 2),
            },
        )
    elif not 200 <= status < 400:
        _append(
            "LOAD_BAD_FILE",
            {
                "name": name,
                "status": status,
                "unavailable": response.headers.get("X-Schemaless-Unavailable", ""),
                "at": round(time.monotonic() - _started, 2),
            },
        )


def _flush_times() -> None:
    with open(os.environ["LOAD_TIMES_FILE"], "a") as out:
        out.write("".join(line + "\n" for line in _times))
    _times.clear()


@events.quitting.add_listener
def _last_times(**kwargs: Any) -> None:
    if os.environ.get("LOAD_TIMES_FILE"):
        with _lock:
            _flush_times()


class Visitor(HttpUser):
    wait_time = between(0.05, 0.3)

    def on_start(self) -> None:
        self.entries: list[str] = []
        self.users: list[str] = []
        self.name = "u" + uuid.uuid4().hex[:12]
        self.client.get("/signup/", name="/signup/")
        self._post(
            "/signup/",
            {"username": self.name, "email": f"{self.name}@example.com", "name": self.name},
            "POST /signup/",
        )
        self.users.append(self.name)

    def _post(self, path: str, data: dict[str, str], name: str) -> Any:
        token = self.client.cookies.get("csrftoken", "")
        return self.client.post(
            path,
            data={**data, "csrfmiddlewaretoken": token},
            headers={"Referer": self.host + path},
            allow_redirects=False,
            name=name,
        )

    def _learn(self, text: str) -> None:
        self.entries = (ENTRY.findall(text) + self.entries)[:50]
        self.users = list(dict.fromkeys(USER.findall(text) + self.users))[:50]

    @task(6)
    def feed(self) -> None:
        response = self.client.get("/", name="/")
        if response.status_code == 200:
            self._learn(response.text)

    @task(3)
    def user_page(self) -> None:
        if self.users:
            response = self.client.get(f"/u/{random.choice(self.users)}/", name="/u/[name]/")
            if response.status_code == 200:
                self._learn(response.text)

    @task(3)
    def entry(self) -> None:
        if self.entries:
            self.client.get(f"/e/{random.choice(self.entries)}/", name="/e/[id]/")

    @task(2)
    def post(self) -> None:
        n = uuid.uuid4().hex[:10]
        response = self._post(
            "/post/", {"title": f"Load {n}", "link": f"https://example.com/{n}"}, "POST /post/"
        )
        if response.status_code == 302 and response.headers.get("X-Feed-Outcome") == "posted":
            entry = response.headers["X-Feed-Entry"]
            self.entries.insert(0, entry)
            _append("LOAD_ACK_FILE", {"id": entry, "user": self.name})

    @task(1)
    def like(self) -> None:
        if self.entries:
            self._post(f"/e/{random.choice(self.entries)}/like/", {}, "POST /e/[id]/like/")

    @task(1)
    def comment(self) -> None:
        if self.entries:
            self._post(
                f"/e/{random.choice(self.entries)}/comment/",
                {"body": "Nice"},
                "POST /e/[id]/comment/",
            )

    @task(1)
    def static(self) -> None:
        self.client.get("/static/admin/css/base.css", name="/static/")
