"""The typed errors of login, sessions, API tokens and OSS object access.

Every wrong credential gets the same :class:`InvalidCredentials` answer, whatever was wrong
(unknown tenant, unknown key, wrong secret, bad or expired STS token, no rights, key not
allowed): the message must not tell an attacker which part to change.
"""

from __future__ import annotations

from qwen_ui.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
)


class InvalidCredentials(Unauthorized):
    code = "invalid_credentials"
    en = "The tenant or credentials are not valid."
    zh = "租户或凭证无效。"


class BadExpiration(BadRequest):
    code = "bad_expiration"
    en = "The STS expiration is not a date and time like 2026-11-30T10:00:00Z."
    zh = "STS 过期时间格式不正确，应类似 2026-11-30T10:00:00Z。"


class LoginThrottled(TooManyRequests):
    code = "login_throttled"
    en = "Too many failed logins; try again in {seconds} s."
    zh = "登录失败次数过多，请在 {seconds} 秒后重试。"


class OSSUnavailable(ServiceUnavailable):
    code = "oss_unavailable"
    en = "Cannot reach OSS, try again."
    zh = "无法连接 OSS，请重试。"


class CsrfFailed(Forbidden):
    code = "csrf_failed"
    en = "The form expired or came from another site; reload the page and try again."
    zh = "表单已过期或来自其他网站，请刷新页面后重试。"


class SessionExpired(Unauthorized):
    code = "session_expired"
    en = "Your session has ended; please log in again."
    zh = "会话已结束，请重新登录。"


class InvalidToken(Unauthorized):
    code = "invalid_token"
    en = "The API token is not valid or was revoked."
    zh = "API 令牌无效或已被撤销。"


class ObjectKeyRejected(BadRequest):
    code = "object_key_rejected"
    en = "That object name is not allowed: {reason}."
    zh = "不允许使用该对象名：{reason}。"


class ObjectTooLarge(PayloadTooLarge):
    code = "object_too_large"
    en = "The object is larger than {limit} bytes."
    zh = "对象大于 {limit} 字节。"


class ObjectNotFound(NotFound):
    code = "object_not_found"
    en = "No such object in your storage."
    zh = "您的存储中没有该对象。"


class ObjectAccessDenied(Forbidden):
    code = "object_access_denied"
    en = "Your credentials may not read that object."
    zh = "您的凭证无权读取该对象。"


class NoObjectStorage(NotFound):
    code = "no_object_storage"
    en = "Object storage is only available after logging in with an OSS AccessKey."
    zh = "只有使用 OSS AccessKey 登录后才能使用对象存储。"


class TenantsFileError(BadRequest):
    code = "tenants_file_error"
    en = "Tenants file {path}: {problem}"
    zh = "租户文件 {path}：{problem}"


class ServerKeyError(ServiceUnavailable):
    code = "server_key_error"
    en = "Server key: {problem}"
    zh = "服务器密钥：{problem}"


class QuotaExceeded(TooManyRequests):
    code = "quota_exceeded"
    en = (
        "Your organisation has asked its {limit} questions for today; "
        "the count resets at 00:00 UTC."
    )
    zh = "您所在的组织今天已用完 {limit} 个提问额度；额度在 UTC 00:00 重置。"


class TenantBusy(TooManyRequests):
    code = "tenant_busy"
    en = "Your organisation already has {limit} questions running; try again when one finishes."
    zh = "您所在的组织已有 {limit} 个问题正在处理，请在其中一个完成后重试。"
