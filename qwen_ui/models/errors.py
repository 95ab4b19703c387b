"""Typed errors of the model layer: picking, loading room, and the admin route."""

from __future__ import annotations

from qwen_ui.errors import BadRequest, NotFound, ServiceUnavailable, Unauthorized


class UnknownModel(NotFound):
    code = "model_not_found"
    en = "The model '{model}' is not offered here; choose one of: {offered}."
    zh = "此处不提供模型“{model}”；请从以下模型中选择：{offered}。"


class ModelNeverFits(ServiceUnavailable):
    code = "model_never_fits"
    en = (
        "The model {model} needs {needed} for its weights, more than the {limit} the server "
        "allows for models (QWEN_UI_MODEL_MEMORY_BYTES)."
    )
    zh = (
        "模型 {model} 的权重需要 {needed}，超过服务器允许模型使用的 {limit}"
        "（QWEN_UI_MODEL_MEMORY_BYTES）。"
    )


class ModelsBusy(ServiceUnavailable):
    code = "models_busy"
    en = "The model {model} is waiting for memory held by busy models; try again shortly."
    zh = "模型 {model} 正在等待其他繁忙模型释放内存，请稍后重试。"


class SwitchRefused(BadRequest):
    code = "switch_refused"
    en = "Cannot switch models: {reason}"
    zh = "无法切换模型：{reason}"


class AdminUnauthorized(Unauthorized):
    code = "admin_unauthorized"
    en = "This admin route needs the admin token (QWEN_UI_ADMIN_TOKEN) as a Bearer token."
    zh = "此管理接口需要以 Bearer 方式提供管理令牌（QWEN_UI_ADMIN_TOKEN）。"
