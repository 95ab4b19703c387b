"""Tenants, credential verifiers (OSS, local), sessions, login throttling, API tokens,
the audit log and per-tenant OSS object access. See :mod:`qwen_ui.auth.service`."""

from qwen_ui.auth.principal import OSSCredentials, PasswordCredentials, Principal

__all__ = ["OSSCredentials", "PasswordCredentials", "Principal"]
