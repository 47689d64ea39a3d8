"""Shared values of the security tests: the ACL file, accounts, a signed raw client.

Owns: ``ACL_FILE`` (three accounts: a producer that may PUB ``Orders`` only, a consumer
with SUB by default on topics and SUB on group ``OrdersCG`` only, an admin), the
credentials of each, and ``signed_client`` (a ``RemotingClient`` whose requests are
signed - or deliberately mis-signed - as a stock client would send them).
"""

from __future__ import annotations

from collections.abc import Mapping

from kairosmq.client.acl import AclRpcHook, SessionCredentials
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.acl import sign_ext_fields

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


def signed_client(address: str, creds: SessionCredentials | None,
                  *, secret: str | None = None, drop: str | None = None,
                  tamper: tuple[str, str] | None = None) -> RemotingClient:
    """A client signing every request with ``creds``; ``secret`` signs with another secret,
    ``drop`` removes a field after signing, ``tamper`` changes a field after signing."""
    if creds is None:
        return RemotingClient(address)
    if secret is None and drop is None and tamper is None:
        return RemotingClient(address, rpc_hook=AclRpcHook(creds))

    def hook(code: int, ext: Mapping[str, str], body: bytes) -> dict[str, str]:
        out = sign_ext_fields(ext, body, creds.access_key,
                              creds.secret_key if secret is None else secret)
        if drop is not None:
            out.pop(drop, None)
        if tamper is not None:
            out[tamper[0]] = tamper[1]
        return out

    return RemotingClient(address, rpc_hook=hook)
