"""Image checks: size, count, format and pixel count before decoding, then a safe decode.

Order matters: the byte size and count are checked first, then PIL reads only the header
(``Image.open`` is lazy) to learn the format and the dimensions, and the pixel limit is
enforced *before* any pixel is decoded, so a decompression bomb costs a header read.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from PIL import Image, ImageOps, UnidentifiedImageError

from qwen_ui.engine.errors import (
    ImageEmpty,
    ImageTooLarge,
    ImageTooManyPixels,
    ImageUnreadable,
    ImageUnsupported,
    TooManyImages,
)

ORIENTATION = 0x0112  # the EXIF tag
FORMATS = frozenset({"JPEG", "PNG", "WEBP", "BMP", "GIF"})
MB = 1024 * 1024


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int
    max_images: int
    max_pixels: int


@dataclass(frozen=True)
class CheckedImage:
    """An image whose bytes passed every check (format, dimensions and pixel count from the
    header), with the facts the rest of the engine needs. Its pixels are decoded on first
    use of :attr:`image`, so a request whose embedding is cached never decodes them: the
    same bytes (``sha256``) decoded before, or their embedding would not exist."""

    index: int
    sha256: str
    nbytes: int
    source_format: str
    size: tuple[int, int]  # as displayed: EXIF orientation applied
    data: bytes = field(default=b"", repr=False, compare=False)
    pixels: Image.Image | None = field(default=None, repr=False, compare=False)
    orientation: int = 1  # the file's EXIF orientation (1-8), already applied to ``size``

    @functools.cached_property
    def image(self) -> Image.Image:
        """The RGB pixels (``pixels`` when given, else decoded from ``data``); raises
        :class:`ImageUnreadable` when the data is corrupt past the header."""
        if self.pixels is not None:
            return self.pixels
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return _decode_rgb(Image.open(io.BytesIO(self.data)), self.index)

    def load(self) -> Image.Image:
        """:attr:`image` (decoding it now if not yet)."""
        return self.image


def raise_pil_guard(max_pixels: int) -> None:
    """PIL refuses images over 2× ``Image.MAX_IMAGE_PIXELS`` on its own; make sure its guard
    never rejects an image our own (earlier, header-based) limit accepted."""
    current = Image.MAX_IMAGE_PIXELS or 0
    if current < max_pixels:
        Image.MAX_IMAGE_PIXELS = max_pixels


def check_count(count: int, limits: ImageLimits) -> None:
    if count > limits.max_images:
        raise TooManyImages(count=count, limit=limits.max_images)


def check_bytes(data: bytes, index: int, limits: ImageLimits) -> None:
    if not data:
        raise ImageEmpty(index=index)
    if len(data) > limits.max_bytes:
        raise ImageTooLarge(index=index, size_mb=_mb(len(data)), limit_mb=_mb(limits.max_bytes))


def upright_of(data: bytes) -> tuple[tuple[int, int], int]:
    """(upright size, EXIF orientation) of bytes that passed :func:`check`, from the
    header alone (the facts of the original file, whatever admission did to its pixels)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return _upright(Image.open(io.BytesIO(data)))


def check(data: bytes, index: int, limits: ImageLimits) -> CheckedImage:
    """Check one image (1-based ``index`` for messages) from its size and header; no pixel
    is decoded yet."""
    check_bytes(data, index, limits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image = _open_header(data, index, limits)
        size, orientation = _upright(image)
    digest = hashlib.sha256(data).hexdigest()
    fmt = str(image.format)
    return CheckedImage(index, digest, len(data), fmt, size, data, orientation=orientation)


def decode(data: bytes, index: int, limits: ImageLimits) -> CheckedImage:
    """Check one image and decode its pixels to RGB now."""
    checked = check(data, index, limits)
    _ = checked.image
    return checked


def decode_all(blobs: Sequence[bytes], limits: ImageLimits) -> list[CheckedImage]:
    check_count(len(blobs), limits)
    return [decode(data, i + 1, limits) for i, data in enumerate(blobs)]


def _upright(image: Image.Image) -> tuple[tuple[int, int], int]:
    orientation = _orientation(image)
    width, height = image.size
    return ((height, width) if orientation in (5, 6, 7, 8) else (width, height)), orientation


def _orientation(image: Image.Image) -> int:
    """The header's EXIF orientation (1 when absent or invalid). A PNG's EXIF may follow
    its pixels, which PIL would decode to find: there only an EXIF chunk ahead of them
    counts (the decoded image is still turned as its EXIF says)."""
    if image.format == "PNG" and "exif" not in image.info:
        return 1
    orientation = image.getexif().get(ORIENTATION, 1)
    return orientation if isinstance(orientation, int) and 1 <= orientation <= 8 else 1


def _open_header(data: bytes, index: int, limits: ImageLimits) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data), formats=None)
    except Image.DecompressionBombError as exc:  # PIL's own guard, from the header too
        found = re.search(r"\((\d+) pixels\)", str(exc))
        pixels = f"{int(found.group(1)):,}" if found else f"> {limits.max_pixels:,}"
        raise ImageTooManyPixels(index=index, pixels=pixels, limit=limits.max_pixels) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ImageUnsupported(index=index, found=_sniff(data)) from exc
    if image.format not in FORMATS:
        raise ImageUnsupported(index=index, found=str(image.format))
    width, height = image.size
    if width <= 0 or height <= 0:
        raise ImageUnreadable(index=index)
    if width * height > limits.max_pixels:
        shape = f"{width:,}×{height:,}"
        raise ImageTooManyPixels(index=index, pixels=shape, limit=limits.max_pixels)
    return image


def _decode_rgb(image: Image.Image, index: int) -> Image.Image:
    try:
        if getattr(image, "n_frames", 1) > 1:
            image.seek(0)  # GIF / animated WebP / APNG: the first frame
        image.load()
        upright = ImageOps.exif_transpose(image)
        return _to_rgb(upright)
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise ImageUnreadable(index=index) from exc


def _to_rgb(image: Image.Image) -> Image.Image:
    """RGB, with any transparency composited onto white."""
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    if image.mode == "I;16" or image.mode == "I" or image.mode == "F":
        return ImageOps.autocontrast(image.convert("L")).convert("RGB")
    return image.convert("RGB")


def _sniff(data: bytes) -> str:
    head = data[:12]
    if head.startswith(b"%PDF"):
        return "PDF"
    if head[4:12] in (b"ftypheic", b"ftypheix", b"ftypmif1", b"ftypavif"):
        return head[8:12].decode()
    return "unknown"


def _mb(size: int) -> str:
    return f"{size / MB:.1f}"
