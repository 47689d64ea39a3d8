"""Shared values of the security tests: the ACL file, accounts, a signed raw client.

Owns: ``ACL_FILE`` (three accounts: a producer that may PUB ``Orders`` only, a consumer
with SUB by default on topics and SUB on group ``OrdersCG`` only, an admin),
``AUDIT_ACL_FILE`` (the same plus ``NOPERM``, an account with no permission: the four
account classes of the audit in issue 29), the credentials of each, ``signed_client`` (a
``RemotingClient`` whose requests are signed - or deliberately mis-signed - as a stock
client would send them), ``SignedPeer`` (a raw ``tests/wire.py`` peer signing each call
as the bundled client does, with the request binding, or as a stock RocketMQ client
does, without it) and ``stock_signed`` (extFields signed as RocketMQ's AclClientRPCHook
signs them).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any

from kairosmq.client.credentials import AclRpcHook, SessionCredentials
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.acl import sign_ext_fields
from kairosmq.protocol.commands import RemotingCommand

from tests.wire import RawPeer

PRODUCER = SessionCredentials("producer_ak", "producer_sk")
CONSUMER = SessionCredentials("consumer_ak", "consumer_sk")
ADMIN = SessionCredentials("admin_ak_1", "admin_sk_1")

ACL_FILE = """
accounts:
  - accessKey: producer_ak
    secretKey: producer_sk
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB
      - Audit=SUB
  - accessKey: consumer_ak
    secretKey: consumer_sk
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    topicPerms:
      - Secret=DENY
    groupPerms:
      - OrdersCG=SUB
  - accessKey: admin_ak_1
    secretKey: admin_sk_1
    admin: true
"""
NOPERM = SessionCredentials("noperm_ak", "noperm_sk")
AUDIT_ACL_FILE = (
    ACL_FILE
    + """
  - accessKey: noperm_ak
    secretKey: noperm_sk
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
"""
)


def stock_signed(
    creds: SessionCredentials, ext: Mapping[str, Any], body: bytes = b""
) -> dict[str, str]:
    """``ext`` (values as strings) signed as RocketMQ 4.9.8's AclClientRPCHook signs it:
    AccessKey and Signature, no request binding."""
    return sign_ext_fields(
        {k: str(v) for k, v in ext.items()}, body, creds.access_key, creds.secret_key
    )


class SignedPeer(RawPeer):
    """A raw peer whose ``call`` signs: ``stock=False`` as the bundled client (with the
    request binding), ``stock=True`` as a stock RocketMQ client (without it)."""

    creds: SessionCredentials
    stock: bool

    @classmethod
    async def open(
        cls,
        address: str,
        creds: SessionCredentials,
        *,
        stock: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> SignedPeer:
        host, port = address.rsplit(":", 1)
        r, w = await asyncio.open_connection(host, int(port), ssl=tls)
        peer = cls(r, w)
        peer.creds, peer.stock = creds, stock
        return peer

    async def call(
        self,
        code: int,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        binary: bool = False,
        timeout: float = 5.0,
    ) -> RemotingCommand:
        fields = {k: str(v) for k, v in (ext or {}).items()}
        signed = (
            stock_signed(self.creds, fields, body)
            if self.stock
            else AclRpcHook(self.creds)(int(code), fields, body)
        )
        return await super().call(code, signed, body, binary=binary, timeout=timeout)


def signed_client(
    address: str,
    creds: SessionCredentials | None,
    *,
    secret: str | None = None,
    drop: str | None = None,
    tamper: tuple[str, str] | None = None,
) -> RemotingClient:
    """A client signing every request with ``creds``; ``secret`` signs with another secret,
    ``drop`` removes a field after signing, ``tamper`` changes a field after signing."""
    if creds is None:
        return RemotingClient(address)
    if secret is None and drop is None and tamper is None:
        return RemotingClient(address, rpc_hook=AclRpcHook(creds))

    def hook(code: int, ext: Mapping[str, str], body: bytes) -> dict[str, str]:
        out = sign_ext_fields(
            ext, body, creds.access_key, creds.secret_key if secret is None else secret
        )
        if drop is not None:
            out.pop(drop, None)
        if tamper is not None:
            out[tamper[0]] = tamper[1]
        return out

    return RemotingClient(address, rpc_hook=hook)
