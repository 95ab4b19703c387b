"""Reading a body under the guard's rules (web/body.py): size, timeout, closing boundary."""

from __future__ import annotations

import asyncio

import pytest
from starlette.datastructures import Headers
from starlette.types import Message

from qwen_ui.errors import MalformedBody, QwenUIError
from qwen_ui.web.body import BodyReader, BodyRejected, declared_length, multipart_closing

CLOSING = b"--XyZ--"


class Feed:
    """An ASGI receive that hands out the given pieces, then waits forever."""

    def __init__(self, *pieces: bytes, finished: bool = True) -> None:
        self.messages: list[Message] = [
            {"type": "http.request", "body": piece, "more_body": True} for piece in pieces
        ]
        if finished and self.messages:
            self.messages[-1]["more_body"] = False

    async def __call__(self) -> Message:
        if self.messages:
            return self.messages.pop(0)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


def _reader(feed: Feed, refused: list[QwenUIError], **kwargs: object) -> BodyReader:
    async def reject(error: QwenUIError) -> None:
        refused.append(error)

    options: dict[str, object] = {"limit": 100, "timeout_s": 5.0, "closing": CLOSING, **kwargs}
    return BodyReader(feed, reject, **options)  # type: ignore[arg-type]


async def _drain(reader: BodyReader) -> None:
    while not reader.complete:
        await reader()


async def test_a_closing_boundary_split_across_pieces_is_seen() -> None:
    refused: list[QwenUIError] = []
    await _drain(_reader(Feed(b"--XyZ\r\n...\r\n--X", b"yZ-", b"-\r\n"), refused))
    assert refused == []


async def test_a_body_without_its_closing_boundary_is_refused() -> None:
    refused: list[QwenUIError] = []
    with pytest.raises(BodyRejected):
        await _drain(_reader(Feed(b"--XyZ\r\npart\r\n"), refused))
    assert [e.code for e in refused] == ["malformed_body"]


async def test_a_body_over_the_limit_is_refused_while_streaming() -> None:
    refused: list[QwenUIError] = []
    with pytest.raises(BodyRejected):
        await _drain(_reader(Feed(b"x" * 60, b"x" * 60), refused, closing=None))
    assert [e.status for e in refused] == [413]


async def test_a_withheld_body_times_out() -> None:
    refused: list[QwenUIError] = []
    reader = _reader(Feed(b"--XyZ", finished=False), refused, timeout_s=0.05)
    with pytest.raises(BodyRejected):
        await _drain(reader)
    assert [e.status for e in refused] == [408]


async def test_after_the_body_receive_is_not_timed() -> None:
    refused: list[QwenUIError] = []
    reader = _reader(Feed(CLOSING), refused, timeout_s=0.01)
    await _drain(reader)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader(), 0.1)  # waits for a disconnect, no 408
    assert refused == []


def test_headers() -> None:
    assert declared_length(Headers({"content-length": "12"})) == 12
    assert declared_length(Headers({"content-length": "-1"})) is None
    form = Headers({"content-type": 'multipart/form-data; boundary="XyZ"'})
    assert multipart_closing(form) == CLOSING
    assert multipart_closing(Headers({"content-type": "application/json"})) is None
    with pytest.raises(MalformedBody):
        multipart_closing(Headers({"content-type": "multipart/form-data"}))


@pytest.mark.parametrize(
    ("pieces", "closed"),
    [
        ((b"--XyZ\r\na\r\n--XyZ--",), True),
        ((b"--XyZ\r\na\r\n--XyZ--\r\n", b"\r\n  ", b"\t"), True),
        ((b"--XyZ\r\na\r\n", b"--XyZ-", b"-", b"\r\n"), True),
        ((b"--XyZ--",), True),  # no part at all
        ((b"--XyZ\r\n--XyZ-- inside the data\r\n--XyZ\r\ncut off",), False),
        ((b"--XyZ\r\na\r\n--XyZ--\r\n--XyZ\r\nlate\r\n",), False),
        ((b"--XyZ\r\na--XyZ--",), False),  # not on a line of its own
        ((b"--XyZ\r\na\r\n--XyZ", b"\r\n", b"--"), False),  # whitespace inside it
    ],
)
async def test_only_a_body_ending_with_its_closing_boundary_is_whole(
    pieces: tuple[bytes, ...], closed: bool
) -> None:
    refused: list[QwenUIError] = []
    reader = _reader(Feed(*pieces), refused)
    if closed:
        await _drain(reader)
    else:
        with pytest.raises(BodyRejected):
            await _drain(reader)
    assert [e.code for e in refused] == ([] if closed else ["malformed_body"])
