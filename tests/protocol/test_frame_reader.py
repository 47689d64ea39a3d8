"""The incremental FrameReader: fed byte by byte and in random multi-frame chunks over every
captured frame, partial frames, and the size limits checked on the 4-byte prefix.

Expectations are taken from the captures' index.json, from construct parsing of
``schema`` declarations, or from bytes written out by hand, never from the codec itself.
"""

from __future__ import annotations

import random

import pytest
from kairosmq.protocol.codec import (
    MAX_FRAME_LENGTH,
    FrameReader,
    decode_frame,
    encode_command,
)
from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.protocol.errors import (
    FrameTooLarge,
    MalformedFrame,
)

from tests.helpers import FIXTURES

from .captures import (
    BINARY_CASES,
    MOCK_REPLIES,
    MOCKS,
    REQUESTS,
    assert_matches_index,
    bin_cmd,
    frame_bytes,
    hand_frame,
)

# ---------------------------------------------------------------- FrameReader


def _all_captured_frames() -> list[bytes]:
    frames = [frame_bytes(c, e["file"]) for c, e in REQUESTS]
    frames += [frame_bytes(MOCK_REPLIES, m["file"]) for m in MOCKS]
    return frames


def _expected_commands() -> list[RemotingCommand]:
    return [decode_frame(f) for f in _all_captured_frames()]


def test_frame_reader_byte_by_byte_over_all_captures() -> None:
    stream = b"".join(_all_captured_frames())
    expected = _expected_commands()
    reader = FrameReader()
    got: list[RemotingCommand] = []
    for i in range(len(stream)):
        reader.feed(stream[i : i + 1])
        got.extend(reader)
    assert got == expected
    assert reader.buffered == 0
    entries = [e for _, e in REQUESTS] + MOCKS
    for cmd, e in zip(got, entries, strict=True):
        assert_matches_index(cmd, e)


@pytest.mark.parametrize("seed", [0, 1, 7, 2024, 99991])
def test_frame_reader_random_multi_frame_chunks(seed: int) -> None:
    rng = random.Random(seed)
    frames = _all_captured_frames()
    # binary frames interleaved with the JSON captures
    frames.insert(3, encode_command(bin_cmd(*BINARY_CASES[2].values)))
    frames.append(encode_command(bin_cmd(*BINARY_CASES[4].values)))
    expected = [decode_frame(f) for f in frames]
    stream = b"".join(frames)
    reader = FrameReader()
    got: list[RemotingCommand] = []
    pos = 0
    while pos < len(stream):
        n = rng.randint(1, 1500)
        reader.feed(stream[pos : pos + n])
        pos += n
        got.extend(reader)
    assert got == expected
    assert reader.buffered == 0


def test_frame_reader_keeps_partial_frame_buffered() -> None:
    raw = encode_command(request(RequestCode.HEART_BEAT, body=b"{}"))
    reader = FrameReader()
    reader.feed(raw + raw[:5])
    assert len(list(reader)) == 1
    assert reader.buffered == 5
    reader.feed(raw[5:])
    assert len(list(reader)) == 1
    assert reader.buffered == 0


def test_frame_reader_rejects_oversized_prefix_before_the_body() -> None:
    reader = FrameReader(max_frame=1000)
    reader.feed((1001).to_bytes(4, "big"))  # only the prefix: nothing else was sent
    with pytest.raises(FrameTooLarge) as info:
        list(reader)
    assert (info.value.length, info.value.limit) == (1001, 1000)
    assert info.value.close_connection


def test_frame_reader_default_limit_is_16_mib() -> None:
    assert MAX_FRAME_LENGTH == 16 * 1024 * 1024
    ok = FrameReader()
    ok.feed(MAX_FRAME_LENGTH.to_bytes(4, "big"))
    assert list(ok) == []  # at the limit: waits for the rest
    bad = FrameReader()
    bad.feed((MAX_FRAME_LENGTH + 1).to_bytes(4, "big"))
    with pytest.raises(FrameTooLarge):
        list(bad)


def test_frame_reader_oversized_after_a_good_frame() -> None:
    good = encode_command(request(RequestCode.HEART_BEAT))
    reader = FrameReader(max_frame=500)
    reader.feed(good + (501).to_bytes(4, "big"))
    it = iter(reader)
    assert next(it).code == RequestCode.HEART_BEAT
    with pytest.raises(FrameTooLarge):
        next(it)


