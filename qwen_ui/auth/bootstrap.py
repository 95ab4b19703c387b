"""First run: with no tenants file, create a ``demo`` local tenant with one user."""

from __future__ import annotations

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.passwords import generate_password, hash_password
from qwen_ui.auth.tenants import Tenant
from qwen_ui.settings import Settings

DEMO_TENANT = "demo"
DEMO_USER = "demo"


def ensure_demo_tenant(settings: Settings) -> str | None:
    """Create the demo tenant when no tenants file exists; its password (show it once),
    or None when a tenants file was already there."""
    path = settings.tenants_path
    if path.exists():
        return None
    password = generate_password()
    tenant = Tenant(
        id=DEMO_TENANT, name="Demo", kind="local", users={DEMO_USER: hash_password(password)}
    )
    tenants_file.save(path, tenants_file.TenantsFile(tenants={DEMO_TENANT: tenant}))
    return password
