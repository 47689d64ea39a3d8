"""Error mapping (client/errors.py): response codes to exception classes and retriable flags."""

from __future__ import annotations

from kairosmq.client import (
    BrokerError,
    ConnectionClosed,
    MessageTooLarge,
    RequestTimeout,
)
from kairosmq.client.errors import (
    BrokerSystemError,
    MessageIllegal,
    SubscriptionError,
    TopicNotExist,
)


def test_for_code_maps_codes_to_classes_and_retriable_flags() -> None:
    cases = {1: BrokerSystemError, 13: MessageIllegal, 17: TopicNotExist, 24: SubscriptionError}
    for code, cls in cases.items():
        err = BrokerError.for_code(code, "why", "1.2.3.4:10911")
        assert type(err) is cls and err.code == code and err.remark == "why"
        assert "1.2.3.4:10911" in str(err) and "why" in str(err)
    assert BrokerError.for_code(17).retriable and BrokerError.for_code(14).retriable
    assert not BrokerError.for_code(13).retriable
    unknown = BrokerError.for_code(999)
    assert type(unknown) is BrokerError and not unknown.retriable
    assert ConnectionClosed("a:1").retriable and RequestTimeout("a:1", 10, 1.0).retriable
    assert not MessageTooLarge(2, 1).retriable
