"""Helpers of the console tests: a users file, a raw HTTP client, a log that records."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from kairosmq.console.auth import hash_password


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def _add(self, event: str, **kw: Any) -> None:
        self.lines.append((event, kw))

    info = warning = error = _add


def users_file(tmp: Path) -> Path:
    p = tmp / "users.yml"
    p.write_text(
        "users:\n"
        f"  - {{name: vera, role: viewer, password: '{hash_password('view-pw')}'}}\n"
        f"  - {{name: otto, role: operator, password: '{hash_password('op-pw')}'}}\n"
        f"  - {{name: ada, role: admin, password: '{hash_password('admin-pw')}'}}\n"
    )
    return p


class Http:
    """One request per connection, raw bytes: what any HTTP client would send."""

    def __init__(self, port: int, ssl: Any = None) -> None:
        self.port = port
        self.ssl = ssl  # an ssl.SSLContext: talk HTTPS
        self.cookie = ""
        self.csrf = ""
        self.last_headers: dict[str, str] = {}

    async def raw(self, data: bytes, eof: bool = False) -> tuple[int, dict[str, str], bytes]:
        """Send ``data`` (then end the sending side with ``eof``), read one answer (its
        headers, then Content-Length bytes)."""
        host = "localhost" if self.ssl is not None else "127.0.0.1"
        r, w = await asyncio.open_connection(host, self.port, ssl=self.ssl)
        w.write(data)
        if eof:
            w.write_eof()
        await w.drain()
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if k:
                headers[k.strip().lower()] = v.strip()
        body = await asyncio.wait_for(r.readexactly(int(headers["content-length"])), 10)
        w.close()
        self.last_headers = headers
        return int(lines[0].split(" ")[1]), headers, body

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        csrf: bool = True,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = b"" if body is None else orjson.dumps(body)
        h = {"Host": f"127.0.0.1:{self.port}", "Connection": "close", **(headers or {})}
        if self.cookie:
            h["Cookie"] = self.cookie
        if method == "POST":
            h.setdefault("Content-Type", "application/json")
            h["Content-Length"] = str(len(data))
            if csrf and self.csrf:
                h.setdefault("X-CSRF-Token", self.csrf)
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
        status, got, raw = await self.raw(head.encode() + b"\r\n" + data)
        if "set-cookie" in got:
            self.cookie = got["set-cookie"].split(";")[0]
        return status, orjson.loads(raw) if raw else None

    async def login(self, user: str, password: str) -> tuple[int, Any]:
        status, out = await self.call("POST", "/api/login", {"user": user, "password": password})
        if status == 200:
            self.csrf = out["csrf"]
        return status, out
