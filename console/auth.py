"""Who may use the console: accounts, roles, logins, CSRF tokens and login throttling.

Owns: ``Users`` (the users file: ``users: [{name, role, password}]``, YAML, passwords as
``hash_password`` hashes: scrypt, N=2^14, r=8, p=1, a 16-byte salt), ``ROLES``
(``viewer``: every read; ``operator``: also the actions: reschedule, run now, recall,
DLQ resend, ending a half message; ``admin``: also creating and deleting topics and
resetting a group's offsets), ``Logins`` (random login tokens in an
HttpOnly, SameSite=Strict cookie, an idle and an absolute expiry, at most
``MAX_LOGINS``) and ``Throttle`` (failed logins per name and per address).

Invariants:
* A password is only ever compared as a scrypt hash, in constant time; an unknown name
  costs the same hash as a known one (no user enumeration by timing).
* A login's CSRF token is random, returned at login and by ``GET /api/me``, and
  required (``X-CSRF-Token``) on every request that changes anything; tokens and
  passwords never appear in logs.
* After ``MAX_FAILURES`` failed logins for a name (``MAX_ADDRESS_FAILURES`` from an
  address) within ``FAIL_WINDOW_S`` further attempts are refused (429) until the window
  passes; the tables are bounded.
* The users file is read all or nothing at start: a bad entry is a start-up error naming it.
  A missing one is created (``create_first_admin``) with one ``admin`` user, mode 0600,
  never over an existing file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROLES = ("viewer", "operator", "admin")  # each may do what the ones before it may
SCRYPT = {"n": 2**14, "r": 8, "p": 1}
MAX_LOGINS = 10_000
IDLE_S = 30 * 60
ABSOLUTE_S = 12 * 3600
MAX_FAILURES = 5  # per user name
MAX_ADDRESS_FAILURES = 20  # per client address (several people behind one address)
FAIL_WINDOW_S = 300.0
COOKIE = "kairos_console"
_DUMMY = "scrypt$" + "00" * 16 + "$" + "00" * 32


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **SCRYPT)
    return f"scrypt${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, salt_hex, digest_hex = stored.split("$")
        salt, digest = bytes.fromhex(salt_hex), bytes.fromhex(digest_hex)
    except ValueError:
        return False
    if kind != "scrypt" or len(salt) < 8 or len(digest) != 32:
        return False
    got = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **SCRYPT)
    return hmac.compare_digest(got, digest)


class UsersFileError(ValueError):
    """The users file cannot be used (the message names the file and the entry)."""


FIRST_ADMIN = "admin"


def create_first_admin(path: Path, password: str) -> None:
    """Write a new users file holding one ``admin`` user with ``password`` (hashed), mode
    0600; refuses (FileExistsError) to replace a file that exists."""
    text = (
        "users:\n"
        + f"  - {{name: {FIRST_ADMIN}, role: admin, password: '{hash_password(password)}'}}\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: str
    password: str  # the hash


class Users:
    def __init__(self, users: dict[str, User]) -> None:
        self.users = users

    @classmethod
    def load(cls, path: Path) -> Users:
        try:
            raw = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as err:
            raise UsersFileError(f"{path}: {err}") from None
        entries = raw.get("users") if isinstance(raw, dict) else None
        if not isinstance(entries, list) or not entries:
            raise UsersFileError(f"{path}: give `users:` as a list of {{name, role, password}}")
        users: dict[str, User] = {}
        for i, e in enumerate(entries, start=1):
            if not isinstance(e, dict):
                raise UsersFileError(f"{path}: user {i} is not a mapping")
            name, role, pw = e.get("name"), e.get("role"), e.get("password")
            if not isinstance(name, str) or not name or len(name) > 64:
                raise UsersFileError(f"{path}: user {i} has no name (1-64 characters)")
            if role not in ROLES:
                raise UsersFileError(f"{path}: user {name}: role must be one of {ROLES}")
            if not isinstance(pw, str) or not pw.startswith("scrypt$") or pw.count("$") != 2:
                raise UsersFileError(
                    f"{path}: user {name}: password must be a hash from "
                    f"`kairosmq console hash-password`"
                )
            if name in users:
                raise UsersFileError(f"{path}: user {name} is given twice")
            users[name] = User(name, role, pw)
        return cls(users)

    def check(self, name: str, password: str) -> User | None:
        """The user if ``password`` is theirs (blocking: one scrypt; call in a thread)."""
        user = self.users.get(name)
        ok = verify_password(password, user.password if user is not None else _DUMMY)
        return user if ok and user is not None else None


@dataclass(slots=True)
class Login:
    token: str
    user: str
    role: str
    csrf: str
    created: float
    seen: float


class Logins:
    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self._by_token: OrderedDict[str, Login] = OrderedDict()

    def create(self, user: User) -> Login:
        now = self.clock()
        s = Login(
            secrets.token_urlsafe(32), user.name, user.role, secrets.token_urlsafe(32), now, now
        )
        self._by_token[s.token] = s
        while len(self._by_token) > MAX_LOGINS:
            self._by_token.popitem(last=False)
        return s

    def get(self, token: str | None) -> Login | None:
        if not token:
            return None
        s = self._by_token.get(token)
        if s is None:
            return None
        now = self.clock()
        if now - s.seen > IDLE_S or now - s.created > ABSOLUTE_S:
            self._by_token.pop(token, None)
            return None
        s.seen = now
        self._by_token.move_to_end(token)
        return s

    def drop(self, token: str) -> None:
        self._by_token.pop(token, None)


def csrf_ok(login: Login, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(login.csrf.encode(), str(sent).encode())


class Throttle:
    """Failed logins per key (a name, an address) within ``FAIL_WINDOW_S``; bounded."""

    def __init__(self, clock: Any = time.monotonic, max_keys: int = 50_000) -> None:
        self.clock = clock
        self.max_keys = max_keys
        self._fails: OrderedDict[str, list[float]] = OrderedDict()

    def blocked(self, name_key: str, address_key: str) -> bool:
        now = self.clock()
        for k, limit in ((name_key, MAX_FAILURES), (address_key, MAX_ADDRESS_FAILURES)):
            recent = [t for t in self._fails.get(k, []) if now - t < FAIL_WINDOW_S]
            if recent:
                self._fails[k] = recent
            else:
                self._fails.pop(k, None)
            if len(recent) >= limit:
                return True
        return False

    def failed(self, *keys: str) -> None:
        now = self.clock()
        for k in keys:
            self._fails.setdefault(k, []).append(now)
            self._fails.move_to_end(k)
        while len(self._fails) > self.max_keys:
            self._fails.popitem(last=False)

    def succeeded(self, name: str) -> None:
        self._fails.pop(name, None)
