"""Typed errors of admission: busy (retry later) and never fits (change the request)."""

from __future__ import annotations

from qwen_ui.errors import BadRequest, PayloadTooLarge, ServiceUnavailable


class QueueFull(ServiceUnavailable):
    code = "busy_queue_full"
    en = "The server is busy ({waiting} questions waiting); retry in {seconds} s."
    zh = "服务器繁忙（{waiting} 个问题在排队），请在 {seconds} 秒后重试。"


class QueueTimeout(ServiceUnavailable):
    code = "busy_wait_timeout"
    en = "The server stayed busy for {waited} s; retry in {seconds} s."
    zh = "服务器持续繁忙 {waited} 秒，请在 {seconds} 秒后重试。"


class NeverFits(PayloadTooLarge):
    code = "request_too_large_for_memory"
    en = (
        "This question needs about {needed} of memory but the server has {budget} for "
        "questions. Ask with fewer or smaller images, or a lower max_new_tokens."
    )
    zh = (
        "这个问题约需 {needed} 内存，而服务器可用于提问的只有 {budget}。"
        "请减少图片数量、使用更小的图片或降低 max_new_tokens。"
    )


class ImagesNeverFit(NeverFits):
    en = (
        "This question needs about {needed} of memory but the server has {budget} for "
        "questions. Attach fewer or smaller images ({images} attached, {tokens} image tokens)."
    )
    zh = (
        "这个问题约需 {needed} 内存，而服务器可用于提问的只有 {budget}。"
        "请减少图片数量或使用更小的图片（已附加 {images} 张，共 {tokens} 个图像 token）。"
    )


class ImageAspect(BadRequest):
    code = "image_aspect_ratio"
    en = "Image {index} is {width}×{height}; its long side may be at most 200 times its short side."
    zh = "第 {index} 张图片为 {width}×{height}；长边最多为短边的 200 倍。"


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit in ("B", "KiB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
