"""qwen-ui: self-hosted visual question answering with Qwen vision-language models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("qwen-ui")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+local"

__all__ = ["__version__"]
