"""Image checks: size, count, format and pixel count before decoding, then a safe decode.

Order matters: the byte size and count are checked first, then PIL reads only the header
(``Image.open`` is lazy) to learn the format and the dimensions, and the pixel limit is
enforced *before* any pixel is decoded, so a decompression bomb costs a header read.
"""

from __future__ import annotations

import hashlib
import io
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from qwen_ui.engine.errors import (
    ImageTooLarge,
    ImageTooManyPixels,
    ImageUnreadable,
    ImageUnsupported,
    TooManyImages,
)

FORMATS = frozenset({"JPEG", "PNG", "WEBP", "BMP", "GIF"})
MB = 1024 * 1024


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int
    max_images: int
    max_pixels: int


@dataclass(frozen=True)
class CheckedImage:
    """A decoded RGB image with the facts the rest of the engine needs."""

    index: int
    image: Image.Image
    sha256: str
    nbytes: int
    source_format: str

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size


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
    if len(data) > limits.max_bytes:
        raise ImageTooLarge(index=index, size_mb=_mb(len(data)), limit_mb=_mb(limits.max_bytes))


def decode(data: bytes, index: int, limits: ImageLimits) -> CheckedImage:
    """Check one image (1-based ``index`` for messages) and decode it to RGB."""
    check_bytes(data, index, limits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image = _open_header(data, index, limits)
        rgb = _decode_rgb(image, index)
    digest = hashlib.sha256(data).hexdigest()
    return CheckedImage(index, rgb, digest, len(data), str(image.format))


def decode_all(blobs: Sequence[bytes], limits: ImageLimits) -> list[CheckedImage]:
    check_count(len(blobs), limits)
    return [decode(data, i + 1, limits) for i, data in enumerate(blobs)]


def _open_header(data: bytes, index: int, limits: ImageLimits) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data), formats=None)
    except Image.DecompressionBombError as exc:  # PIL's own guard, from the header too
        found = re.search(r"\((\d+) pixels\)", str(exc))
        pixels = found.group(1) if found else f"> {limits.max_pixels}"
        raise ImageTooManyPixels(index=index, pixels=pixels, limit=limits.max_pixels) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ImageUnsupported(index=index, found=_sniff(data)) from exc
    if image.format not in FORMATS:
        raise ImageUnsupported(index=index, found=str(image.format))
    width, height = image.size
    if width <= 0 or height <= 0:
        raise ImageUnreadable(index=index)
    if width * height > limits.max_pixels:
        raise ImageTooManyPixels(index=index, pixels=f"{width}×{height}", limit=limits.max_pixels)
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
