"""HTML of the login and logout pages: no scripts, one inline stylesheet (allowed by its
hash in the Content-Security-Policy), every value escaped."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import cache
from html import escape
from importlib import resources
from urllib.parse import urlencode

from qwen_ui.web.i18n import Lang, t


@cache
def stylesheet() -> str:
    return resources.files("qwen_ui.web").joinpath("static/login.css").read_text("utf-8")


def security_headers() -> dict[str, str]:
    digest = base64.b64encode(hashlib.sha256(stylesheet().encode()).digest()).decode()
    csp = (
        f"default-src 'none'; style-src 'sha256-{digest}'; img-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    return {
        "Content-Security-Policy": csp,
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }


@dataclass(frozen=True)
class LoginForm:
    """What the page shows again after a failed attempt (never a secret)."""

    csrf: str
    next: str = "/"
    tenant: str = ""
    method: str = "oss"
    key_id: str = ""
    user: str = ""
    error: str | None = None
    notice: str | None = None


def _page(lang: Lang, title: str, body: str) -> str:
    return (
        f'<!doctype html>\n<html lang="{"zh-CN" if lang == "zh" else "en"}"><head>'
        '<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{stylesheet()}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )


def _field(name: str, label: str, kind: str = "text", value: str = "", auto: str = "off") -> str:
    return (
        f'<label for="{name}">{escape(label)}</label>'
        f'<input type="{kind}" id="{name}" name="{name}" value="{escape(value)}" '
        f'autocomplete="{auto}" spellcheck="false" autocapitalize="off">'
    )


def _language_link(lang: Lang, params: dict[str, str]) -> str:
    other: Lang = "en" if lang == "zh" else "zh"
    query = urlencode({**params, "lang": other})
    return f'<nav class="lang"><a href="?{escape(query)}">{t("switch_language", lang)}</a></nav>'


def _method_choice(lang: Lang, method: str) -> str:
    def radio(value: str, text: str) -> str:
        checked = " checked" if method == value else ""
        return (
            f'<label><input type="radio" id="m-{value}" name="method" value="{value}"{checked}>'
            f"{escape(text)}</label>"
        )

    return (
        f'<fieldset class="method"><legend>{escape(t("login_method", lang))}</legend>'
        f"{radio('oss', t('login_method_oss', lang))}"
        f"{radio('local', t('login_method_local', lang))}"
        "</fieldset>"
    )


def render_login(lang: Lang, form: LoginForm) -> str:
    error = f'<p class="error" role="alert">{escape(form.error)}</p>' if form.error else ""
    notice = f'<p class="notice">{escape(form.notice)}</p>' if form.notice else ""
    oss = (
        '<fieldset class="for-oss">'
        + _field("key_id", t("login_key_id", lang), value=form.key_id, auto="username")
        + _field("key_secret", t("login_key_secret", lang), "password", auto="current-password")
        + f'<label for="sts_token">{escape(t("login_sts_token", lang))}</label>'
        '<textarea id="sts_token" name="sts_token" autocomplete="off" spellcheck="false">'
        "</textarea>"
        + _field("sts_expiration", t("login_sts_expiration", lang))
        + f'<p class="hint">{escape(t("login_oss_hint", lang))}</p></fieldset>'
    )
    local = (
        '<fieldset class="for-local">'
        + _field("user", t("login_user", lang), value=form.user, auto="username")
        + _field("password", t("login_password", lang), "password", auto="current-password")
        + "</fieldset>"
    )
    body = (
        f"<h1>{escape(t('login_heading', lang))}</h1>"
        f'<p class="intro">{escape(t("login_intro", lang))}</p>{error}{notice}'
        '<form method="post" action="login">'
        f'<input type="hidden" name="csrf" value="{escape(form.csrf)}">'
        f'<input type="hidden" name="next" value="{escape(form.next)}">'
        f'<input type="hidden" name="lang" value="{lang}">'
        + _field("tenant", t("login_tenant", lang), value=form.tenant, auto="organization")
        + _method_choice(lang, form.method)
        + oss
        + local
        + f'<button type="submit">{escape(t("login_submit", lang))}</button></form>'
        + _language_link(lang, {"next": form.next})
    )
    return _page(lang, t("login_page_title", lang), body)


def render_logout(lang: Lang, csrf: str, who: str, back: str) -> str:
    """The logout confirmation: Log out (a CSRF-checked POST) or Cancel (back to ``back``)."""
    body = (
        f"<h1>{escape(t('logout_heading', lang))}</h1>"
        f'<p class="intro">{escape(t("logout_intro", lang).format(who=who))}</p>'
        '<form method="post" action="logout">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        f'<button type="submit">{escape(t("logout_submit", lang))}</button>'
        f'<a class="cancel" href="{escape(back)}">{escape(t("logout_cancel", lang))}</a>'
        "</form>" + _language_link(lang, {})
    )
    return _page(lang, t("logout_title", lang), body)
