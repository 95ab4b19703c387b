"""Image checks: size, count, format and pixel count before decoding, then a bounded decode.

Order matters: the byte size and count are checked first, then PIL reads only the header
(``Image.open`` is lazy) to learn the format, the pixel mode and the dimensions, and the
pixel limit is enforced *before* any pixel is decoded, so a decompression bomb costs a
header read.

Decoding is bounded: an image bigger than the model will ever see is decoded straight to
its :attr:`CheckedImage.target` (the size the processor would resize it to, or the one
admission downscales it to). A JPEG is decoded reduced by its own decoder (``draft``: 1/2,
1/4 or 1/8 scale, never below the target); any other format is decoded whole and reduced
at once, before its EXIF orientation and its conversion to RGB, so that those copies, and
the processor's, are of the small picture. :meth:`CheckedImage.decode_cost` says, from the
header alone, how many bytes of host memory the decode takes at its peak: what the
engine's decode budget (:mod:`qwen_ui.engine.decoding`) counts before any pixel is decoded.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from PIL import Image, ImageOps, UnidentifiedImageError
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

from qwen_ui.engine.errors import (
    ImageEmpty,
    ImageTooLarge,
    ImageTooManyPixels,
    ImageUnreadable,
    ImageUnsupported,
    TooManyImages,
)
from qwen_ui.engine.shapes import Geometry, Size

ORIENTATION = 0x0112  # the EXIF tag
FORMATS = frozenset({"JPEG", "PNG", "WEBP", "BMP", "GIF"})
MB = 1024 * 1024
TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}  # what ``ImageOps.exif_transpose`` does for each EXIF orientation
# Modes PIL resizes as they are (others are converted to RGB(A) at full size first).
RESIZED_AS_IS = frozenset({"L", "RGB", "RGBA", "LA", "CMYK", "YCbCr", "I", "F"})
# Host bytes per pixel of a decoded picture, by mode (PIL keeps 3 bands in 4 bytes).
PIXEL_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}
ALPHA_COPY = 4  # resizing RGBA or LA makes a premultiplied full-size copy
CONVERTED_COPIES = 8  # another mode: RGBA at full size, then its premultiplied copy
WEBP_BUFFERS = 8  # libwebp's canvas and the decoded buffer PIL copies from
OUTPUT_BYTES = 16  # per pixel of the picture kept: resize, transpose and RGB copies


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
    same bytes (``sha256``) decoded before, or their embedding would not exist. They are
    decoded once, at :attr:`target` when set (the size they are used at), never at full
    size first."""

    index: int
    sha256: str
    nbytes: int
    source_format: str
    size: tuple[int, int]  # as displayed: EXIF orientation applied
    data: bytes = field(default=b"", repr=False, compare=False)
    pixels: Image.Image | None = field(default=None, repr=False, compare=False)
    orientation: int = 1  # the file's EXIF orientation (1-8), already applied to ``size``
    target: Size | None = None  # upright size to decode to; None: as the file is

    @functools.cached_property
    def image(self) -> Image.Image:
        """The RGB pixels (``pixels`` when given, else decoded from ``data``, at
        :attr:`target` when set); raises :class:`ImageUnreadable` when the data is
        corrupt past the header."""
        if self.pixels is not None:
            return self.pixels
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return _decode_rgb(self._opened(), self.index, self._file_target())

    @property
    def decoded(self) -> bool:
        """Whether :attr:`image` is at hand (given, or decoded already)."""
        return self.pixels is not None or "image" in vars(self)

    def load(self) -> Image.Image:
        """:attr:`image` (decoding it now if not yet)."""
        return self.image

    def decode_cost(self) -> int:
        """Host bytes decoding :attr:`image` takes at its peak, from the header alone (0
        when it is at hand): the picture as decoded (a JPEG at its draft scale), the
        full-size copies its mode needs before it is reduced, and the picture kept."""
        if self.decoded:
            return 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            opened = self._opened()
        width, height = opened.size
        kept = self.target or (width, height)
        per_pixel = pixel_bytes(opened.mode) + _copies(opened)
        return width * height * per_pixel + kept[0] * kept[1] * OUTPUT_BYTES

    def _file_target(self) -> Size | None:
        """:attr:`target` in the file's own orientation (as its pixels are decoded)."""
        if self.target is None:
            return None
        width, height = self.target
        return (height, width) if self.orientation in (5, 6, 7, 8) else (width, height)

    def _opened(self) -> Image.Image:
        """The file opened lazily (header only), a JPEG's decoder set to its draft scale:
        the smallest of 1/1, 1/2, 1/4 and 1/8 that is not below the target."""
        image = Image.open(io.BytesIO(self.data))
        target = self._file_target()
        if target is not None and image.format == "JPEG":
            image.draft(None, target)
        return image


