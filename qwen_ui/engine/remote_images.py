"""Images for a remote model server: upright RGB (EXIF applied, alpha on white, first
frame), resized on our side into the configured pixel bounds the way Qwen's processor
would (aspect kept, sides multiples of 28), as ``data:`` URLs. JPEG sources stay JPEG
(quality 95); everything else is sent as PNG."""

from __future__ import annotations

import base64
import io
import math

from PIL import Image

from qwen_ui.engine.images import CheckedImage

FACTOR = 28
JPEG_QUALITY = 95


def fit_size(width: int, height: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The size inside [min_pixels, max_pixels] closest in shape to (width, height), sides
    rounded to multiples of 28 (Qwen2.5-VL's ``smart_resize``)."""
    h = max(FACTOR, round(height / FACTOR) * FACTOR)
    w = max(FACTOR, round(width / FACTOR) * FACTOR)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / FACTOR) * FACTOR
        w = math.ceil(width * beta / FACTOR) * FACTOR
    return w, h


def data_url(checked: CheckedImage, min_pixels: int, max_pixels: int) -> str:
    """``checked`` as a data URL, resized only when its pixel count is out of bounds."""
    image = checked.image
    width, height = image.size
    if not min_pixels <= width * height <= max_pixels:
        size = fit_size(width, height, min_pixels, max_pixels)
        image = image.resize(size, Image.Resampling.BICUBIC)
    jpeg = checked.source_format == "JPEG"
    buffer = io.BytesIO()
    if jpeg:
        image.save(buffer, "JPEG", quality=JPEG_QUALITY)
    else:
        image.save(buffer, "PNG")
    mime = "image/jpeg" if jpeg else "image/png"
    return f"data:{mime};base64,{base64.b64encode(buffer.getvalue()).decode()}"
