"""Run the stock C++ producer (librocketmq 2.1.0 via ``rocketmq-python-cvs``) with session
credentials against a broker; a script for tests/security/test_cpp_acl.py (a native crash
fails that test instead of killing pytest).

argv[1] is a JSON config: nameSrv, topic, group, accessKey, secretKey, count, logDir.
Prints one JSON object per line: ``sent`` (status) or ``error`` (the client's message) per
message, then ``done``; ends with ``os._exit`` (the wrapper's destructors would shut the
client down twice).
"""

from __future__ import annotations

import json
import os
import sys

from rocketmq.client import Message, Producer


def main() -> None:
    cfg = json.loads(sys.argv[1])
    producer = Producer(cfg["group"])
    producer.set_namesrv_addr(cfg["nameSrv"])
    producer.set_log_root_path(cfg["logDir"])
    producer.set_session_credentials(cfg["accessKey"], cfg["secretKey"], "ALIYUN")
    producer.start()
    for i in range(cfg["count"]):
        msg = Message(cfg["topic"])
        msg.set_tags("TagA")
        msg.set_body(f"cpp-{i}")
        try:
            r = producer.send_sync(msg)
            print(
                json.dumps({"event": "sent", "body": f"cpp-{i}", "status": r.status.name}),
                flush=True,
            )
        except Exception as err:  # noqa: BLE001 - reported to the test
            print(
                json.dumps({"event": "error", "body": f"cpp-{i}", "message": str(err)}), flush=True
            )
    print(json.dumps({"event": "done"}), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
