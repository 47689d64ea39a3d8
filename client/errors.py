"""The client's exceptions: the one place that maps wire response codes to exceptions.

Owns: ``ClientError`` and its tree. Every class carries a ``retriable`` class flag that
the producer's retry loop (and users) read: True means "the same request may succeed
against another queue/broker or a little later", False means "fix the request".

    ClientError
    ├── ConnectionClosed     the connection dropped, or could not be opened (retriable)
    ├── RequestTimeout       no response within the request's timeout (retriable)
    ├── NoRouteError         the name server knows no route/queue for a topic (retriable)
    ├── MessageError         a message failed a client-side check (not retriable)
    │   ├── MessageTooLarge
    │   └── InvalidName      a topic or group breaks the naming rules (protocol.naming)
    ├── ClientStateError     used before start() or after shutdown() (not retriable)
    └── BrokerError(code, remark)   a non-success response; ``for_code`` picks the subclass

The retriable broker codes are those the Java producer retries on
(``DefaultMQProducer.retryResponseCodes``: 1, 14, 16, 17, 204, 205) plus SYSTEM_BUSY (2),
which RocketMQ documents as "try again later".
"""

from __future__ import annotations

from kairosmq.protocol.codes import ResponseCode


class ClientError(Exception):
    """Base class of every error the client raises."""

    retriable: bool = False


class ConnectionClosed(ClientError):
    """The connection to ``address`` dropped or could not be established."""

    retriable = True

    def __init__(self, address: str, reason: str = "connection closed") -> None:
        super().__init__(f"{address}: {reason}")
        self.address = address


class RequestTimeout(ClientError):
    """A request got no response within its timeout."""

    retriable = True

    def __init__(self, address: str, code: int, timeout: float) -> None:
        super().__init__(f"{address}: request code {code} timed out after {timeout:.3f}s")
        self.address = address
        self.code = code
        self.timeout = timeout


class NoRouteError(ClientError):
    """No route (or no writable/readable queue) is known for a topic."""

    retriable = True


class MessageError(ClientError):
    """A message (or batch) failed a client-side check before anything was sent."""


class MessageTooLarge(MessageError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message body of {size} bytes exceeds max_message_size {limit}")
        self.size = size
        self.limit = limit


class InvalidName(MessageError):
    """A topic or group name the broker would refuse (``kairosmq.protocol.naming``): raised
    before any request is sent, never retried (RocketMQ's ``Validators`` throw
    ``MQClientException`` the same way)."""


class ClientStateError(ClientError):
    """The producer/consumer is not started, or already shut down."""


class BrokerError(ClientError):
    """A response with a non-success code. ``code`` and ``remark`` come from the wire."""

    code: int = -1

    def __init__(self, code: int, remark: str | None = None, address: str | None = None) -> None:
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = f"code {code}"
        where = f"{address}: " if address else ""
        super().__init__(f"{where}{name}: {remark or 'no remark'}")
        self.code = code
        self.remark = remark
        self.address = address

    @staticmethod
    def for_code(code: int, remark: str | None = None, address: str | None = None) -> BrokerError:
        """Return the exception instance for response ``code`` (a BrokerError subclass)."""
        return _BY_CODE.get(code, BrokerError)(code, remark, address)


class BrokerSystemError(BrokerError):
    retriable = True


class SystemBusy(BrokerError):
    retriable = True


class ServiceNotAvailable(BrokerError):
    retriable = True


class NoPermission(BrokerError):
    retriable = True


class TopicNotExist(BrokerError):
    retriable = True


class NoBuyerId(BrokerError):
    retriable = True


class NotInCurrentUnit(BrokerError):
    retriable = True


class RequestCodeNotSupported(BrokerError):
    pass


class MessageIllegal(BrokerError):
    pass


class SubscriptionError(BrokerError):
    """SUBSCRIPTION_PARSE_FAILED / _NOT_EXIST / _NOT_LATEST / _GROUP_NOT_EXIST."""


class FlowControl(BrokerError):
    retriable = True


class RecallFailed(BrokerError):
    """ILLEGAL_OPERATION (604) from RECALL_MESSAGE: the message was already delivered, is
    unknown to the broker, or the handle is invalid (``remark`` says which)."""


_BY_CODE: dict[int, type[BrokerError]] = {
    ResponseCode.SYSTEM_ERROR: BrokerSystemError,
    ResponseCode.SYSTEM_BUSY: SystemBusy,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: RequestCodeNotSupported,
    ResponseCode.MESSAGE_ILLEGAL: MessageIllegal,
    ResponseCode.SERVICE_NOT_AVAILABLE: ServiceNotAvailable,
    ResponseCode.NO_PERMISSION: NoPermission,
    ResponseCode.TOPIC_NOT_EXIST: TopicNotExist,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: SubscriptionError,
    ResponseCode.SUBSCRIPTION_NOT_EXIST: SubscriptionError,
    ResponseCode.SUBSCRIPTION_NOT_LATEST: SubscriptionError,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: SubscriptionError,
    ResponseCode.FLOW_CONTROL: FlowControl,
    ResponseCode.ILLEGAL_OPERATION: RecallFailed,
    204: NoBuyerId,
    205: NotInCurrentUnit,
}
