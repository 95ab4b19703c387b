"""Login and logout page text, English and Chinese (kept apart from the UI's TEXT)."""

from __future__ import annotations

from qwen_ui.web.i18n import Lang

LOGIN_TEXT: dict[str, dict[Lang, str]] = {
    "page_title": {"en": "Log in · qwen-ui", "zh": "登录 · qwen-ui"},
    "heading": {"en": "Log in", "zh": "登录"},
    "intro": {
        "en": "Visual question answering for your organisation.",
        "zh": "面向您所在组织的视觉问答。",
    },
    "tenant": {"en": "Tenant (organisation)", "zh": "租户（组织）"},
    "method": {"en": "Sign in with", "zh": "登录方式"},
    "method_oss": {"en": "Alibaba Cloud AccessKey", "zh": "阿里云 AccessKey"},
    "method_local": {"en": "User name and password", "zh": "用户名和密码"},
    "key_id": {"en": "AccessKey ID", "zh": "AccessKey ID"},
    "key_secret": {"en": "AccessKey Secret", "zh": "AccessKey Secret"},
    "sts_token": {"en": "STS security token (optional)", "zh": "STS 安全令牌（可选）"},
    "sts_expiration": {
        "en": "STS expiration (optional, e.g. 2026-11-30T10:00:00Z)",
        "zh": "STS 过期时间（可选，例如 2026-11-30T10:00:00Z）",
    },
    "user": {"en": "User name", "zh": "用户名"},
    "password": {"en": "Password", "zh": "密码"},
    "submit": {"en": "Log in", "zh": "登录"},
    "oss_hint": {
        "en": "Your key is checked against your organisation's OSS folder and kept only "
        "for this session, encrypted.",
        "zh": "您的密钥仅用于验证对本组织 OSS 目录的访问权限，并在本次会话中加密保存。",
    },
    "logout_title": {"en": "Log out · qwen-ui", "zh": "退出登录 · qwen-ui"},
    "logout_heading": {"en": "Log out", "zh": "退出登录"},
    "logout_intro": {"en": "You are logged in as {who}.", "zh": "您当前登录身份：{who}。"},
    "logout_submit": {"en": "Log out", "zh": "退出登录"},
    "logout_cancel": {"en": "Cancel", "zh": "取消"},
    "logged_out": {"en": "You have logged out.", "zh": "您已退出登录。"},
    "switch_language": {"en": "中文", "zh": "English"},
}


def lt(key: str, lang: Lang) -> str:
    return LOGIN_TEXT[key][lang]
