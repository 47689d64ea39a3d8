"""Who may do what on the broker and name-server ports: ``access`` (the plain ACL: every
request code classified, ``AclGuard``, the request policy), ``acl_file`` (RocketMQ's
``plain_acl.yml``: accounts, address patterns), ``tls`` (the three TLS modes, the per-connection
TLS layer) and ``install`` (both put on a server's listeners before any opens).
"""

from __future__ import annotations
