from __future__ import annotations

import hashlib
import io
import struct
import zlib

import pytest
from PIL import Image

from qwen_ui.engine import images
from qwen_ui.engine.errors import (
    ImageEmpty,
    ImageTooLarge,
    ImageTooManyPixels,
    ImageUnreadable,
    ImageUnsupported,
    TooManyImages,
)

LIMITS = images.ImageLimits(max_bytes=2_000_000, max_images=3, max_pixels=1_000_000)


def encode(image: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP", "GIF"])
def test_supported_formats_decode_to_rgb(fmt: str) -> None:
    data = encode(Image.new("RGB", (40, 30), (10, 200, 30)), fmt)
    checked = images.decode(data, 1, LIMITS)
    assert checked.image.mode == "RGB"
    assert checked.size == (40, 30)
    assert checked.source_format == fmt
    assert checked.sha256 == hashlib.sha256(data).hexdigest()


def test_gif_takes_first_frame() -> None:
    frames = [Image.new("RGB", (20, 20), c) for c in ((255, 0, 0), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    pixel = images.decode(buf.getvalue(), 1, LIMITS).image.getpixel((5, 5))
    assert pixel[0] > 200 and pixel[2] < 50


def test_exif_orientation_is_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    data = encode(Image.new("RGB", (60, 20), (0, 0, 0)), "JPEG", exif=exif.tobytes())
    assert images.decode(data, 1, LIMITS).size == (20, 60)


def test_alpha_is_composited_on_white() -> None:
    data = encode(Image.new("RGBA", (10, 10), (255, 0, 0, 0)), "PNG")
    assert images.decode(data, 1, LIMITS).image.getpixel((3, 3)) == (255, 255, 255)


def test_palette_transparency_is_composited_on_white() -> None:
    img = Image.new("P", (10, 10), 0)
    img.putpalette([0, 0, 0] * 256)
    data = encode(img, "PNG", transparency=0)
    assert images.decode(data, 1, LIMITS).image.getpixel((3, 3)) == (255, 255, 255)


def test_too_many_bytes() -> None:
    small = images.ImageLimits(max_bytes=1024, max_images=3, max_pixels=10**6)
    data = encode(Image.effect_noise((100, 100), 50).convert("RGB"), "PNG")
    with pytest.raises(ImageTooLarge) as err:
        images.decode(data, 2, small)
    assert "2" in err.value.message("en") and "第 2 张" in err.value.message("zh")


def test_too_many_images() -> None:
    with pytest.raises(TooManyImages):
        images.decode_all([b"x"] * 4, LIMITS)


def test_empty_file_is_named_as_such() -> None:
    with pytest.raises(ImageEmpty) as err:
        images.decode(b"", 2, LIMITS)
    assert err.value.code == "image_empty" and err.value.status == 400
    assert "Image 2 is an empty file (0 bytes)" in err.value.message("en")
    assert "第 2 张图片是空文件" in err.value.message("zh")
    assert "unknown" not in err.value.message("en")


@pytest.mark.parametrize("payload", [b"%PDF-1.4 hello", b"just text"])
def test_not_an_image(payload: bytes) -> None:
    with pytest.raises(ImageUnsupported):
        images.decode(payload, 1, LIMITS)


def test_unsupported_pil_format() -> None:
    data = encode(Image.new("RGB", (8, 8)), "TIFF")
    with pytest.raises(ImageUnsupported) as err:
        images.decode(data, 1, LIMITS)
    assert "TIFF" in err.value.message("en")


def test_truncated_image_is_unreadable() -> None:
    data = encode(Image.effect_noise((200, 200), 50).convert("RGB"), "PNG")
    with pytest.raises(ImageUnreadable):
        images.decode(data[: len(data) // 2], 1, LIMITS)


def png_header_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims ``width``×``height`` (a decompression bomb shape)."""
    data = bytearray(encode(Image.new("L", (1, 1)), "PNG"))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    data[16:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return bytes(data)


def test_pixel_limit_is_checked_from_the_header() -> None:
    with pytest.raises(ImageTooManyPixels) as err:  # our check, from the header
        images.decode(png_header_claiming(2_000, 1_000), 1, LIMITS)
    assert "2,000×1,000 pixels; the limit is 1,000,000 pixels" in err.value.message("en")
    with pytest.raises(ImageTooManyPixels) as err:  # PIL's own guard fires at open
        images.decode(png_header_claiming(60_000, 60_000), 1, LIMITS)
    assert "3,600,000,000 像素" in err.value.message("zh")


def test_pil_guard_does_not_trip_below_our_limit() -> None:
    # 100 M pixels is over PIL's default warning threshold (89 M) but under our limit:
    # no DecompressionBombWarning escapes (pytest runs with warnings as errors).
    generous = images.ImageLimits(max_bytes=10**6, max_images=1, max_pixels=200_000_000)
    images.raise_pil_guard(generous.max_pixels)
    with pytest.raises(ImageUnreadable):  # the claimed pixels are not there
        images.decode(png_header_claiming(10_000, 10_000), 1, generous)


def test_check_reads_no_pixel_until_asked() -> None:
    """A checked image decodes on first use: a request whose embedding is cached never
    pays for it; a corruption past the header surfaces then."""
    data = encode(Image.effect_noise((200, 200), 50).convert("RGB"), "PNG")
    truncated = images.check(data[: len(data) // 2], 1, LIMITS)
    assert truncated.size == (200, 200) and "image" not in vars(truncated)
    with pytest.raises(ImageUnreadable):
        truncated.load()
    whole = images.check(data, 1, LIMITS)
    assert whole.load() is whole.image and whole.image.size == (200, 200)


def test_check_knows_the_upright_size_from_the_header() -> None:
    exif = Image.Exif()
    exif[0x0112] = 8  # rotate 90° counter-clockwise to display
    data = encode(Image.new("RGB", (60, 20), (0, 0, 0)), "JPEG", exif=exif.tobytes())
    checked = images.check(data, 1, LIMITS)
    assert checked.size == (20, 60) and "image" not in vars(checked)
    assert checked.image.size == checked.size
