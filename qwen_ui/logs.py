"""Process-wide logging: one format, the configured level for every logger, oss2 kept quiet.

``qwen-ui serve`` calls :func:`configure` before uvicorn starts (uvicorn configures only its
own loggers). The level applies to the root logger, so at ``debug`` the lines of qwen-ui
and of the libraries it drives (urllib3, redis, the multipart parser) all reach the log.
oss2 logs request headers, the Authorization header and the STS token among them, at
DEBUG: its loggers are pinned to WARNING whatever the level. qwen-ui's own lines never
carry a password, AccessKey secret, STS token, session id or API token.
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
OSS2_LOGGERS = ("oss2", "oss2.http", "oss2.api", "oss2.auth")
NOISY_AT_DEBUG = ("PIL",)  # a line per image chunk decoded


def quiet_oss2_logging() -> None:
    for name in OSS2_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def configure(level: str) -> None:
    """Log at ``level`` (debug, info, warning, error) to stderr."""
    numeric = logging.getLevelNamesMapping()[level.upper()]
    logging.basicConfig(format=FORMAT, level=numeric, force=True)
    logging.getLogger("qwen_ui").setLevel(numeric)
    for name in NOISY_AT_DEBUG:
        logging.getLogger(name).setLevel(max(numeric, logging.INFO))
    quiet_oss2_logging()
