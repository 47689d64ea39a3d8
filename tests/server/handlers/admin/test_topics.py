"""Unit tests of TopicAdminProcessor (server/handlers/admin/topics.py) on a real topic table
and offset table."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.server.handlers.admin.topics import TopicAdminProcessor

from tests.server.handlers.rig import Services, req


def _topics(s: Services) -> TopicAdminProcessor:
    return TopicAdminProcessor(topics=s.topics, offsets=s.offsets, log=s.log)


async def test_create_answers_after_topics_json_holds_it(services: Services) -> None:
    create = services.guarded(_topics(services).handle_create_topic)
    pending = create(
        services.conn(),
        req(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": "New", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6},
        ),
    )
    assert not isinstance(pending, RemotingCommand)
    resp = await pending
    assert resp.code == ResponseCode.SUCCESS
    on_disk = {t["topic_name"]: t for t in json.loads(services.topics.path.read_text())}
    assert on_disk["New"]["write_queue_nums"] == 8
    assert services.topics.get("New").write_queue_nums == 8
    refused = create(
        services.conn(), req(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": SCHEDULE_TOPIC})
    )
    assert refused.code == ResponseCode.NO_PERMISSION


async def test_delete_drops_offsets_and_all_config_lists(services: Services) -> None:
    proc = _topics(services)
    services.topics.create("T", 2)
    services.offsets.commit("G", "T", 0, 5)
    table = orjson.loads(
        (
            await proc.handle_all_topic_config(
                services.conn(), req(RequestCode.GET_ALL_TOPIC_CONFIG)
            )
        ).body
    )["topicConfigTable"]
    assert table["T"]["writeQueueNums"] == 2
    delete = services.guarded(proc.handle_delete_topic)
    resp = await delete(services.conn(), req(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}))
    assert resp.code == ResponseCode.SUCCESS
    assert "T" not in {t["topic_name"] for t in json.loads(services.topics.path.read_text())}
    assert services.topics.get("T") is None and services.offsets.query("G", "T", 0) is None
    again = delete(services.conn(), req(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}))
    assert again.code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.slow  # waits for the write retry, 1 s
async def test_create_answers_system_error_when_topics_json_cannot_be_written(
    services: Services, monkeypatch: Any
) -> None:
    from kairosmq.server.tables import table_file

    def full(path: Any, parts: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(table_file, "write_parts_atomic", full)
    create = services.guarded(_topics(services).handle_create_topic)
    resp = await create(
        services.conn(), req(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Unwritten", "perm": 6})
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR and "No space" in resp.remark
    monkeypatch.undo()  # the change stays in memory and is written by the retry
    await services.topics.flushed()
    assert "Unwritten" in services.topics.path.read_text()
