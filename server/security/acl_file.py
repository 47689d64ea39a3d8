"""The plain-ACL file (RocketMQ 4.x ``plain_acl.yml``): parsing, accounts, address patterns.

Owns: ``AclRules`` (global white addresses + accounts by access key), ``Account``,
``AddressPattern`` (RocketMQ's ``RemoteAddressStrategyFactory`` forms), ``load_rules`` /
``parse_rules`` and ``AclConfigError``.

The file (RocketMQ's names)::

    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.{1,2}"]
    accounts:
      - accessKey: RocketMQ            # longer than 6 characters
        secretKey: "12345678"          # longer than 6 characters
        whiteRemoteAddress: 192.168.1.1-5   # optional: trusted without signature
        admin: false
        defaultTopicPerm: DENY         # DENY | PUB | SUB | PUB|SUB (default DENY)
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB"]
        groupPerms: ["groupA=SUB"]

Address patterns: ``*`` (any), an exact IPv4/IPv6 address, ``a.b.c.{x,y}`` (a list in
the last part), ``x,y,z`` (a list of addresses), and per-part ``*`` or ``n-m`` ranges:
``192.168.*`` (missing trailing parts mean any), ``192.168.1.1-5``, ``10.*.*.*``. IPv6:
exact addresses and lists; ``*`` / ``n-m`` hextets in the fully written form.

Invariants:
* Parsing is all or nothing: any bad entry raises ``AclConfigError`` naming it (never
  the secret), so a reload that fails keeps the rules in force (``server/security/access.py``).
* Scalars are read as text, as RocketMQ does (``secretKey: 12345678`` is "12345678").
* Unlike RocketMQ, which reads an unknown permission word as DENY, a misspelt one
  (``PUB/SUB``) is an error: it would otherwise lock the account out silently.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any  # Any: YAML values of plain_acl.yml, before their checks

from kairosmq.protocol.acl import DENY, is_perm_text, parse_perm

KEY_MIN_LENGTH = 6  # AclConstants.ACCESS_KEY_MIN_LENGTH: keys must be longer than this


class AclConfigError(ValueError):
    """The ACL file cannot be used; the message names the file entry at fault."""


def _ip_parts(addr: str) -> tuple[int, ...] | None:
    """An address as integer parts (4 for IPv4, 8 for IPv6), IPv4-mapped IPv6 as IPv4."""
    try:
        ip = ipaddress.ip_address(addr.strip().strip("[]").split("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        return tuple(ip.packed)
    raw = ip.packed
    return tuple(int.from_bytes(raw[i : i + 2], "big") for i in range(0, 16, 2))


@dataclass(frozen=True)
class AddressPattern:
    """One ``whiteRemoteAddress`` / ``globalWhiteRemoteAddresses`` entry."""

    text: str
    any: bool = False
    exact: frozenset[tuple[int, ...]] = frozenset()
    # per-part inclusive ranges; parts beyond the list match anything
    ranges: tuple[tuple[int, int], ...] = ()
    v6: bool = False

    def match(self, peer_ip: str) -> bool:
        if self.any:
            return True
        parts = _ip_parts(peer_ip)
        if parts is None:
            return False
        if self.exact:
            return parts in self.exact
        if not self.ranges or (len(parts) == 8) != self.v6:
            return False
        return all(lo <= p <= hi for p, (lo, hi) in zip(parts, self.ranges, strict=False))

    @classmethod
    def parse(cls, text: object) -> AddressPattern | None:
        """The pattern, or None for a blank entry (RocketMQ: blank matches nothing)."""
        s = "" if text is None else str(text).strip()
        if not s:
            return None
        if s in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
            return cls(s, any=True)
        if s.endswith("}"):
            head, brace, tail = s.rpartition("{")
            if not brace or not head or head[-1] not in ".:":
                raise AclConfigError(f"address {s!r}: a {{...}} list must be the last part")
            return cls._addresses(s, [head + x.strip() for x in tail[:-1].split(",")])
        if "," in s:
            return cls._addresses(s, [x.strip() for x in s.split(",")])
        if "*" in s or "-" in s:
            return cls._ranges(s)
        return cls._addresses(s, [s])

    @classmethod
    def _addresses(cls, text: str, addrs: list[str]) -> AddressPattern:
        out = set()
        for a in addrs:
            parts = _ip_parts(a) if a.count(".") == 3 or ":" in a else None
            if parts is None:
                raise AclConfigError(f"address {text!r}: {a!r} is not an IP address")
            out.add(parts)
        return cls(text, exact=frozenset(out))

    @classmethod
    def _ranges(cls, text: str) -> AddressPattern:
        v6 = ":" in text
        items = text.split(":" if v6 else ".")
        limit, base, count = (0xFFFF, 16, 8) if v6 else (255, 10, 4)
        if not items or len(items) > count or "" in items:
            raise AclConfigError(
                f"address {text!r}: expected at most {count} parts, "
                f"each a number, '*' or 'n-m'" + (" (write IPv6 in full, no '::')" if v6 else "")
            )
        ranges: list[tuple[int, int]] = []
        for item in items:
            item = item.strip()
            try:
                if item == "*":
                    lo, hi = 0, limit
                elif "-" in item:
                    a, _, b = item.partition("-")
                    lo, hi = int(a, base), int(b, base)
                else:
                    lo = hi = int(item, base)
            except ValueError:
                raise AclConfigError(
                    f"address {text!r}: part {item!r} is not a number, '*' or 'n-m'"
                ) from None
            if not 0 <= lo <= hi <= limit:
                raise AclConfigError(f"address {text!r}: part {item!r} is out of 0..{limit}")
            ranges.append((lo, hi))
        return cls(text, ranges=tuple(ranges), v6=v6)


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    white_address: AddressPattern | None = None
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AclRules:
    global_white: tuple[AddressPattern, ...] = ()
    accounts: dict[str, Account] = field(default_factory=dict)

    def white_listed(self, peer_ip: str) -> bool:
        return any(p.match(peer_ip) for p in self.global_white)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise AclConfigError(f"expected a text value, got {type(value).__name__}")


def _list(d: dict[str, Any], key: str, where: str) -> list[Any]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{where}{key}: expected a list")
    return value


def _resource_perms(entries: list[Any], key: str, where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in entries:
        text = _text(entry) or ""
        items = [x.strip() for x in text.split("=")]
        if len(items) != 2 or not items[0]:
            raise AclConfigError(
                f"{where}{key}: {text!r} is not 'name=PERM' (for example topicA=SUB)"
            )
        if not is_perm_text(items[1]):
            raise AclConfigError(
                f"{where}{key}: {text!r}: the permission must be DENY, PUB, SUB or PUB|SUB"
            )
        out[items[0]] = parse_perm(items[1])
    return out


def _perm(d: dict[str, Any], key: str, where: str) -> int:
    text = _text(d.get(key))
    if text is None:
        return DENY  # PlainAccessResource: default perm 1 (DENY)
    if not is_perm_text(text):
        raise AclConfigError(f"{where}{key}: {text!r} must be DENY, PUB, SUB or PUB|SUB")
    return parse_perm(text)


def _account(i: int, d: Any) -> Account:
    where = f"accounts[{i}]."
    if not isinstance(d, dict):
        raise AclConfigError(f"accounts[{i}]: expected a mapping")
    access_key = _text(d.get("accessKey"))
    secret_key = _text(d.get("secretKey"))
    if access_key is None or len(access_key) <= KEY_MIN_LENGTH:
        raise AclConfigError(
            f"{where}accessKey: missing or not longer than {KEY_MIN_LENGTH} characters"
        )
    where = f"accounts[{i}] (accessKey {access_key}): "
    if secret_key is None or len(secret_key) <= KEY_MIN_LENGTH:
        raise AclConfigError(
            f"{where}secretKey: missing or not longer than {KEY_MIN_LENGTH} characters"
        )
    admin = d.get("admin", False)
    if isinstance(admin, str):
        admin = admin.strip().lower() == "true"
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white_address=AddressPattern.parse(d.get("whiteRemoteAddress")),
        admin=bool(admin),
        default_topic_perm=_perm(d, "defaultTopicPerm", where),
        default_group_perm=_perm(d, "defaultGroupPerm", where),
        topic_perms=_resource_perms(_list(d, "topicPerms", where), "topicPerms", where),
        group_perms=_resource_perms(_list(d, "groupPerms", where), "groupPerms", where),
    )


def parse_rules(data: Any) -> AclRules:
    """Rules from the file's parsed YAML (a mapping; an empty file is no rules)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AclConfigError(
            "the ACL file must be a mapping with globalWhiteRemoteAddresses and/or accounts"
        )
    white = []
    for entry in _list(data, "globalWhiteRemoteAddresses", ""):
        pattern = AddressPattern.parse(entry)
        if pattern is not None:
            white.append(pattern)
    accounts: dict[str, Account] = {}
    for i, d in enumerate(_list(data, "accounts", "")):
        acc = _account(i, d)
        if acc.access_key in accounts:
            raise AclConfigError(f"accounts[{i}]: accessKey {acc.access_key} appears twice")
        accounts[acc.access_key] = acc
    return AclRules(tuple(white), accounts)


def yaml_problem() -> str | None:
    """Why ACL files cannot be read here (PyYAML missing), or None."""
    try:
        import yaml  # noqa: F401
    except ImportError:
        return "reading the ACL file needs PyYAML: pip install 'kairosmq[acl]' (or pyyaml)"
    return None


def parse_text(text: str | bytes) -> AclRules:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise AclConfigError(f"not valid YAML: {err}") from None
    return parse_rules(data)


def load_rules(path: Path) -> AclRules:
    """Read and parse the file; ``AclConfigError`` (or ``OSError``) when it is unusable."""
    if (problem := yaml_problem()) is not None:
        raise AclConfigError(problem)
    return parse_text(Path(path).read_bytes())
