"""Who is asking: a tenant and a user inside it, and the credentials a login offers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Method = Literal["password", "oss", "token", "session"]


@dataclass(frozen=True)
class Principal:
    """The authenticated caller. ``tenant`` is the isolation key for everything else."""

    tenant: str
    user: str
    method: Method = "password"

    @property
    def label(self) -> str:
        """``tenant/user``: the user id Gradio sees (tenant ids never contain '/')."""
        return f"{self.tenant}/{self.user}"

    @classmethod
    def from_label(cls, label: str, method: Method = "session") -> Principal:
        tenant, _, user = label.partition("/")
        return cls(tenant=tenant, user=user, method=method)


@dataclass(frozen=True)
class PasswordCredentials:
    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class OSSCredentials:
    key_id: str
    secret: str = field(repr=False)
    sts_token: str | None = field(default=None, repr=False)

    @property
    def is_sts(self) -> bool:
        return bool(self.sts_token)


Credentials = PasswordCredentials | OSSCredentials
