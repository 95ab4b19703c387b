"""Incremental detokenization: text deltas as tokens arrive, never half a character."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

Decode = Callable[[Sequence[int]], str]


def decode_keeping(decode: Decode, kept: Mapping[int, str], tokens: Sequence[int]) -> str:
    """``decode`` (which drops special tokens), but with the special tokens in ``kept`` (id
    to text) written out where they stand: runs between them are decoded apart."""
    pieces: list[str] = []
    run: list[int] = []
    for token in tokens:
        text = kept.get(token)
        if text is None:
            run.append(token)
            continue
        if run:
            pieces.append(decode(run))
            run = []
        pieces.append(text)
    if run:
        pieces.append(decode(run))
    return "".join(pieces)


class TextStream:
    """Turns a token stream into text deltas.

    Decodes a short window (from ``prefix`` to the end) rather than the whole answer, so the
    cost per token stays flat; holds text back while it ends in an incomplete UTF-8
    sequence (U+FFFD), exactly like transformers' streamers.
    """

    def __init__(self, decode: Decode) -> None:
        self._decode = decode
        self.tokens: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, token: int) -> str:
        self.tokens.append(token)
        before = self._decode(self.tokens[self._prefix : self._read])
        after = self._decode(self.tokens[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.tokens)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an answer may end mid-character)."""
        before = self._decode(self.tokens[self._prefix : self._read])
        after = self._decode(self.tokens[self._prefix :])
        self._prefix = self._read = len(self.tokens)
        return after[len(before) :] if len(after) > len(before) else ""

    def text(self) -> str:
        return self._decode(self.tokens)
