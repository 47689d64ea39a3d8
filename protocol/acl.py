"""RocketMQ 4.x plain-ACL request signatures and permission values (sans-IO, client and server).

Owns: the extField names a signed request carries (``AccessKey``, ``Signature``,
``SecurityToken``, and ali-ons / C++ ``OnsChannel``), ``request_content`` (RocketMQ's
``AclUtils.combineRequestContent``), ``calc_signature`` (``AclSigner``: base64 of
HMAC-SHA1 keyed with the secret key), ``sign_ext_fields`` (``AclClientRPCHook``), and the
permission bits and their text form (``Permission``: DENY / PUB / SUB / PUB|SUB).

Invariants:
* The signed content is the UTF-8 concatenation of the values of every extField except
  ``Signature``, in ascending order of the field *names* (Java's ``TreeMap``: String
  ``compareTo`` = UTF-16 code-unit order), followed by the raw body bytes. Nothing
  separates the values. The server (RocketMQ's ``PlainAccessValidator``) also leaves out
  ``_UNIQUE_KEY_QUERY``; ``content_variants`` gives both forms.
* Signatures compare in constant time (``signature_matches``).
* Pure functions over str/bytes: no I/O.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Mapping

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
ONS_CHANNEL = "OnsChannel"  # added by ali-ons and the C++ clients ("ALIYUN")
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
    return tuple(int.from_bytes(units[i:i + 2], "big") for i in range(0, len(units), 2))


def request_content(ext_fields: Mapping[str, str], body: bytes | None,
                    exclude: frozenset[str] = frozenset((SIGNATURE,))) -> bytes:
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


def content_variants(ext_fields: Mapping[str, str], body: bytes | None) -> list[bytes]:
    """What a server may check a signature against: RocketMQ's server form (without
    ``_UNIQUE_KEY_QUERY``) first, then the form a Java client signs when it added that
    field before its RPC hook ran (only when the field is present)."""
    out = [request_content(ext_fields, body, _SERVER_EXCLUDE)]
    if UNIQUE_MSG_QUERY_FLAG in ext_fields:
        out.append(request_content(ext_fields, body, _CLIENT_EXCLUDE))
    return out


def sign_ext_fields(ext_fields: Mapping[str, str], body: bytes | None, access_key: str,
                    secret_key: str, security_token: str | None = None) -> dict[str, str]:
    """``AclClientRPCHook.doBeforeRequest``: a copy of ``ext_fields`` with ``AccessKey``
    (and ``SecurityToken`` when given) added and then ``Signature`` over all of them."""
    out = dict(ext_fields)
    out.pop(SIGNATURE, None)
    out[ACCESS_KEY] = access_key
    if security_token is not None:
        out[SECURITY_TOKEN] = security_token
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
    parts = [name for bit, name in ((PUB, "PUB"), (SUB, "SUB")) if perm & bit]
    return "|".join(parts) or "DENY"
