"""Typed errors of ``qwen-ui batch``: per-row ones land in the row's output line and never
stop the run; the others (an unreadable input file, a server that refuses the token) stop
it before any row runs."""

from __future__ import annotations

from qwen_ui.errors import BadRequest, ServiceUnavailable, Unauthorized

__all__ = [
    "BadRow",
    "BatchInputError",
    "DuplicateRowId",
    "ImageFileMissing",
    "OssKeyUnsupported",
    "ServerRefusedToken",
    "ServerUnreachable",
]


class BatchInputError(BadRequest):
    code = "batch_input"
    en = "Cannot read the batch input {path}: {problem}"
    zh = "无法读取批量输入文件 {path}：{problem}"


class BadRow(BadRequest):
    code = "bad_row"
    en = "Row {row} cannot be read: {problem}"
    zh = "第 {row} 行无法读取：{problem}"


class DuplicateRowId(BadRequest):
    code = "duplicate_id"
    en = "Row {row} repeats the id {row_id!r} of an earlier row; ids must be unique."
    zh = "第 {row} 行的 id {row_id!r} 与前面的行重复；id 必须唯一。"


class ImageFileMissing(BadRequest):
    code = "image_missing"
    en = "Image {index} ({path}) does not exist or cannot be read."
    zh = "第 {index} 张图片（{path}）不存在或无法读取。"


class OssKeyUnsupported(BadRequest):
    code = "oss_unsupported"
    en = (
        "Image {index} is an OSS key ({key}): the API takes uploaded images only, so batch "
        "cannot read OSS objects. Download them and list their paths instead."
    )
    zh = (
        "第 {index} 张图片是 OSS 对象（{key}）：API 只接受上传的图片，批量任务无法读取 OSS "
        "对象。请先下载，再列出它们的路径。"
    )


class ServerUnreachable(ServiceUnavailable):
    code = "server_unreachable"
    en = "The server at {url} could not be reached: {reason}"
    zh = "无法连接服务器 {url}：{reason}"


class ServerRefusedToken(Unauthorized):
    code = "server_refused_token"
    en = (
        "The server at {url} does not accept this API token "
        "(create one with `qwen-ui tenants token TENANT`)."
    )
    zh = "服务器 {url} 不接受此 API 令牌（用 `qwen-ui tenants token TENANT` 创建）。"
