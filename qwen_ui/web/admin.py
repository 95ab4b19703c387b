"""Admin routes for operators: the offered models, switching the default, reloading.

Every route needs ``Authorization: Bearer <QWEN_UI_ADMIN_TOKEN>`` (compared in constant
time; the token is never logged); without the setting every call is refused. The request
guard checks it from the headers before any of the body is read, instead of a login; the
routes' dependency runs the same check (:mod:`qwen_ui.web.admin_token`).

* ``GET /admin/models``: each model's state, the default first.
* ``POST /admin/models/activate`` ``{"model": "OWNER/NAME@REV"}``: make it the default
  (another revision of the same model is replaced); running requests finish where they
  started (``qwen-ui models activate``).
* ``POST /admin/models/reload``: what ``SIGHUP`` does (the settings file's model list, every
  store ref read again).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from qwen_ui.models.reload import reload_models
from qwen_ui.services import Services, ServicesDep
from qwen_ui.web.admin_token import check_admin_token

router = APIRouter(prefix="/admin")


def require_admin(request: Request, services: ServicesDep) -> Services:
    check_admin_token(request.headers, services.settings.admin_token)
    return services


AdminDep = Annotated[Services, Depends(require_admin)]


class Activate(BaseModel):
    model: str = Field(min_length=1, max_length=300)


@router.get("/models")
async def models(services: AdminDep) -> dict[str, Any]:
    return {"default": services.models.default.name, "models": services.models.health()}


@router.post("/models/activate")
async def activate(body: Activate, services: AdminDep) -> dict[str, Any]:
    return await services.models.activate(body.model)


@router.post("/models/reload")
async def reload(services: AdminDep) -> dict[str, Any]:
    return await reload_models(services.settings, services.models)
