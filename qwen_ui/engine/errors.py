"""Typed errors of the engine: every one a person may see, in English and Chinese."""

from __future__ import annotations

from qwen_ui.errors import (
    BadRequest,
    EngineFailed,
    NotFound,
    PayloadTooLarge,
    QwenUIError,
    ServiceUnavailable,
)

__all__ = [
    "AnswerFailed",
    "ConversationNotFound",
    "EngineFailed",
    "EngineStopped",
    "ImageEmpty",
    "ImageTooLarge",
    "ImageTooManyPixels",
    "ImageUnreadable",
    "ImageUnsupported",
    "NoImage",
    "NoQuestion",
    "QuestionTooLong",
    "TooManyImages",
    "UnsupportedCheckpoint",
    "UnsupportedModel",
]


class ImageUnsupported(BadRequest):
    code = "image_unsupported"
    en = "Image {index} is not a supported format ({found}); use JPEG, PNG, WebP, BMP or GIF."
    zh = "第 {index} 张图片的格式不受支持（{found}）；请使用 JPEG、PNG、WebP、BMP 或 GIF。"


class ImageEmpty(BadRequest):
    code = "image_empty"
    en = "Image {index} is an empty file (0 bytes); attach the image again."
    zh = "第 {index} 张图片是空文件（0 字节），请重新添加图片。"


class ImageUnreadable(BadRequest):
    code = "image_unreadable"
    en = "Image {index} could not be read; the file may be damaged."
    zh = "无法读取第 {index} 张图片，文件可能已损坏。"


class ImageTooLarge(PayloadTooLarge):
    code = "image_too_large"
    en = "Image {index} is {size_mb} MB; the limit is {limit_mb} MB per image."
    zh = "第 {index} 张图片大小为 {size_mb} MB，每张图片上限为 {limit_mb} MB。"


class ImageTooManyPixels(PayloadTooLarge):
    code = "image_too_many_pixels"
    # pixels: a text (a count or width×height, already with separators); limit: an int
    en = "Image {index} has {pixels} pixels; the limit is {limit:,} pixels per image."
    zh = "第 {index} 张图片有 {pixels} 像素，每张图片上限为 {limit:,} 像素。"


class TooManyImages(BadRequest):
    code = "too_many_images"
    en = "{count} images attached; at most {limit} per question."
    zh = "附加了 {count} 张图片；每个问题最多 {limit} 张。"


class NoQuestion(BadRequest):
    code = "no_question"
    en = "Please type a question."
    zh = "请输入问题。"


class NoImage(BadRequest):
    code = "no_image"
    en = "Please attach an image first: this model only answers questions about images."
    zh = "请先添加图片：这个模型只回答关于图片的问题。"


class QuestionTooLong(BadRequest):
    code = "question_too_long"
    en = "The question has {count:,} characters; the limit is {limit:,}."
    zh = "问题有 {count:,} 个字符，上限为 {limit:,} 个。"


SEED_MAX = 2**64 - 1  # torch.Generator.manual_seed takes 0 .. 2^64 - 1


class BadOption(BadRequest):
    code = "bad_option"
    en = "Option {name} must be between {low} and {high}."
    zh = "选项 {name} 必须在 {low} 与 {high} 之间。"


class ConversationNotFound(NotFound):
    code = "conversation_not_found"
    en = "This conversation no longer exists; start a new one."
    zh = "该对话已不存在，请开始新对话。"


class UnsupportedModel(EngineFailed):
    code = "unsupported_model"
    en = "The model could not be loaded: {reason}"
    zh = "模型无法加载：{reason}"


class UnsupportedCheckpoint(UnsupportedModel):
    """A checkpoint whose architecture or weight layout the local engine cannot run
    (:mod:`qwen_ui.engine.layouts`): refused at install time, and at load time."""

    code = "unsupported_checkpoint"
    en = "This checkpoint cannot run on the local engine: {reason}"
    zh = "此模型检查点无法在本地引擎上运行：{reason}"


class AnswerFailed(QwenUIError):
    code = "answer_failed"
    en = "The answer could not be completed; please try again."
    zh = "未能完成回答，请重试。"


class EngineStopped(ServiceUnavailable):
    code = "engine_stopped"
    en = "The server is shutting down; try again shortly."
    zh = "服务器正在关闭，请稍后重试。"
