"""Transactional sends/s vs plain sends/s against one broker process (issue 14).

A broker process on fresh files; ``--peers`` client connections (this process, one
event loop) each send ``--count / peers`` messages of ``--size`` bytes back to back:

* ``plain``: SEND_MESSAGE_V2, awaiting each answer;
* ``transactional``: the half message (``TRAN_MSG=true``, sysFlag PREPARED), awaiting its
  answer, then a one-way END_TRANSACTION commit (as a stock TransactionMQProducer does);
  the run ends when the broker's pending count (KAIROS_GET_TRANSACTION_STATUS) is 0, so
  every commit has been put to the real topic.

Prints one line per mode: messages, seconds, messages/s, and the ratio.

    python bench/bench_transactions.py                 # 20,000 of each, 16 peers
    python bench/bench_transactions.py --count 100000 --peers 32

Figures are for this machine and this run only.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from kairosmq.protocol.codec import FrameReader, encode_command
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.properties import encode_properties


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Peer:
    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w
        self.frames = FrameReader()
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.ids = itertools.count(1)
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while data := await self.r.read(65536):
            self.frames.feed(data)
            for cmd in self.frames:
                fut = self.pending.pop(cmd.opaque, None)
                if fut is not None:
                    fut.set_result(cmd)

    async def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        opaque = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[opaque] = fut
        self.w.write(encode_command(request(code, ext, body, opaque=opaque)))
        return await fut

    def oneway(self, code: int, ext: dict[str, str]) -> None:
        self.w.write(encode_command(request(code, ext, opaque=next(self.ids), oneway=True)))


def send_ext(topic: str, props: dict[str, str], sys_flag: int, qid: int) -> dict[str, str]:
    return {
        "a": "BenchPG",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(qid),
        "f": str(sys_flag),
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": encode_properties(props),
    }


async def worker(peer: Peer, mode: str, n: int, body: bytes, tag: int) -> None:
    for i in range(n):
        props = {"UNIQ_KEY": f"B{tag}-{i}-{mode}"}
        if mode == "transactional":
            props.update({"TRAN_MSG": "true", "PGROUP": "BenchPG"})
        r = await peer.call(
            RequestCode.SEND_MESSAGE_V2,
            send_ext(f"Bench_{mode}", props, 4 if mode != "plain" else 0, i % 4),
            body,
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        if mode == "transactional":
            _ip, _port, phy = decode_offset_msg_id(r.ext_fields["msgId"])
            peer.oneway(
                RequestCode.END_TRANSACTION,
                {
                    "producerGroup": "BenchPG",
                    "tranStateTableOffset": r.ext_fields["queueOffset"],
                    "commitLogOffset": str(phy),
                    "commitOrRollback": "8",
                    "msgId": r.ext_fields["msgId"],
                    "fromTransactionCheck": "false",
                },
            )


async def run_mode(port: int, mode: str, count: int, peers: int, size: int) -> float:
    conns = [Peer(*await asyncio.open_connection("127.0.0.1", port)) for _ in range(peers)]
    body = b"x" * size
    start = time.perf_counter()
    await asyncio.gather(*(worker(p, mode, count // peers, body, i) for i, p in enumerate(conns)))
    if mode == "transactional":
        sent = time.perf_counter() - start
        print(f"  (half sends done after {sent:.2f} s)")
        while True:
            r = await conns[0].call(RequestCode.KAIROS_GET_TRANSACTION_STATUS, {})
            if orjson.loads(r.body)["pending"] == 0:
                break
            await asyncio.sleep(0.001)
    elapsed = time.perf_counter() - start
    for p in conns:
        p.w.close()
        p.task.cancel()
    return elapsed


def spawn_broker(data: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kairosmq.server",
            "broker",
            "--port",
            str(port),
            "--namesrv-port",
            str(free_port()),
            "--data-dir",
            str(data),
            "--no-vip-channel",
            "--no-log-file",
            "--log-level",
            "warning",
            "--no-message-logs",
            "--segment-size-mb",
            "256",
        ],
        stdout=subprocess.DEVNULL,
    )


async def main_async(args: argparse.Namespace) -> None:
    data = Path(tempfile.mkdtemp(prefix="bench-tx-"))
    port = free_port()
    proc = spawn_broker(data, port)
    try:
        for _ in range(400):
            try:
                _r, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        await run_mode(port, "plain", min(2000, args.count), args.peers, args.size)  # warm-up
        rates = {}
        for mode in ("plain", "transactional"):
            secs = await run_mode(port, mode, args.count, args.peers, args.size)
            n = args.count // args.peers * args.peers
            rates[mode] = n / secs
            print(f"{mode:14s} {n:8d} msgs {secs:7.2f} s {rates[mode]:10.0f} msgs/s")
        print(f"transactional/plain = {rates['transactional'] / rates['plain']:.2f}")
    finally:
        proc.terminate()
        proc.wait(20)
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--peers", type=int, default=16)
    ap.add_argument("--size", type=int, default=128)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
