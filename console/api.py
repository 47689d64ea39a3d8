"""The console's HTTP API: logging in, signed-in browsers, the broker calls behind each route.

Owns: ``ConsoleApi`` (the route table, the role and CSRF checks of each route, the
mapping of a route's parameters to the broker request's fields, the answers) and
``Brokers`` (the brokers the console may reach: the name server's cluster info, or one
``--broker``; one ``RemotingPool`` signed with the console's own ACL account; every
request goes to an address of the cluster info).

Routes (JSON in, JSON out; ``broker`` names a broker of the cluster, default the only
or first master), after the pages (``GET /``, ``/assets/app.js``, ``/assets/app.css``:
``console/assets/``, served to anyone, offline: no other origin is ever named):

* ``POST /api/login`` ``{user, password}`` -> ``{user, role, csrf}`` and the login
  cookie; ``POST /api/logout``; ``GET /api/me``; ``GET /api/brokers``;
* viewer: ``GET /api/pending`` (907), ``GET /api/pending/histogram`` (908),
  ``GET /api/dlq`` (911), ``GET /api/transactions`` (906), and the views of
  ``console/views.py``: ``GET /api/cluster``, ``/api/topics``, ``/api/groups``,
  ``/api/groups/detail``, ``/api/timers``; ``GET /api/journey`` (``console/journey.py``:
  a message's journey from QUERY_MESSAGE, 907 and GET_CONSUME_STATS);
  ``GET /api/report`` (``console/report.py``: the newest Spark report under
  ``--spark-report-dir``);
* operator: ``POST /api/pending/reschedule``, ``/run-now`` (909), ``/recall`` (910),
  ``/bulk`` (``console/bulk.py``: a dry-run count, then 909/910 per message after the
  count is confirmed), ``POST /api/dlq/resend`` (903; one row with ``queueId`` and
  ``queueOffset``), ``POST /api/transactions/end`` (912);
* admin (``console/actions.py``): ``POST /api/topics/create`` (17),
  ``/api/topics/delete`` (215, 216), ``POST /api/groups/reset-offset`` (222, or 29/30
  and 15 for a group with no client online).

Invariants:
* Every route but login needs a live login (401); every POST but login needs the
  login's CSRF token in ``X-CSRF-Token`` (403), a JSON body, and, when the browser
  sends an ``Origin``, one naming this console's host (403); actions need the operator
  role, topic and offset writes the admin role (403; viewer < operator < admin).
  Each action is logged (``console.action``: user, route, broker, what it
  named, the broker's answer code).
* Only the field names a route declares reach the broker, each at most ``MAX_FIELD``
  characters; the broker checks their values and its refusals come back as 422 with
  its remark. A broker that is not in the cluster is never contacted (no address comes
  from a request).
* The console imports nothing from ``kairosmq.server``: it is a protocol client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from kairosmq.client.admin import cluster_json
from kairosmq.client.errors import ClientError
from kairosmq.client.remoting import RemotingPool
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand

from . import actions, bulk, journey, report, views
from .auth import COOKIE, ROLES, Login, Logins, Throttle, Users, csrf_ok
from .http import HttpError, Request, Response
from .views import BrokerError

MAX_FIELD = 256
_HERE = Path(__file__).resolve().parent / "assets"
# the browser pages, offline (no other origin): path -> (content type, bytes), read once
ASSETS: dict[str, tuple[str, bytes]] = {
    path: (ctype, (_HERE / name).read_bytes())
    for path, name, ctype in (
        ("/", "index.html", "text/html; charset=utf-8"),
        ("/assets/app.js", "app.js", "text/javascript; charset=utf-8"),
        ("/assets/app.css", "app.css", "text/css; charset=utf-8"),
    )
}
VIEWER, OPERATOR, ADMIN = ROLES


class Brokers:
    """The brokers behind the console and the calls to them."""

    def __init__(
        self,
        pool: RemotingPool,
        *,
        namesrv: str | None,
        broker: str | None,
        timeout: float = 10.0,
    ) -> None:
        self.pool = pool
        self.namesrv = namesrv
        self.fixed = broker
        self.timeout = timeout
        self._info: dict[str, Any] = {}
        self._fetched = 0.0

    async def cluster_info(self) -> dict[str, Any]:
        """The name server's cluster info (GET_BROKER_CLUSTER_INFO, cached for 10 s):
        ``clusterAddrTable`` and ``brokerAddrTable`` (broker name -> id -> address);
        one ``--broker`` is the master ``broker`` of a cluster ``-``."""
        if self.fixed is not None:
            return {
                "clusterAddrTable": {"-": ["broker"]},
                "brokerAddrTable": {"broker": {"brokerAddrs": {"0": self.fixed}}},
            }
        if time.monotonic() - self._fetched > 10 or not self._info:
            try:
                resp = await self.pool.invoke(
                    str(self.namesrv), R.GET_BROKER_CLUSTER_INFO, {}, timeout=self.timeout
                )
            except (ClientError, OSError) as err:
                raise HttpError(
                    502, f"name server {self.namesrv} cannot be reached: {err}"
                ) from None
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError(resp.code, resp.remark or "cluster info refused")
            self._info = cluster_json(resp.body)
            self._fetched = time.monotonic()
        return self._info

    async def namesrv_call(self, code: int, fields: dict[str, str]) -> RemotingCommand:
        """One request to the name server (any answer code comes back)."""
        try:
            return await self.pool.invoke(str(self.namesrv), code, fields, timeout=self.timeout)
        except (ClientError, OSError) as err:
            raise HttpError(502, f"name server {self.namesrv} cannot be reached: {err}") from None

    async def masters(self) -> dict[str, str]:
        """Broker name -> master address."""
        table = (await self.cluster_info()).get("brokerAddrTable", {})
        return {
            n: str(b["brokerAddrs"]["0"])
            for n, b in sorted(table.items())
            if b.get("brokerAddrs", {}).get("0")
        }

    async def known(self, addr: str) -> bool:
        """Whether ``addr`` is a broker (master or slave) of the cluster info."""
        table = (await self.cluster_info()).get("brokerAddrTable", {})
        return any(addr in map(str, b.get("brokerAddrs", {}).values()) for b in table.values())

    async def address(self, name: str | None) -> str:
        masters = await self.masters()
        if not masters:
            raise HttpError(502, "the name server knows no master broker")
        if not name:
            return next(iter(masters.values()))
        if name not in masters:
            raise HttpError(404, f"no broker {name[:64]!r} in the cluster")
        return masters[name]

    async def raw(
        self,
        addr: str,
        code: int,
        fields: dict[str, str],
        *,
        accept: tuple[int, ...] | None = (),
    ) -> RemotingCommand:
        """One request to ``addr`` (an address of the cluster info): the answer if it
        succeeded or its code is in ``accept`` (``None``: any code), else BrokerError."""
        if not await self.known(addr):
            raise HttpError(404, f"no broker at {addr[:64]!r} in the cluster")
        try:
            resp = await self.pool.invoke(addr, code, fields, timeout=self.timeout)
        except (ClientError, OSError) as err:
            raise HttpError(502, f"broker {addr} cannot be reached: {err}") from None
        if resp.code != ResponseCode.SUCCESS and accept is not None and resp.code not in accept:
            raise BrokerError(resp.code, resp.remark or f"code {resp.code}")
        return resp

    async def call(self, name: str | None, code: int, fields: dict[str, str]) -> Any:
        resp = await self.raw(await self.address(name), code, fields)
        return orjson.loads(resp.body) if resp.body else {}


Route = Callable[[Request, Login], Awaitable[Response]]
AdminWrite = Callable[[Brokers, str | None, dict[str, Any]], Awaitable[Any]]


def _fields(src: dict[str, Any], names: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for n in names:
        v = src.get(n)
        if v is None or v == "":
            continue
        text = ("true" if v else "false") if isinstance(v, bool) else str(v)
        if len(text) > MAX_FIELD:
            raise HttpError(400, f"{n} is longer than {MAX_FIELD} characters")
        out[n] = text
    return out


_PENDING = ("cursor", "limit", "topic", "msgId", "key", "kind", "fromMs", "toMs", "maxScan")
_HISTOGRAM = ("unit", "topic", "kind", "fromMs", "toMs", "cursor", "maxScan")
_NAMES = ("ref", "msgId", "key", "topic")


class ConsoleApi:
    def __init__(
        self,
        users: Users,
        brokers: Brokers,
        *,
        log: Any,
        secure_cookie: bool = False,
        logins: Logins | None = None,
        spark_report_dir: Path | None = None,
    ) -> None:
        self.users = users
        self.spark_report_dir = spark_report_dir
        self.brokers = brokers
        self.log = log
        self.secure_cookie = secure_cookie
        self.logins = logins or Logins()
        self.throttle = Throttle()
        # (method, path) -> (role needed, route)
        self.routes: dict[tuple[str, str], tuple[str, Route]] = {
            ("GET", "/api/me"): (VIEWER, self.me),
            ("POST", "/api/logout"): (VIEWER, self.logout),
            ("GET", "/api/brokers"): (VIEWER, self.list_brokers),
            ("GET", "/api/pending"): (VIEWER, self.pending),
            ("GET", "/api/pending/histogram"): (VIEWER, self.histogram),
            ("GET", "/api/dlq"): (VIEWER, self.dlq),
            ("GET", "/api/transactions"): (VIEWER, self.transactions),
            ("GET", "/api/cluster"): (VIEWER, self.cluster),
            ("GET", "/api/topics"): (VIEWER, self.topics),
            ("GET", "/api/groups"): (VIEWER, self.groups),
            ("GET", "/api/groups/detail"): (VIEWER, self.group),
            ("GET", "/api/timers"): (VIEWER, self.timers),
            ("GET", "/api/journey"): (VIEWER, self.journey),
            ("GET", "/api/report"): (VIEWER, self.spark_report),
            ("POST", "/api/pending/reschedule"): (OPERATOR, self.reschedule),
            ("POST", "/api/pending/run-now"): (OPERATOR, self.run_now),
            ("POST", "/api/pending/recall"): (OPERATOR, self.recall),
            ("POST", "/api/pending/bulk"): (OPERATOR, self.bulk),
            ("POST", "/api/dlq/resend"): (OPERATOR, self.dlq_resend),
            ("POST", "/api/transactions/end"): (OPERATOR, self.end_half),
            ("POST", "/api/topics/create"): (ADMIN, self.create_topic),
            ("POST", "/api/topics/delete"): (ADMIN, self.delete_topic),
            ("POST", "/api/groups/reset-offset"): (ADMIN, self.reset_offset),
        }

    # ------------------------------------------------------------------ dispatch

    async def handle(self, req: Request) -> Response:
        asset = ASSETS.get(req.path)
        if asset is not None:
            if req.method != "GET":
                return Response.error(405, f"{req.method} is not allowed on {req.path}")
            return Response(200, asset[1], content_type=asset[0])
        if req.method == "POST" and req.path == "/api/login":
            self._same_origin(req)
            return await self.login(req)
        entry = self.routes.get((req.method, req.path))
        if entry is None:
            if any(path == req.path for _m, path in self.routes):
                return Response.error(405, f"{req.method} is not allowed on {req.path}")
            return Response.error(404, "no such route")
        role, route = entry
        login = self.logins.get(req.cookies.get(COOKIE))
        if login is None:
            return Response.error(401, "log in first (POST /api/login)")
        if req.method != "GET":
            self._same_origin(req)
            if not csrf_ok(login, req.headers.get("x-csrf-token")):
                return Response.error(403, "missing or wrong X-CSRF-Token")
        if ROLES.index(login.role) < ROLES.index(role):
            return Response.error(403, f"{req.path} needs the {role} role")
        try:
            return await route(req, login)
        except BrokerError as err:
            return Response.error(422, err.remark, brokerCode=err.code)

    @staticmethod
    def _same_origin(req: Request) -> None:
        origin = req.headers.get("origin")
        if origin is None:
            return
        host = req.headers.get("host", "")
        if origin.split("://", 1)[-1] != host:
            raise HttpError(403, "cross-origin request refused")

    # ------------------------------------------------------------------ logins

    async def login(self, req: Request) -> Response:
        body = req.json()
        name, password = body.get("user"), body.get("password")
        if not isinstance(name, str) or not isinstance(password, str):
            return Response.error(400, "give user and password as strings")
        if len(name) > 64 or len(password) > 1024:
            return Response.error(400, "user or password too long")
        ip = req.peer.rsplit(":", 1)[0]
        if self.throttle.blocked(f"u:{name}", f"a:{ip}"):
            return Response.error(429, "too many failed logins; wait a few minutes")
        user = await asyncio.to_thread(self.users.check, name, password)
        if user is None:
            self.throttle.failed(f"u:{name}", f"a:{ip}")
            self.log.warning("console.login_failed", user=name, peer=req.peer)
            return Response.error(401, "wrong user or password")
        self.throttle.succeeded(f"u:{name}")
        s = self.logins.create(user)
        self.log.info("console.login", user=user.name, role=user.role, peer=req.peer)
        resp = Response.json({"user": s.user, "role": s.role, "csrf": s.csrf})
        resp.headers["Set-Cookie"] = self._cookie(s.token)
        return resp

    def _cookie(self, token: str, max_age: int | None = None) -> str:
        parts = [f"{COOKIE}={token}", "Path=/", "HttpOnly", "SameSite=Strict"]
        if max_age is not None:
            parts.append(f"Max-Age={max_age}")
        if self.secure_cookie:
            parts.append("Secure")
        return "; ".join(parts)

    async def me(self, req: Request, s: Login) -> Response:
        return Response.json({"user": s.user, "role": s.role, "csrf": s.csrf})

    async def logout(self, req: Request, s: Login) -> Response:
        self.logins.drop(s.token)
        resp = Response.json({"loggedOut": True})
        resp.headers["Set-Cookie"] = self._cookie("", 0)
        return resp

    async def list_brokers(self, req: Request, s: Login) -> Response:
        masters = await self.brokers.masters()
        return Response.json([{"name": n, "address": a} for n, a in masters.items()])

    # ------------------------------------------------------------------ reads

    async def pending(self, req: Request, s: Login) -> Response:
        q = req.query
        return Response.json(
            await self.brokers.call(q.get("broker"), R.KAIROS_BROWSE_PENDING, _fields(q, _PENDING))
        )

    async def histogram(self, req: Request, s: Login) -> Response:
        q = req.query
        return Response.json(
            await self.brokers.call(
                q.get("broker"), R.KAIROS_PENDING_HISTOGRAM, _fields(q, _HISTOGRAM)
            )
        )

    async def dlq(self, req: Request, s: Login) -> Response:
        q = req.query
        fields = _fields(q, ("consumerGroup", "cursor", "limit"))
        if "consumerGroup" not in fields:
            return Response.error(400, "give consumerGroup")
        return Response.json(await self.brokers.call(q.get("broker"), R.KAIROS_BROWSE_DLQ, fields))

    async def transactions(self, req: Request, s: Login) -> Response:
        q = req.query
        return Response.json(
            await self.brokers.call(
                q.get("broker"), R.KAIROS_GET_TRANSACTION_STATUS, _fields(q, ("producerGroup",))
            )
        )

    async def cluster(self, req: Request, s: Login) -> Response:
        return Response.json(await views.cluster(self.brokers))

    async def topics(self, req: Request, s: Login) -> Response:
        q = req.query
        fields = _fields(q, ("offset", "limit", "contains", "kind"))
        return Response.json(await views.topics(self.brokers, q.get("broker"), fields))

    async def groups(self, req: Request, s: Login) -> Response:
        return Response.json(await views.groups(self.brokers, req.query.get("broker")))

    async def group(self, req: Request, s: Login) -> Response:
        q = req.query
        fields = _fields(q, ("consumerGroup",))
        if "consumerGroup" not in fields:
            return Response.error(400, "give consumerGroup")
        return Response.json(
            await views.group(self.brokers, q.get("broker"), fields["consumerGroup"])
        )

    async def timers(self, req: Request, s: Login) -> Response:
        return Response.json(await views.timer_health(self.brokers, req.query.get("broker")))

    async def journey(self, req: Request, s: Login) -> Response:
        q = req.query
        fields = _fields(q, ("msgId", "key"))
        if not fields:
            return Response.error(400, "give msgId or key")
        return Response.json(
            await journey.journey(
                self.brokers, q.get("broker"), fields.get("msgId"), fields.get("key")
            )
        )

    async def spark_report(self, req: Request, s: Login) -> Response:
        if self.spark_report_dir is None:
            return Response.error(404, "the console was started without --spark-report-dir")
        return Response.json(await asyncio.to_thread(report.read, self.spark_report_dir))

    # ------------------------------------------------------------------ actions

    async def _act(
        self, req: Request, s: Login, code: int, names: tuple[str, ...], **fixed: str
    ) -> Response:
        body = req.json()
        broker = body.get("broker")
        if broker is not None and not isinstance(broker, str):
            return Response.error(400, "broker must be a string")
        fields = {**_fields(body, names), **fixed}
        try:
            out = await self.brokers.call(broker, code, fields)
        except BrokerError as err:
            self._audit(s, req, broker, fields, err.code)
            raise
        self._audit(s, req, broker, fields, int(ResponseCode.SUCCESS))
        return Response.json(out)

    def _audit(
        self, s: Login, req: Request, broker: str | None, fields: dict[str, str], code: int
    ) -> None:
        self.log.info(
            "console.action",
            user=s.user,
            route=req.path,
            broker=broker or "",
            target=",".join(f"{k}={v}" for k, v in sorted(fields.items()))[:500],
            code=code,
        )

    async def reschedule(self, req: Request, s: Login) -> Response:
        return await self._act(req, s, R.KAIROS_RESCHEDULE_PENDING, (*_NAMES, "dueMs"))

    async def run_now(self, req: Request, s: Login) -> Response:
        return await self._act(req, s, R.KAIROS_RESCHEDULE_PENDING, _NAMES, runNow="true")

    async def recall(self, req: Request, s: Login) -> Response:
        return await self._act(req, s, R.KAIROS_RECALL_PENDING, _NAMES)

    async def dlq_resend(self, req: Request, s: Login) -> Response:
        return await self._act(
            req,
            s,
            R.KAIROS_RESEND_DLQ,
            ("consumerGroup", "maxNum", "toRetryTopic", "delayMs", "queueId", "queueOffset"),
        )

    async def bulk(self, req: Request, s: Login) -> Response:
        body = req.json()
        broker = body.get("broker")
        if broker is not None and not isinstance(broker, str):
            return Response.error(400, "broker must be a string")

        def audit(fields: dict[str, str], code: int) -> None:
            self._audit(s, req, broker, fields, code)

        status, out = await bulk.run(self.brokers, broker, body, audit)
        if not out.get("dryRun", True) or status != 200:
            self.log.info(
                "console.bulk_action",
                user=s.user,
                broker=broker or "",
                action=str(out["action"]),
                filter=",".join(f"{k}={v}" for k, v in sorted(out["filter"].items()))[:500],
                selected=int(out["count"]),
                done=sum(out.get("outcomes", {}).values()),
                failed=len(out.get("failed", [])),
                confirmed=status == 200,
            )
        if status != 200:
            return Response(status, orjson.dumps(out))
        return Response.json(out)

    async def end_half(self, req: Request, s: Login) -> Response:
        return await self._act(req, s, R.KAIROS_END_HALF_MESSAGE, ("commitLogOffset", "action"))

    # ------------------------------------------------------------------ admin writes

    async def _admin(self, req: Request, s: Login, write: AdminWrite) -> Response:
        body = req.json()
        broker = body.get("broker")
        if broker is not None and not isinstance(broker, str):
            return Response.error(400, "broker must be a string")
        named = _fields(body, ("topic", "consumerGroup", "timestamp", "queues", "perm"))
        try:
            out = await write(self.brokers, broker, body)
        except BrokerError as err:
            self._audit(s, req, broker, named, err.code)
            raise
        self._audit(s, req, broker, named, int(ResponseCode.SUCCESS))
        return Response.json(out)

    async def create_topic(self, req: Request, s: Login) -> Response:
        return await self._admin(req, s, actions.create_topic)

    async def delete_topic(self, req: Request, s: Login) -> Response:
        return await self._admin(req, s, actions.delete_topic)

    async def reset_offset(self, req: Request, s: Login) -> Response:
        return await self._admin(req, s, actions.reset_offset)
