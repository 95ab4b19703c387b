"""Counting image decodes: :func:`count_decodes` makes PIL note the size of each image file
whose pixels it decodes (``ImageFile.load`` with pixels still to read) for the rest of a
test."""

from __future__ import annotations

import pytest
from PIL import ImageFile


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The list the size of each image file decoded from now on is appended to."""
    seen: list[tuple[int, int]] = []
    load = ImageFile.ImageFile.load

    def counting(self: ImageFile.ImageFile) -> object:
        if self.tile:  # pixels still to decode (a second call on a decoded image has none)
            seen.append(self.size)
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counting)
    return seen
