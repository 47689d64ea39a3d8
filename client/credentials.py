"""Client side of ACL and TLS: credentials, the request-signing hook, the TLS context.

Owns: ``SessionCredentials`` (RocketMQ's: access key, secret key, optional security
token), ``credentials_from`` (explicit values, else the environment: ``KAIROS_ACCESS_KEY``
/ ``KAIROS_SECRET_KEY``, else ``ROCKETMQ_ACCESS_KEY`` / ``ROCKETMQ_SECRET_KEY``),
``AclRpcHook`` (RocketMQ's ``AclClientRPCHook``: called by ``client/remoting.py`` on every
request just before it is encoded, it returns the extFields with ``AccessKey``,
``KairosBinding`` and ``Signature`` added) and ``client_ssl_context`` (``tls=True`` or an
``ssl.SSLContext``).

Invariants:
* The signature covers the request exactly as encoded: every extField (sorted by name,
  ``Signature`` left out) and the body (``protocol/acl.py``). The caller's dict is never
  changed (a copy is signed).
* Every signed request carries a fresh binding (protocol/acl.py): its request code, the
  wall-clock time in ms and a random 128-bit nonce, signed with the rest. A retry is
  signed again (a new nonce), so a kairosmq broker refuses a replayed or re-coded copy
  and never a genuine request. Apache RocketMQ brokers verify and ignore the field.
* Only requests are signed; answers to broker-initiated requests are not (as RocketMQ).
* ``tls=True`` verifies the broker's certificate against the system CAs and its host
  name; a private CA or a self-signed broker needs an ``ssl.SSLContext`` made for it.
"""

from __future__ import annotations

import os
import secrets
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kairosmq.protocol.acl import binding_value, sign_ext_fields

ENV_NAMES = (
    ("KAIROS_ACCESS_KEY", "KAIROS_SECRET_KEY"),
    ("ROCKETMQ_ACCESS_KEY", "ROCKETMQ_SECRET_KEY"),
)

RpcHook = Callable[[int, Mapping[str, str], bytes], dict[str, str]]


@dataclass(frozen=True)
class SessionCredentials:
    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never print the secret
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key='***')"


def credentials_from(
    access_key: str | None = None,
    secret_key: str | None = None,
    env: Mapping[str, str] | None = None,
) -> SessionCredentials | None:
    """Credentials from the arguments, else from the environment; None when there are
    none. One of the two given without the other is a ``ValueError``."""
    if access_key is None and secret_key is None:
        environ = os.environ if env is None else env
        for ak_name, sk_name in ENV_NAMES:
            ak, sk = environ.get(ak_name), environ.get(sk_name)
            if ak or sk:
                access_key, secret_key = ak, sk
                if not (ak and sk):
                    raise ValueError(f"set both {ak_name} and {sk_name}, or neither")
                break
    if access_key is None and secret_key is None:
        return None
    if not access_key or not secret_key:
        raise ValueError("access_key and secret_key go together: give both, or neither")
    return SessionCredentials(access_key, secret_key)


class AclRpcHook:
    """Signs every request with ``credentials`` (``AclClientRPCHook.doBeforeRequest``),
    binding it to its request code, the time and a nonce (``bind=False``: RocketMQ's
    signature alone, byte for byte what a stock client sends)."""

    def __init__(
        self,
        credentials: SessionCredentials,
        *,
        bind: bool = True,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.credentials = credentials
        self.bind = bind
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    def __call__(self, code: int, ext_fields: Mapping[str, str], body: bytes) -> dict[str, str]:
        c = self.credentials
        binding = (
            binding_value(int(code), self.clock_ms(), secrets.token_hex(16)) if self.bind else None
        )
        return sign_ext_fields(
            ext_fields, body, c.access_key, c.secret_key, c.security_token, binding
        )


def rpc_hook_for(credentials: SessionCredentials | None) -> RpcHook | None:
    return None if credentials is None else AclRpcHook(credentials)


def client_ssl_context(tls: bool | ssl.SSLContext | None) -> ssl.SSLContext | None:
    """The context to connect with: None (plain), the given one, or for ``True`` the
    system default (certificate and host name verified)."""
    if tls is None or tls is False:
        return None
    if isinstance(tls, ssl.SSLContext):
        return tls
    if tls is True:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    raise TypeError(f"tls must be True, False or an ssl.SSLContext, got {type(tls).__name__}")