def reduced_size(size: Size, geometry: Geometry) -> Size | None:
    """The upright size the processor resizes an image of ``size`` to (its
    ``smart_resize``) when the image is bigger than the model ever sees (more than
    ``max_pixels``), else None: the processor resizes it as it is (an aspect ratio the
    processor refuses is None too: admission refuses it by name)."""
    width, height = size
    if width * height <= geometry.max_pixels:
        return None
    try:
        new_height, new_width = smart_resize(
            height,
            width,
            factor=geometry.factor,
            min_pixels=geometry.min_pixels,
            max_pixels=geometry.max_pixels,
        )
    except ValueError:
        return None
    return int(new_width), int(new_height)


def aimed(checked: CheckedImage, geometry: Geometry | None) -> CheckedImage:
    """``checked`` set to decode at the size the processor of ``geometry`` uses."""
    if geometry is None or checked.decoded or checked.target is not None:
        return checked
    target = reduced_size(checked.size, geometry)
    return checked if target is None else replace(checked, target=target)


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


def check(
    data: bytes, index: int, limits: ImageLimits, geometry: Geometry | None = None
) -> CheckedImage:
    """Check one image (1-based ``index`` for messages) from its size and header; no pixel
    is decoded yet. With ``geometry`` (the processor's), it will decode reduced to the
    size the processor uses (:func:`aimed`)."""
    check_bytes(data, index, limits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image = _open_header(data, index, limits)
        size, orientation = _upright(image)
    digest = hashlib.sha256(data).hexdigest()
    fmt = str(image.format)
    checked = CheckedImage(index, digest, len(data), fmt, size, data, orientation=orientation)
    return aimed(checked, geometry)


def decode(data: bytes, index: int, limits: ImageLimits) -> CheckedImage:
    """Check one image and decode its pixels to RGB now (at full size: tools and tests;
    the engines decode through their decode budget)."""
    checked = check(data, index, limits)
    _ = checked.image
    return checked


def decode_all(blobs: Sequence[bytes], limits: ImageLimits) -> list[CheckedImage]:
    check_count(len(blobs), limits)
    return [decode(data, i + 1, limits) for i, data in enumerate(blobs)]


def _upright(image: Image.Image) -> tuple[tuple[int, int], int]:
    orientation = exif_orientation(image)
    width, height = image.size
    return ((height, width) if orientation in (5, 6, 7, 8) else (width, height)), orientation


def exif_orientation(image: Image.Image) -> int:
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


def pixel_bytes(mode: str) -> int:
    """Host bytes per pixel of a decoded picture in ``mode``."""
    return PIXEL_BYTES.get(mode, 4)


def decoded_bytes(image: Image.Image) -> int:
    """Host bytes of ``image`` (opened: only its header read) decoded whole as it is: its
    pixels in their own mode, and its decoder's own buffers."""
    width, height = image.size
    buffers = WEBP_BUFFERS if image.format == "WEBP" else 0
    return width * height * (pixel_bytes(image.mode) + buffers)


def _copies(image: Image.Image) -> int:
    """Bytes per source pixel of the full-size copies made before the picture is reduced
    (and of the decoder's own buffers)."""
    extra = WEBP_BUFFERS if image.format == "WEBP" else 0
    if image.mode in ("RGBA", "LA"):
        return extra + ALPHA_COPY
    if image.mode in RESIZED_AS_IS:
        return extra
    return extra + CONVERTED_COPIES


def _decode_rgb(image: Image.Image, index: int, target: Size | None) -> Image.Image:
    """The first frame, decoded, reduced to ``target`` (in the file's orientation), turned
    as its EXIF says and in RGB: each copy after the decode is of the reduced picture."""
    try:
        if getattr(image, "n_frames", 1) > 1:
            image.seek(0)  # GIF / animated WebP / APNG: the first frame
        image.load()
        orientation = exif_orientation(image)  # a PNG's EXIF may follow its pixels
        reduced = _reduce(image, target)
        method = TRANSPOSE.get(orientation)
        upright = reduced if method is None else reduced.transpose(method)
        return upright if upright.mode == "RGB" else _to_rgb(upright)
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise ImageUnreadable(index=index) from exc


def _reduce(image: Image.Image, target: Size | None) -> Image.Image:
    """``image`` resized to ``target`` (unchanged without one); a mode PIL does not
    resize as it is is converted to RGB first."""
    if target is None or target == image.size:
        return image
    source = image if image.mode in RESIZED_AS_IS else _to_rgb(image)
    return source.resize(target, Image.Resampling.BICUBIC)


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
