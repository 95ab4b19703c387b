"""The OpenAI chat-completions wire format: the request body checked into a
:class:`ChatCall`, and the response, chunk, model and error objects.

Accepted: ``model``, ``messages`` (roles ``user`` and ``assistant``; user content is a
string or a list of ``text`` and ``image_url`` parts), ``stream``, ``stream_options``
(``include_usage``), ``max_tokens`` / ``max_completion_tokens``, ``temperature``,
``top_p``, ``seed``, ``stop``, ``n`` (1 only), ``user`` (ignored) and our extension
``qwen_ui`` (``{"stages": true}``). Any other field with a value is a 400 naming it,
so that a client never believes a setting took effect when it did not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from qwen_ui.engine.engine import AskOptions
from qwen_ui.errors import BadRequest, NotFound, QwenUIError

ACCEPTED = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "n",
        "user",
        "qwen_ui",
    }
)
# Fields some clients always send; harmless at these values.
NEUTRAL: dict[str, object] = {
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logprobs": False,
    "parallel_tool_calls": True,
}
MAX_STOPS = 4

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


# --- typed errors -------------------------------------------------------------------------


class UnsupportedField(BadRequest):
    code = "unsupported_parameter"
    en = "Parameter '{param}' is not supported here: {reason}"
    zh = "不支持参数“{param}”：{reason}"


class BadField(BadRequest):
    code = "invalid_value"
    en = "Parameter '{param}' is not valid: {reason}"
    zh = "参数“{param}”无效：{reason}"


class ModelNotServed(NotFound):
    code = "model_not_found"
    en = "The model '{model}' is not served here; choose one of: {offered} (GET /v1/models)."
    zh = "此处不提供模型“{model}”；请从以下模型中选择：{offered}（GET /v1/models）。"


def error_body(
    code: str, message: str, status: int, param: str | None = None
) -> dict[str, dict[str, Any]]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def is_openai_path(path: str) -> bool:
    """Whether ``path`` (without the proxy's prefix) is one of the OpenAI-style routes."""
    return path.startswith("/v1/")


def body_for(path: str, error: QwenUIError, lang: str) -> dict[str, Any]:
    """The error body for a request to ``path``: OpenAI's object under /v1/, else ours."""
    if not is_openai_path(path):
        return error.to_dict(lang)
    return error_body(error.code, error.message(lang), error.status, param_of(error))


def param_of(error: Exception) -> str | None:
    params = getattr(error, "params", {})
    value = params.get("param") if isinstance(params, dict) else None
    return str(value) if value is not None else None


# --- the request --------------------------------------------------------------------------


@dataclass(frozen=True)
class UserTurn:
    text: str
    image_urls: list[str]


@dataclass(frozen=True)
class ChatCall:
    """A checked request: earlier (user, assistant) pairs, then the new user turn."""

    model: str
    history: list[tuple[UserTurn, str]]
    question: UserTurn
    options: AskOptions
    stream: bool = False
    include_usage: bool = False
    stops: list[str] = field(default_factory=list)
    stages: bool = False

    @property
    def image_count(self) -> int:
        return len(self.question.image_urls) + sum(len(u.image_urls) for u, _ in self.history)


def parse(body: object) -> ChatCall:
    if not isinstance(body, dict):
        raise BadField(param="body", reason="expected a JSON object")
    _refuse_unknown(body)
    if _get(body, "n", int, 1) != 1:
        raise UnsupportedField(param="n", reason="only n=1 is supported")
    history, question = _messages(body.get("messages"))
    options = _options(body)
    stream = _get(body, "stream", bool, False)
    stream_options = _get(body, "stream_options", dict, {})
    extension = _get(body, "qwen_ui", dict, {})
    return ChatCall(
        model=_model(body),
        history=history,
        question=question,
        options=options,
        stream=stream,
        include_usage=bool(stream_options.get("include_usage", False)),
        stops=_stops(body.get("stop")),
        stages=bool(extension.get("stages", False)),
    )


def _refuse_unknown(body: dict[str, Any]) -> None:
    for key, value in body.items():
        if key in ACCEPTED or value is None:
            continue
        if key in NEUTRAL and value == NEUTRAL[key]:
            continue
        raise UnsupportedField(param=key, reason="this server does not implement it")


def _get(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadField(param=key, reason=f"expected {kind.__name__}")
    return value


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadField(param="model", reason="a model id is required (see GET /v1/models)")
    return model


def _options(body: dict[str, Any]) -> AskOptions:
    max_tokens = _get(body, "max_completion_tokens", int, None)
    if max_tokens is None:
        max_tokens = _get(body, "max_tokens", int, None)
    return AskOptions(
        max_new_tokens=max_tokens,
        temperature=_get(body, "temperature", float, None),
        top_p=_get(body, "top_p", float, None),
        seed=_get(body, "seed", int, None),
    )


def _stops(value: object) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if stops is None:
        return []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadField(param="stop", reason="a string or a list of non-empty strings")
    if len(stops) > MAX_STOPS:
        raise BadField(param="stop", reason=f"at most {MAX_STOPS} sequences")
    return list(stops)


def _messages(value: object) -> tuple[list[tuple[UserTurn, str]], UserTurn]:
    if not isinstance(value, list) or not value:
        raise BadField(param="messages", reason="a non-empty list of messages")
    roles = [m.get("role") if isinstance(m, dict) else None for m in value]
    if "system" in roles or "developer" in roles:
        raise UnsupportedField(
            param="messages", reason="system messages (the model's own system prompt is used)"
        )
    expected = ["user" if i % 2 == 0 else "assistant" for i in range(len(value))]
    if roles != expected or len(value) % 2 == 0:
        raise BadField(
            param="messages",
            reason="user and assistant messages must alternate, starting and ending with user",
        )
    history = [
        (_user(value[i], i), _assistant(value[i + 1], i + 1)) for i in range(0, len(value) - 1, 2)
    ]
    return history, _user(value[-1], len(value) - 1)


def _user(message: dict[str, Any], index: int) -> UserTurn:
    content = message.get("content")
    if isinstance(content, str):
        return UserTurn(content, [])
    if not isinstance(content, list):
        raise BadField(param=f"messages[{index}].content", reason="a string or a list of parts")
    texts, urls = [], []
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            urls.append(_image_url(part.get("image_url"), where))
        else:
            raise UnsupportedField(param=where, reason="parts must be 'text' or 'image_url'")
    return UserTurn("\n".join(texts), urls)


def _image_url(value: object, where: str) -> str:
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise BadField(param=where, reason="image_url needs a url")
    return url


def _assistant(message: dict[str, Any], index: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise BadField(param=f"messages[{index}].content", reason="assistant content must be text")


# --- the response -------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """What every response object of one call shares."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def completion(
        self,
        answer: str,
        finish: str,
        usage: dict[str, int],
        extra: dict[str, Any] | None,
        boxes: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """``boxes``: our extension, ``choices[0].message.boxes`` (see ``boxes_of``)."""
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer, "boxes": boxes or []},
                    "finish_reason": finish,
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }
        if extra is not None:
            body["qwen_ui"] = extra
        return body

    def chunk(
        self,
        delta: dict[str, Any] | None = None,
        finish: str | None = None,
        usage: dict[str, int] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A ``chat.completion.chunk``; without ``delta`` and ``finish``, its choices are
        empty (the usage chunk, and our extension's stage chunks)."""
        choices = []
        if delta is not None or finish is not None:
            choices = [
                {"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}
            ]
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            body["usage"] = usage
        if extra is not None:
            body["qwen_ui"] = extra
        return body


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def model_list(model_ids: list[str], created: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": created, "owned_by": m.split("/")[0]}
            for m in model_ids
        ],
    }