def test_grpc_http2_preface_raises_frame_too_large() -> None:
    raw = bytes.fromhex(
        (FIXTURES / "grpc-5.x-client" / "silent-01-RAW-http2-preface.hex").read_text().strip()
    )
    assert raw.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    # "PRI " read as a big-endian length is 0x50524920 = 1,347,569,952 > 16 MiB
    assert int.from_bytes(raw[:4], "big") == 0x50524920
    reader = FrameReader()
    reader.feed(raw)
    with pytest.raises(FrameTooLarge) as info:
        list(reader)
    assert not isinstance(info.value, MalformedFrame)
    assert info.value.length == 0x50524920
    first4 = FrameReader()
    first4.feed(raw[:4])
    with pytest.raises(FrameTooLarge):
        list(first4)


@pytest.mark.parametrize("length", [0, 1, 3])
def test_frame_reader_length_below_four_is_malformed(length: int) -> None:
    reader = FrameReader()
    reader.feed(length.to_bytes(4, "big") + b"\x00" * length)
    with pytest.raises(MalformedFrame):
        list(reader)


def test_frame_reader_propagates_malformed_payload() -> None:
    reader = FrameReader()
    reader.feed(hand_frame(0, b"{not json"))
    with pytest.raises(MalformedFrame):
        list(reader)


def test_frame_reader_max_header_checked_on_the_header_word() -> None:
    """A declared header above ``max_header`` is refused from the first 8 bytes, before
    the (claimed) rest of the frame arrives; a frame under the cap still decodes."""
    reader = FrameReader(max_header=1024)
    # length 2000, JSON serialize type (0), header length 1500: only 8 bytes sent
    reader.feed((2000).to_bytes(4, "big") + (1500).to_bytes(4, "big"))
    with pytest.raises(MalformedFrame, match="header length 1500 exceeds the maximum 1024"):
        list(reader)
    ok = FrameReader(max_header=1024)
    frame = encode_command(request(RequestCode.HEART_BEAT, {"k": "v"}, b"x" * 4000, opaque=3))
    ok.feed(frame)
    assert [c.opaque for c in ok] == [3]
    exact = FrameReader(max_header=len(frame) - 8 - 4000)  # header exactly at the cap
    exact.feed(frame)
    assert len(list(exact)) == 1
    below = FrameReader(max_header=len(frame) - 8 - 4000 - 1)
    below.feed(frame)
    with pytest.raises(MalformedFrame):
        list(below)


# ---------------------------------------------------------------- large frames in parts


def _big_frames() -> tuple[bytes, list[bytes]]:
    """Two large frames (above LARGE_FRAME) around small ones, and their bodies."""
    bodies = [bytes(range(256)) * 5000, b"tiny", random.Random(7).randbytes(3 << 20), b"end"]
    cmds = [
        request(RequestCode.SEND_MESSAGE_V2, {"a": str(i)}, body=b) for i, b in enumerate(bodies)
    ]
    return b"".join(encode_command(c) for c in cmds), bodies


@pytest.mark.parametrize("chunk", [97, 1000, 65536, 300_000])
def test_frame_reader_large_frames_gathered_in_parts(chunk: int) -> None:
    from kairosmq.protocol.codec import LARGE_FRAME

    stream, bodies = _big_frames()
    reader = FrameReader()
    got: list[bytes] = []
    held_max = 0
    for i in range(0, len(stream), chunk):
        reader.feed(stream[i : i + chunk])
        held_max = max(held_max, reader.buffered)
        got.extend(c.body for c in reader)
        assert reader.buffered <= min(i + chunk, len(stream))  # nothing counted twice
    assert got == bodies
    assert held_max > LARGE_FRAME and reader.buffered == 0


def test_frame_reader_counts_and_clears_a_gathered_frame() -> None:
    stream, _ = _big_frames()
    reader = FrameReader()
    reader.feed(stream[:200_000])
    assert not list(reader)
    reader.feed(stream[200_000:700_000])
    assert not list(reader) and reader.buffered == 700_000
    reader.clear()
    assert reader.buffered == 0 and not list(reader)


def test_frame_reader_oversized_prefix_never_gathered() -> None:
    reader = FrameReader(max_frame=2 << 20)
    reader.feed((3 << 20).to_bytes(4, "big") + b"\x00\x00\x00\x10" + b"x" * 100)
    with pytest.raises(FrameTooLarge):
        list(reader)
