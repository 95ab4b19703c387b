"""Typed errors of ``qwen-ui batch``: per-row ones land in the row's output line and never
stop the run; the others (an unreadable input file, a server that refuses the token, OSS
keys that are missing or refused) stop it before any row runs."""

from __future__ import annotations

from qwen_ui.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    Unauthorized,
)

__all__ = [
    "BadRow",
    "BatchInputError",
    "DuplicateRowId",
    "ImageFileMissing",
    "OssCredentialsMissing",
    "OssKeyRejected",
    "OssKeysExpired",
    "OssKeysRefused",
    "OssNotConfigured",
    "OssObjectDenied",
    "OssObjectMissing",
    "OssObjectTooLarge",
    "OssTenantMissing",
    "OssUnreachable",
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


class OssNotConfigured(BadRequest):
    code = "oss_not_configured"
    en = "Image {index} is an OSS object ({key}), but this batch has no OSS keys and bucket."
    zh = "第 {index} 张图片是 OSS 对象（{key}），但此批量任务没有 OSS 密钥和存储桶。"


class OssCredentialsMissing(BadRequest):
    code = "oss_credentials_missing"
    en = (
        "Rows name OSS objects (oss://KEY): set OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET "
        "(and OSS_SESSION_TOKEN for an STS key) to RAM keys that may read them."
    )
    zh = (
        "有的行引用了 OSS 对象（oss://KEY）：请把 OSS_ACCESS_KEY_ID 和 OSS_ACCESS_KEY_SECRET"
        "（STS 临时密钥另加 OSS_SESSION_TOKEN）设为可读取这些对象的 RAM 密钥。"
    )


class OssTenantMissing(BadRequest):
    code = "oss_tenant_missing"
    en = "Rows name OSS objects (oss://KEY), but {problem}."
    zh = "有的行引用了 OSS 对象（oss://KEY），但{problem}。"


class OssKeysRefused(Unauthorized):
    code = "oss_keys_refused"
    en = "The OSS keys cannot list {bucket}/{prefix} ({reason}): {advice}."
    zh = "OSS 密钥无法列出 {bucket}/{prefix}（{reason}）：{advice}。"


class OssKeyRejected(BadRequest):
    code = "oss_key_rejected"
    en = "Image {index} ({key}) is not an object this tenant may name: {reason}."
    zh = "第 {index} 张图片（{key}）不是本租户可以使用的对象：{reason}。"


class OssObjectMissing(NotFound):
    code = "oss_object_missing"
    en = "Image {index} ({key}) is not in the tenant's bucket."
    zh = "第 {index} 张图片（{key}）不在本租户的存储桶中。"


class OssObjectDenied(Forbidden):
    code = "oss_object_denied"
    en = "Image {index} ({key}): the OSS keys may not read it."
    zh = "第 {index} 张图片（{key}）：OSS 密钥无权读取。"


class OssObjectTooLarge(PayloadTooLarge):
    code = "oss_object_too_large"
    en = "Image {index} ({key}) is larger than {limit} bytes."
    zh = "第 {index} 张图片（{key}）大于 {limit} 字节。"


class OssUnreachable(ServiceUnavailable):
    code = "oss_unreachable"
    en = "Image {index} ({key}) could not be read: OSS could not be reached."
    zh = "无法读取第 {index} 张图片（{key}）：无法连接 OSS。"


class OssKeysExpired(Unauthorized):
    code = "oss_keys_expired"
    en = (
        "Image {index} ({key}) could not be read: OSS no longer accepts the keys (an "
        "expired STS token?)."
    )
    zh = "无法读取第 {index} 张图片（{key}）：OSS 不再接受这些密钥（STS 令牌过期？）。"


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
