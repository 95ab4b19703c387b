"""The typed errors of qwen-ui.

Every user-visible failure is a :class:`QwenUIError` subclass that carries its HTTP status,
a stable machine code and a message in English and Chinese, formatted from keyword
parameters. One handler (``qwen_ui.web.errors``) turns any of them into one JSON shape::

    {"error": {"code": "...", "message": "...", "status": 400}}

Messages must never contain secrets: parameters are the things a person can act on
(a file name, a limit, a command to run).
"""

from __future__ import annotations

from typing import Any, ClassVar

from qwen_ui.lang import Lang


def error_body(
    code: str, message: str, status: int, retry_after: float | None = None
) -> dict[str, Any]:
    """The one error shape: ``{"error": {"code", "message", "status"[, "retry_after"]}}``."""
    body: dict[str, Any] = {"code": code, "message": message, "status": status}
    if retry_after is not None:
        body["retry_after"] = round(retry_after, 1)
    return {"error": body}


class QwenUIError(Exception):
    """Base class: an error a user may see."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    en: ClassVar[str] = "Something went wrong on the server."
    zh: ClassVar[str] = "服务器出错了。"

    def __init__(self, retry_after: float | None = None, **params: Any) -> None:
        self.params = params
        self.retry_after = retry_after
        super().__init__(self.message("en"))

    def message(self, lang: Lang | str = "en") -> str:
        template = self.zh if lang == "zh" else self.en
        return template.format(**self.params)

    def to_dict(self, lang: str = "en") -> dict[str, Any]:
        return error_body(self.code, self.message(lang), self.status, self.retry_after)


# --- the HTTP families -----------------------------------------------------------------


class BadRequest(QwenUIError):
    status = 400
    code = "bad_request"
    en = "The request is not valid."
    zh = "请求无效。"


class Unauthorized(QwenUIError):
    status = 401
    code = "unauthorized"
    en = "Please log in."
    zh = "请先登录。"


class Forbidden(QwenUIError):
    status = 403
    code = "forbidden"
    en = "You are not allowed to do this."
    zh = "您无权执行此操作。"


class NotFound(QwenUIError):
    status = 404
    code = "not_found"
    en = "Not found."
    zh = "未找到。"


class PayloadTooLarge(QwenUIError):
    status = 413
    code = "payload_too_large"
    en = "The upload is too large."
    zh = "上传的内容太大。"


class RequestTimeout(QwenUIError):
    status = 408
    code = "body_timeout"
    en = "The request body did not arrive within {seconds} s."
    zh = "请求内容未在 {seconds} 秒内到达。"


class RequestTooLarge(PayloadTooLarge):
    code = "request_too_large"
    en = "The request is larger than the limit of {limit_mb} MB."
    zh = "请求大小超过 {limit_mb} MB 的上限。"


class MalformedBody(BadRequest):
    code = "malformed_body"
    en = "The request body is malformed or incomplete (multipart without its closing boundary)."
    zh = "请求内容格式错误或不完整（multipart 内容缺少结束边界）。"


class TooManyRequests(QwenUIError):
    status = 429
    code = "too_many_requests"
    en = "Too many requests; retry in {seconds} s."
    zh = "请求过多，请在 {seconds} 秒后重试。"


class ServiceUnavailable(QwenUIError):
    status = 503
    code = "unavailable"
    en = "The service is temporarily unavailable; try again."
    zh = "服务暂时不可用，请重试。"


class BadGateway(QwenUIError):
    status = 502
    code = "bad_gateway"
    en = "The model server failed; try again."
    zh = "模型服务器出错，请重试。"


class GatewayTimeout(QwenUIError):
    status = 504
    code = "gateway_timeout"
    en = "The model server did not answer in time; try again."
    zh = "模型服务器未能及时响应，请重试。"


# --- state ------------------------------------------------------------------------------


class StateUnavailable(ServiceUnavailable):
    code = "state_unavailable"
    en = "The session store cannot be reached; try again shortly."
    zh = "无法连接会话存储，请稍后重试。"


# --- model store ------------------------------------------------------------------------


class ModelNotInstalled(ServiceUnavailable):
    code = "model_not_installed"
    en = "Model {model_id} (revision {revision}) is not installed. Install it with: {command}"
    zh = "模型 {model_id}（版本 {revision}）尚未安装。请运行：{command}"


class ModelCorrupt(ServiceUnavailable):
    code = "model_corrupt"
    en = "Model {model_id} is damaged: {problem} ({path}). Reinstall it."
    zh = "模型 {model_id} 已损坏：{problem}（{path}）。请重新安装。"


class StoreError(BadRequest):
    code = "store_error"
    en = "Model store: {problem}"
    zh = "模型仓库：{problem}"


class ManifestError(StoreError):
    """The bytes are not a snapshot manifest this version understands."""

    code = "manifest_invalid"
    en = "The model manifest is not valid: {problem}"
    zh = "模型清单无效：{problem}"


class FetchError(QwenUIError):
    """Downloading a model from the hub failed; ``exit_code`` is what ``qwen-ui models
    fetch`` ends with. The English message is the problem itself (the CLI prints it)."""

    status = 502
    code = "fetch_failed"
    en = "{problem}"
    zh = "模型下载失败：{problem}"

    def __init__(self, problem: str, exit_code: int) -> None:
        super().__init__(problem=problem)
        self.exit_code = exit_code


# --- engine -----------------------------------------------------------------------------


class EngineFailed(ServiceUnavailable):
    code = "engine_failed"
    en = "The model could not be loaded: {reason}"
    zh = "模型无法加载：{reason}"


class EngineNotAvailable(ServiceUnavailable):
    code = "engine_not_available"
    en = "Answering is not available yet on this server."
    zh = "此服务器暂不能回答问题。"


class NotStarted(ServiceUnavailable):
    code = "starting"
    en = "qwen-ui is starting; retry shortly."
    zh = "qwen-ui 正在启动，请稍后重试。"
