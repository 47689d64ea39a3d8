"""RocketMQ 4.x plain-ACL request signatures and permission values (sans-IO, client and server).

Owns: the extField names a signed request carries (``AccessKey``, ``Signature``,
``SecurityToken``, and ali-ons / C++ ``OnsChannel``), ``request_content`` (RocketMQ's
``AclUtils.combineRequestContent``), ``calc_signature`` (``AclSigner``: base64 of
HMAC-SHA1 keyed with the secret key), ``sign_ext_fields`` (``AclClientRPCHook``), the
permission bits and their text form (``Permission``: DENY / PUB / SUB / PUB|SUB, and
ANY: either), and kairosmq's request binding (``binding_value``, ``find_binding``).

The request binding. RocketMQ's signature covers the extField *values* and the body, not
the request code, not the field names and no time: a captured request can be sent again,
or under another code whose fields line up (a topic read resent as a topic delete).
kairosmq's own clients add one more extField, ``KairosBinding`` =
``kairosmq1:<request code>:<timestamp ms>:<nonce, 32 hex digits>``, before signing, so the
one HMAC covers it. Its name sorts right after ``AccessKey``, so in the signed content it
sits right after the access key's value, and the server finds it *there*, in the content,
whatever the fields are called on the wire: renaming the field, or spreading its
characters over other fields or into the body, cannot hide it without breaking the
signature (the only downgrade RocketMQ's field-name-blind content leaves open). The format
is strict (fixed prefix, ``:`` separators, a 13-digit timestamp, a 32-digit nonce), so the
code cannot be re-cut out of neighbouring values either. A stock client's content is read
as bound only if its values right after the access key spell a whole well-formed binding
(topic and group names cannot hold ``:``; a key or KV value crafted that way by its own
signer only gets that signer's request refused).
Apache RocketMQ brokers verify such requests unchanged (an extra extField is signed like
any other and ignored by their header decoding).

Invariants:
* The signed content is the UTF-8 concatenation of the values of every extField except
  ``Signature``, in ascending order of the field *names* (Java's ``TreeMap``: String
  ``compareTo`` = UTF-16 code-unit order), followed by the raw body bytes. Nothing
  separates the values. The server (RocketMQ's ``PlainAccessValidator``) also leaves out
  ``_UNIQUE_KEY_QUERY``; ``content_forms`` gives both forms (with the names each leaves
  out, which ``find_binding`` needs).
* Signatures compare in constant time (``signature_matches``).
* ``find_binding`` reads the binding from the signed content only; it does not check
  the code, the time or the nonce (server/security/access.py does, with its clock and replay cache).
* Pure functions over str/bytes: no I/O (``binding_value`` takes its time and nonce as
  arguments).
"""

from __future__ import annotations

import base64
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"  # added by ali-ons and the C++ clients ("ALIYUN")
BINDING = "KairosBinding"  # kairosmq clients: request code, time and nonce (module docstring)
BINDING_PREFIX = "kairosmq1:"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG

# Permission (org.apache.rocketmq.acl.common.Permission)
DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3
_PERM_TEXT = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def _java_order(key: str) -> tuple[int, ...]:
    """Java ``String.compareTo`` order (UTF-16 code units), which differs from Python's
    code-point order only for characters above U+FFFF."""
    if key.isascii():
        return tuple(key.encode())
    units = key.encode("utf-16-be")
    return tuple(int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2))


def request_content(
    ext_fields: Mapping[str, str],
    body: bytes | None,
    exclude: frozenset[str] = frozenset((SIGNATURE,)),
) -> bytes:
    """``AclUtils.combineRequestContent``: values sorted by key (``exclude`` left out),
    concatenated, UTF-8, then the body."""
    keys = [k for k in ext_fields if k not in exclude]
    if "".join(keys).isascii():
        keys.sort()  # the common case: Python's order is Java's
    else:
        keys.sort(key=_java_order)
    head = "".join([ext_fields[k] for k in keys]).encode("utf-8")
    return head + body if body else head


def calc_signature(content: bytes, secret_key: str) -> str:
    """``AclSigner.calSignature``: base64(HMAC-SHA1(secret_key as UTF-8, content))."""
    digest = hmac.digest(secret_key.encode("utf-8"), content, "sha1")
    return base64.b64encode(digest).decode("ascii")


