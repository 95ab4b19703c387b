"""Process-wide logging: one format, the configured level for every logger, each line
written once, oss2 kept quiet.

``qwen-ui serve`` calls :func:`configure` before uvicorn starts (uvicorn configures only its
own loggers, which do not pass their lines on). The level applies to the root logger and
its handler, so at ``debug`` the lines of qwen-ui and of the libraries it drives (urllib3,
redis, the multipart parser) all reach the log. Some libraries give their loggers a console
handler of their own and still pass each line on to the root (huggingface_hub, imported
with Gradio): :func:`one_line_each` takes those handlers away, so that such a line is
written once, in this format; ``serve`` calls it again once the app is built, when those
libraries have been imported.
oss2 (and aliyunsdkcore, which it imports) logs request headers, the Authorization header
and the STS token among them, at DEBUG: their loggers are pinned to WARNING whatever the
level. qwen-ui's own lines never
carry a password, AccessKey secret, STS token, session id or API token.
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# aliyunsdkcore (oss2's KMS client) sets its request logger to DEBUG itself and writes the
# Authorization header there when the environment has DEBUG=sdk
OSS2_LOGGERS = ("oss2", "oss2.http", "oss2.api", "oss2.auth", "aliyunsdkcore.http.http_response")
NOISY_AT_DEBUG = ("PIL",)  # a line per image chunk decoded


def quiet_oss2_logging() -> None:
    for name in OSS2_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def configure(level: str) -> None:
    """Log at ``level`` (debug, info, warning, error) to stderr."""
    numeric = logging.getLevelNamesMapping()[level.upper()]
    logging.basicConfig(format=FORMAT, level=numeric, force=True)
    for handler in logging.getLogger().handlers:  # also for loggers set lower by a library
        handler.setLevel(numeric)
    logging.getLogger("qwen_ui").setLevel(numeric)
    for name in NOISY_AT_DEBUG:
        logging.getLogger(name).setLevel(max(numeric, logging.INFO))
    quiet_oss2_logging()
    one_line_each()


def one_line_each() -> None:
    """Remove the console handlers of loggers whose lines also reach the root's handler
    (each of their lines would be written twice); file handlers stay."""
    for logger in logging.Logger.manager.loggerDict.values():
        if not isinstance(logger, logging.Logger) or not _reaches_root(logger):
            continue
        for handler in list(logger.handlers):
            if _on_console(handler):
                logger.removeHandler(handler)


def _reaches_root(logger: logging.Logger) -> bool:
    current: logging.Logger | None = logger
    while current is not None and current is not logging.root:
        if not current.propagate:
            return False
        current = current.parent
    return bool(logging.root.handlers)


def _on_console(handler: logging.Handler) -> bool:
    console = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    if not isinstance(handler, logging.StreamHandler) or isinstance(handler, logging.FileHandler):
        return False
    return any(handler.stream is stream for stream in console)
