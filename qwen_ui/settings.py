"""Every setting of qwen-ui, declared once.

Each field carries its type, default, bounds and description. Environment variables
(``QWEN_UI_<NAME>``), the ``qwen-ui serve`` flags and the README configuration table are
all derived from these declarations; nothing else in the package reads the environment.

Paths left unset derive from ``home`` so that one variable (``QWEN_UI_HOME``) moves a
whole instance: models, tenants, keys and logs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "QWEN_UI_"
DEMO_MODEL_ID = "qwen-ui/shapes-vl-demo"
MiB = 1024 * 1024
MODEL_REF = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+@[\w.-]+$")  # OWNER/NAME@REV


def default_home() -> Path:
    """``$XDG_DATA_HOME/qwen-ui`` or ``~/.local/share/qwen-ui``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "qwen-ui"


def default_themes_dir() -> Path:
    """The ``themes/`` folder shipped inside the package."""
    return Path(__file__).resolve().parent / "themes"


class Settings(BaseSettings):
    """The configuration of one qwen-ui process."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", validate_default=True, frozen=True
    )

    # --- instance -------------------------------------------------------------------
    home: Path = Field(
        default_factory=default_home,
        description="Root of this instance; unset paths below live under it.",
    )
    host: str = Field("127.0.0.1", description="Address the HTTP server binds.")
    port: int = Field(7860, ge=1, le=65535, description="Port the HTTP server binds.")
    ui_path: str = Field("/", description="URL path where the Gradio UI is mounted.")
    root_path: str = Field(
        "", description="URL prefix added by a reverse proxy in front of the app, if any."
    )
    forwarded_allow_ips: str = Field(
        "127.0.0.1",
        description="Comma-separated proxy addresses whose X-Forwarded-* headers are trusted "
        "('*' trusts all).",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info",
        description="Log level of the server log, qwen-ui's and its libraries' lines alike "
        "(oss2 stays at warning: it logs credentials at debug).",
    )
    log_dir: Path | None = Field(None, description="Audit log folder (default: HOME/logs).")
    language: Literal["auto", "en", "zh"] = Field(
        "auto", description="UI language; 'auto' follows the browser."
    )
    theme: str = Field("qwen", description="Name of the theme folder under themes_dir.")
    themes_dir: Path = Field(
        default_factory=default_themes_dir, description="Folder holding the UI themes."
    )
    show_api: bool = Field(False, description="Show Gradio's API-docs link in the footer.")
    metrics_token: SecretStr | None = Field(
        None, description="Bearer token required by /metrics (unset: open)."
    )
    cors_origins: str = Field(
        "",
        description="Comma-separated origins (e.g. https://portal.example.com) allowed to "
        "call this server from a browser page of another site, with credentials; empty: "
        "none. Those origins also pass the same-origin check on cookie-authenticated posts.",
    )
    body_read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="Longest wait for the next piece of a request body; a client that "
        "withholds its body gets 408 and its connection is closed.",
    )

    # --- model and store ------------------------------------------------------------
    model_id: str = Field(
        DEMO_MODEL_ID,
        pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$",
        description="Model to serve, OWNER/NAME, as installed in the model store.",
    )
    model_revision: str = Field(
        "bf16",
        pattern=r"^[\w.-]+$",
        description="Revision (ref) of the model in the store.",
    )
    models: str = Field(
        "",
        description="Models to offer, OWNER/NAME@REV comma-separated; the first is the default "
        "and sets model_id and model_revision. Empty: model_id@model_revision alone.",
    )
    model_memory_bytes: int = Field(
        0,
        ge=0,
        description="Most bytes the loaded models' weights may take together (checkpoint size, "
        "5% more on CUDA); loading one more first unloads the least recently used idle ones. "
        "0: three quarters of the device budget on CUDA, no limit on the CPU.",
    )
    admin_token: SecretStr | None = Field(
        None,
        description="Bearer token of the admin routes (POST /admin/models/activate, used by "
        "'qwen-ui models activate'); unset: they refuse every call. Never logged.",
    )
    settings_file: Path | None = Field(
        None,
        description="File of QWEN_UI_*=value lines (e.g. the systemd EnvironmentFile) read "
        "again on SIGHUP: its model list (QWEN_UI_MODELS, else QWEN_UI_MODEL_ID and "
        "QWEN_UI_MODEL_REVISION) replaces the served one; other settings need a restart.",
    )
    model_dir: Path | None = Field(
        None, description="Model store root, e.g. the ESSD mount (default: HOME/models)."
    )
    preload: bool | Literal["auto"] = Field(
        "auto",
        description="Load the model at start-up instead of on the first question, then answer "
        "one synthetic 1-image question (the warm-up, which records the CUDA graphs and "
        "compiles the decode step) before /readyz turns ready; 'auto' = on CUDA only. "
        "On CUDA with the other 'auto' defaults this adds tens of seconds to start-up "
        "(docs/BENCHMARKS.md has the measured cost); /healthz answers throughout.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the model runs; 'auto' picks CUDA when present."
    )
    decode_mode: Literal["auto", "eager", "static"] = Field(
        "auto",
        description="KV cache of the decode loop: 'eager' grows a dynamic cache per request, "
        "'static' decodes into fixed-length caches the worker pools; 'auto' = static on CUDA "
        "(the fast path), eager on the CPU.",
    )
    vision_attention: Literal["batched", "stock"] = Field(
        "batched",
        description="Vision tower attention: 'batched' attends every window of a layer in "
        "one call and, on CUDA, pads MLP widths to whole 16-byte rows (zero weights, for "
        "cuBLAS's aligned kernels); 'stock' keeps transformers' per-window loop and widths "
        "(flash-attention models keep their own single call either way).",
    )
    prefill_dequant_rows: int = Field(
        256,
        ge=0,
        description="AWQ models: prompts of more tokens than this run each int4 layer on a "
        "weight dequantized for that call instead of the int4 kernel, which is slow at large "
        "batch. On CUDA it reads the kernel's own weight, and the first such prompt compiles "
        "the prefill's kernels (once per process); on the CPU it keeps AWQ's tensors beside "
        "it (4 bits more per weight). 0 = off.",
    )
    dense_weight_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="AWQ models on CUDA: the most of vram_budget that bf16 copies of the "
        "int4 weights may take, all together (kept only when all fit; 0 = never). A "
        "layer multiplies inputs of many rows by its copy instead of the int4 kernel: a "
        "batch's decode step from the row count where that is faster, timed per layer shape "
        "at load, and long prompts without dequantizing. Admission counts the copies with "
        "the weights. Opt-in: the 7B architecture's copies take about 12 GiB.",
    )
    triton_int4: bool | Literal["auto"] = Field(
        "auto",
        description="AWQ models on CUDA with max_batch > 1: a batch's decode steps of a few "
        "sequences (from the row count where it was faster than torch's int4 kernel, timed "
        "per layer shape at load, up to 16) multiply by a Triton int4 kernel reading its "
        "own copy of each int4 weight: half a byte per weight more (about 3.3 GiB for the "
        "7B architecture), counted by admission with the weights. 'auto' = on on CUDA "
        "with max_batch > 1.",
    )
    fuse_projections: bool = Field(
        True,
        description="AWQ models: one int4 matmul for each attention's q/k/v and one for each "
        "MLP's gate/up (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), seven kernel calls per layer become four.",
    )
    max_batch: int = Field(
        16,
        ge=1,
        le=64,
        description="Most requests the worker answers at once (continuous batching): "
        "newcomers join the running batch between decode steps, their images encoded and "
        "their prompts prefilled together, and each decode step is one forward call over "
        "the batch's shared KV cache. 1 = one request at a time through the single-request "
        "decode loop, the only one decode_mode applies to.",
    )
    batch_prefill_tokens: int = Field(
        1536,
        ge=0,
        le=1_048_576,
        description="With max_batch > 1: the most prompt positions (of all newcomers "
        "together, padded to the longest) prefilled between two decode steps while other "
        "answers are running; a longer prefill continues at the next steps, so running "
        "answers pause for at most that much prefill, and its activations (which admission "
        "reserves) stay those of one chunk; their images then go through the vision tower "
        "one at a time. Newcomers to an idle batch are prefilled in one pass. 0 = each "
        "prefill (and the newcomers' images) in one pass.",
    )
    batch_join_wait_ms: int = Field(
        50,
        ge=0,
        le=1000,
        description="With max_batch > 1: while other questions are still being checked "
        "and planned, newcomers wait for them up to this many milliseconds before joining "
        "the batch, so that questions asked together are encoded and prefilled together; "
        "a question with no other on its way joins at once. 0 = no wait.",
    )
    static_cache_pool_bytes: int = Field(
        1024 * MiB,
        ge=0,
        le=64 * 1024 * MiB,
        description="Static decode: idle KV caches kept for reuse, at most this many bytes in "
        "all (least recently used go first); kept out of the request budget.",
    )
    compile_decode: bool | Literal["auto"] = Field(
        "auto",
        description="With a static cache on CUDA, run the decode step through torch.compile "
        "(mode='reduce-overhead', CUDA graphs); with max_batch > 1, replay the batch's "
        "decode step from CUDA graphs recorded per batch-size bucket (1, 2, 4, 8, ...; the "
        "start-up warm-up records them), of the Inductor-compiled forward at the warm-up's "
        "cache length and of the eager forward at longer ones (no compile while answers "
        "run). 'auto' = on on CUDA. A single request's static step compiles once per new "
        "cache length; ignored on the CPU.",
    )
    prefill_graph_rows: Annotated[int, Field(ge=0, le=32768)] | Literal["auto"] = Field(
        "auto",
        description="With a static cache on CUDA, replay the language model's prefill of "
        "prompts of up to this many tokens from CUDA graphs recorded per 64-token length "
        "bucket (the first prompt of a bucket records it, about two eager passes): one "
        "launch instead of hundreds. With max_batch > 1, for a newcomer that joins the "
        "batch alone (newcomers joining together are prefilled in one padded pass). "
        "Their shared memory pool and staging buffers are kept out of the request budget. "
        "0 = off; 'auto' = 4096 on CUDA; ignored on the CPU.",
    )

    # --- input limits ---------------------------------------------------------------
    max_image_bytes: int = Field(
        20 * MiB, ge=1024, le=512 * MiB, description="Largest accepted image file, in bytes."
    )
    max_images: int = Field(8, ge=1, le=64, description="Most images in one question.")
    max_image_pixels: int = Field(
        50_000_000,
        ge=1024,
        le=400_000_000,
        description="Most decoded pixels per image (checked before decoding).",
    )
    min_pixels: int = Field(
        3136, ge=784, le=12_845_056, description="Processor lower bound on pixels per image."
    )
    max_pixels: int = Field(
        1_003_520,
        ge=3136,
        le=12_845_056,
        description="Processor upper bound on pixels per image (sets its token budget).",
    )
    max_question_chars: int = Field(
        4000, ge=16, le=100_000, description="Longest accepted question, in characters."
    )

    # --- generation -----------------------------------------------------------------
    max_new_tokens: int = Field(
        512, ge=1, le=8192, description="Default cap on generated tokens per answer."
    )
    max_new_tokens_limit: int = Field(
        2048, ge=1, le=32768, description="Highest max_new_tokens a request may ask for."
    )
    temperature: float = Field(
        0.0, ge=0.0, le=2.0, description="Default sampling temperature (0 = greedy)."
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Default nucleus sampling top-p.")
    embed_cache_bytes: int = Field(
        256 * MiB, ge=0, description="In-process image-embedding cache size, in bytes."
    )
    embed_cache_ttl_s: int = Field(
        3600, ge=0, le=7 * 86400, description="Lifetime of embeddings in the Redis cache tier."
    )
    conversation_ttl_s: int = Field(
        86400,
        ge=60,
        le=30 * 86400,
        description="How long a conversation (its turns and images) is kept after its last "
        "question.",
    )
    conversations_per_user: int = Field(
        50,
        ge=1,
        le=1000,
        description="Conversations kept per user (or API token); beyond it the least recently "
        "used one is deleted.",
    )

    # --- admission ------------------------------------------------------------------
    vram_budget: float = Field(
        0.9,
        gt=0,
        description="Memory for requests: a fraction of device memory (<= 1) or bytes (> 1), "
        "resident weights subtracted.",
    )
    cpu_budget_bytes: int = Field(
        4096 * MiB, ge=64 * MiB, description="Request memory budget when running on the CPU."
    )
    queue_max: int = Field(64, ge=0, le=10_000, description="Most requests waiting in line.")
    queue_timeout_s: float = Field(
        120.0, gt=0, le=3600, description="Longest wait in line before a busy error."
    )
    downscale_to_fit: bool = Field(
        False, description="Downscale images of a request that could never fit the budget."
    )

    # --- OpenAI-compatible API and remote engines -------------------------------------
    openai_image_hosts: str = Field(
        "",
        description="Comma-separated host names whose http(s) image URLs /v1/chat/completions "
        "may fetch (empty: such URLs are refused; data: and oss:// URLs always work).",
    )
    engine: Literal["local", "openai"] = Field(
        "local",
        description="Who answers: 'local' (the model on this host) or 'openai' (a remote "
        "OpenAI-compatible server such as vLLM, SGLang, LMDeploy or Model Studio).",
    )
    remote_base_url: str = Field(
        "",
        description="With engine=openai: the remote's API base URL, ending in /v1 (e.g. "
        "http://vllm:8000/v1).",
    )
    remote_model: str = Field(
        "", description="With engine=openai: the model name the remote serves."
    )
    remote_api_key: SecretStr | None = Field(
        None, description="With engine=openai: the Bearer key for the remote (never logged)."
    )
    remote_max_concurrency: int = Field(
        8,
        ge=1,
        le=10_000,
        description="With engine=openai: most questions sent to the remote at once; more wait "
        "in line (admission by count instead of memory).",
    )
    remote_timeout_s: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="With engine=openai: longest wait for the remote's first byte and between "
        "two streamed chunks.",
    )

    # --- state ----------------------------------------------------------------------
    redis_url: str | None = Field(
        None, description="Redis URL for sessions, throttles and caches (unset: in-process)."
    )

    # --- readiness (issue 26) -------------------------------------------------------
    readiness_timeout_s: float = Field(
        1.0,
        gt=0,
        le=10,
        description="Longest /readyz waits for a dependency (Redis) before calling it down.",
    )

    # --- auth -----------------------------------------------------------------------
    tenants_file: Path | None = Field(
        None, description="Tenants file, TOML (default: HOME/tenants.toml)."
    )
    key_file: Path | None = Field(
        None, description="Server key file for encrypting secrets (default: HOME/keys/server.key)."
    )
    secret_key: SecretStr | None = Field(
        None, description="Server key(s), comma-separated Fernet keys; overrides key_file."
    )
    session_idle_s: int = Field(
        1800, ge=60, le=86400, description="Session idle timeout, in seconds."
    )
    session_lifetime_s: int = Field(
        8 * 3600, ge=300, le=7 * 86400, description="Session absolute lifetime, in seconds."
    )
    login_max_failures: int = Field(
        5, ge=1, le=1000, description="Failed logins before back-off starts."
    )
    login_backoff_s: float = Field(
        2.0, gt=0, le=3600, description="First back-off after too many failed logins; doubles."
    )
    oss_timeout_s: float = Field(
        5.0, gt=0, le=60, description="Timeout of each OSS request made by the server."
    )
    login_max_failures_per_ip: int = Field(
        30, ge=1, le=100_000, description="Failed logins from one address before back-off."
    )
    login_backoff_max_s: float = Field(
        900.0, gt=0, le=86400, description="Longest login back-off, in seconds."
    )
    login_window_s: int = Field(
        3600, ge=60, le=7 * 86400, description="How long failed logins are remembered."
    )
    oss_verify_cache_s: int = Field(
        300, ge=0, le=300, description="How long a successful OSS key check is reused (0: never)."
    )
    sts_recheck_s: int = Field(
        60, ge=5, le=3600, description="How often an STS session re-checks its token with OSS."
    )
    allow_insecure_oss_endpoints: bool = Field(
        False, description="Accept http:// OSS endpoints on loopback addresses (tests only)."
    )

    @field_validator("ui_path")
    @classmethod
    def _ui_path_starts_with_slash(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value.rstrip("/") or "/"

    @field_validator("models")
    @classmethod
    def _models_are_refs(cls, value: str) -> str:
        items = [item.strip() for item in value.split(",") if item.strip()]
        for item in items:
            if not MODEL_REF.match(item):
                raise ValueError(f"{item!r} is not OWNER/NAME@REV")
        return ",".join(dict.fromkeys(items))

    @model_validator(mode="after")
    def _derive_paths(self) -> Settings:
        home = self.home.expanduser()
        derived: dict[str, object] = {
            "home": home,
            "model_dir": self.model_dir or home / "models",
            "log_dir": self.log_dir or home / "logs",
            "tenants_file": self.tenants_file or home / "tenants.toml",
            "key_file": self.key_file or home / "keys" / "server.key",
        }
        if self.models:  # the list's first model is the default
            model_id, _, revision = self.models.split(",")[0].partition("@")
            derived.update(model_id=model_id, model_revision=revision)
        for name, value in derived.items():
            object.__setattr__(self, name, value)
        if self.max_pixels < self.min_pixels:
            raise ValueError("max_pixels must be >= min_pixels")
        if self.engine == "openai" and not (self.remote_base_url and self.remote_model):
            raise ValueError("engine=openai needs remote_base_url and remote_model")
        if self.max_new_tokens > self.max_new_tokens_limit:
            raise ValueError("max_new_tokens must be <= max_new_tokens_limit")
        return self

    # Typed accessors for the derived paths (always set after validation).
    @property
    def model_path(self) -> Path:
        assert self.model_dir is not None
        return self.model_dir

    @property
    def tenants_path(self) -> Path:
        assert self.tenants_file is not None
        return self.tenants_file

    @property
    def key_path(self) -> Path:
        assert self.key_file is not None
        return self.key_file

    @property
    def log_path(self) -> Path:
        assert self.log_dir is not None
        return self.log_dir

    def vram_bytes(self, device_total: int) -> int:
        """``vram_budget`` in bytes on a device of ``device_total`` bytes."""
        if self.vram_budget > 1:
            return int(self.vram_budget)
        return int(self.vram_budget * device_total)

    @property
    def model_refs(self) -> tuple[str, ...]:
        """The offered models, ``OWNER/NAME@REV``, the default first."""
        if self.models:
            return tuple(self.models.split(","))
        return (f"{self.model_id}@{self.model_revision}",)

    @property
    def is_demo_model(self) -> bool:
        return self.model_id == DEMO_MODEL_ID

    @property
    def cors_origin_list(self) -> tuple[str, ...]:
        """``cors_origins`` split at commas, without trailing slashes."""
        return tuple(o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip())

    @property
    def max_request_bytes(self) -> int:
        """The largest request body accepted: every image at its limit, the question (4
        bytes a character at most) and the multipart framing (64 KiB + 4 KiB a part)."""
        framing = 64 * 1024 + 4 * 1024 * (self.max_images + 8)
        return self.max_images * self.max_image_bytes + 4 * self.max_question_chars + framing


def field_rows() -> list[dict[str, Any]]:
    """One row per setting: name, env var, type, default, bounds, description."""
    rows = []
    for name, info in Settings.model_fields.items():
        rows.append(
            {
                "name": name,
                "env": ENV_PREFIX + name.upper(),
                "flag": "--" + name.replace("_", "-"),
                "type": _type_name(info.annotation),
                "default": _default_text(name, info),
                "bounds": _bounds_text(_constraints(info)),
                "description": info.description or "",
            }
        )
    return rows


def _type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if args:
        optional = " (optional)" if type(None) in args else ""
        return " | ".join(_type_name(a) for a in args if a is not type(None)) + optional
    return str(getattr(annotation, "__name__", annotation))


def _default_text(name: str, info: Any) -> str:
    if info.default_factory is not None:
        return {"home": "~/.local/share/qwen-ui", "themes_dir": "<package>/themes"}.get(
            name, "(computed)"
        )
    return "" if info.default is None else str(info.default)


def _constraints(info: Any) -> list[Any]:
    """The field's bounds, also those of an ``Annotated`` member of a union."""
    found = list(info.metadata)
    for arg in get_args(info.annotation):
        if get_origin(arg) is Annotated:
            for item in get_args(arg)[1:]:
                found.extend(getattr(item, "metadata", [item]))
    return found


def _bounds_text(metadata: list[Any]) -> str:
    parts = []
    for item in metadata:
        for attr, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(f"{symbol} {value}")
    return ", ".join(parts)


def markdown_table() -> str:
    """The README configuration table, generated from the declarations."""
    lines = [
        "| env var | type | default | bounds | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in field_rows():
        cells = [f"`{row['env']}`", row["type"], f"`{row['default']}`" if row["default"] else ""]
        cells += [row["bounds"], row["description"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