def signature_matches(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


_SERVER_EXCLUDE = frozenset((SIGNATURE, UNIQUE_MSG_QUERY_FLAG))
_CLIENT_EXCLUDE = frozenset((SIGNATURE,))


def content_forms(
    ext_fields: Mapping[str, str], body: bytes | None
) -> list[tuple[frozenset[str], bytes]]:
    """What a server may check a signature against, each with the extField names it leaves
    out: RocketMQ's server form (without ``_UNIQUE_KEY_QUERY``) first, then the form a Java
    client signs when it added that field before its RPC hook ran (only when present)."""
    out = [(_SERVER_EXCLUDE, request_content(ext_fields, body, _SERVER_EXCLUDE))]
    if UNIQUE_MSG_QUERY_FLAG in ext_fields:
        out.append((_CLIENT_EXCLUDE, request_content(ext_fields, body, _CLIENT_EXCLUDE)))
    return out


def content_variants(ext_fields: Mapping[str, str], body: bytes | None) -> list[bytes]:
    """The contents of ``content_forms`` alone."""
    return [content for _exclude, content in content_forms(ext_fields, body)]


def sign_ext_fields(
    ext_fields: Mapping[str, str],
    body: bytes | None,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
    binding: str | None = None,
) -> dict[str, str]:
    """``AclClientRPCHook.doBeforeRequest``: a copy of ``ext_fields`` with ``AccessKey``
    (and ``SecurityToken`` when given, and ``KairosBinding`` when ``binding`` is given: a
    ``binding_value``) added and then ``Signature`` over all of them."""
    out = dict(ext_fields)
    out.pop(SIGNATURE, None)
    out.pop(BINDING, None)
    out[ACCESS_KEY] = access_key
    if security_token is not None:
        out[SECURITY_TOKEN] = security_token
    if binding is not None:
        out[BINDING] = binding
    out[SIGNATURE] = calc_signature(request_content(out, body), secret_key)
    return out


def parse_perm(text: str | None) -> int:
    """``Permission.parsePermFromString``: unknown or missing text is DENY."""
    if text is None:
        return DENY
    return _PERM_TEXT.get(str(text).strip(), DENY)


def is_perm_text(text: str) -> bool:
    """Whether ``text`` is one of DENY, PUB, SUB, PUB|SUB, SUB|PUB (``checkResourcePerms``)."""
    return str(text).strip() in _PERM_TEXT


def check_permission(needed: int, owned: int) -> bool:
    """``Permission.checkPermission``."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def perm_text(perm: int) -> str:
    """The file's spelling of a permission value (for remarks and logs)."""
    if perm & DENY:
        return "DENY"
    if perm & ANY:
        return "PUB or SUB"
    parts = [name for bit, name in ((PUB, "PUB"), (SUB, "SUB")) if perm & bit]
    return "|".join(parts) or "DENY"


# ------------------------------------------------------------------ request binding

_BINDING_RE = re.compile(rb"kairosmq1:([1-9][0-9]{0,8}|0):([0-9]{13}):([0-9a-f]{32})")


@dataclass(frozen=True, slots=True)
class Binding:
    """A request's binding as signed: the code it was made for, when, and its nonce."""

    code: int
    timestamp_ms: int
    nonce: str


def binding_value(code: int, timestamp_ms: int, nonce: str) -> str:
    """The ``KairosBinding`` extField's value (``nonce``: 32 lowercase hex digits)."""
    return f"{BINDING_PREFIX}{code}:{timestamp_ms:013d}:{nonce}"


def find_binding(
    ext_fields: Mapping[str, str],
    body: bytes | None,
    exclude: frozenset[str] = _SERVER_EXCLUDE,
    content: bytes | None = None,
) -> Binding | None:
    """The binding in the signed content of a request, read right after the ``AccessKey``
    value whatever the fields are named; ``exclude``: the names left out of the content
    form whose signature verified, ``content``: that form (``content_forms``; built here
    when not given). None when the content carries none there: a content that only starts
    like one (a stock client's user data, e.g. a key) is not one; a bound client's content
    always parses."""
    access_key = ext_fields.get(ACCESS_KEY)
    if access_key is None or ACCESS_KEY in exclude:
        return None
    if content is None:
        content = request_content(ext_fields, body, exclude)
    at = len(access_key.encode("utf-8"))
    mine = _java_order(ACCESS_KEY)
    for key, value in ext_fields.items():  # the values sorted before the access key's
        if (
            key not in exclude
            and key != ACCESS_KEY
            and (key < ACCESS_KEY if key.isascii() else _java_order(key) < mine)
        ):
            at += len(value.encode("utf-8"))
    m = _BINDING_RE.match(content, at)
    return None if m is None else Binding(int(m.group(1)), int(m.group(2)), m.group(3).decode())
