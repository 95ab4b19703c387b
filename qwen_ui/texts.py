"""Every piece of user-facing text in English and Chinese, in one table.

The page, the login and logout pages, the OSS panel and the engine's stage labels all look
their words up here with :func:`t`; the language itself is :mod:`qwen_ui.lang`'s. Typed
errors keep their two messages on their classes (:mod:`qwen_ui.errors`), and the demo
model's own words (its grammar, scope and refusal) stay with the demo model.

Keys are grouped by the part of the product that shows them; add new keys at the end of
their group. Both languages must use the same ``{placeholders}``
(``tests/test_texts.py`` checks).
"""

from __future__ import annotations

from qwen_ui.lang import Lang

__all__ = ["TEXT", "t"]

TEXT: dict[str, dict[Lang, str]] = {
    # --- the chat page --------------------------------------------------------------
    "title": {"en": "qwen-ui · visual question answering", "zh": "qwen-ui · 视觉问答"},
    "tagline": {
        "en": "Ask questions about your images.",
        "zh": "就您的图片提问。",
    },
    "language": {"en": "Language", "zh": "语言"},
    "question": {"en": "Question", "zh": "问题"},
    "question_placeholder": {
        "en": "Attach images and ask a question about them…",
        "zh": "添加图片并就其提问……",
    },
    "chat": {"en": "Conversation", "zh": "对话"},
    "status": {"en": "Status", "zh": "状态"},
    "model": {"en": "Model", "zh": "模型"},
    "revision": {"en": "Revision", "zh": "版本"},
    "engine": {"en": "Engine", "zh": "引擎"},
    "installed": {"en": "installed", "zh": "已安装"},
    "not_installed": {"en": "not installed", "zh": "未安装"},
    "engine_idle": {"en": "idle (loads on first question)", "zh": "空闲（首次提问时加载）"},
    "engine_loading": {"en": "loading…", "zh": "加载中……"},
    "engine_warming": {"en": "warming up…", "zh": "预热中……"},
    "engine_ready": {"en": "ready", "zh": "就绪"},
    "engine_failed": {"en": "failed", "zh": "失败"},
    "no_engine": {
        "en": "Answering is not available on this server yet: the engine is not part of "
        "this build. The page shows what is configured.",
        "zh": "此服务器暂不能回答问题：当前版本尚未包含推理引擎。页面仅显示当前配置。",
    },
    "send": {"en": "Ask", "zh": "提问"},
    "stop": {"en": "Stop", "zh": "停止"},
    "counter_images": {"en": "images", "zh": "图片"},
    "counter_chars": {"en": "characters", "zh": "字符"},
    "new_chat": {"en": "New conversation", "zh": "新对话"},
    "logout": {"en": "Log out", "zh": "退出登录"},
    "logged_in_as": {"en": "Logged in as", "zh": "当前用户"},
    "working": {"en": "Working…", "zh": "处理中……"},
    # "token" in Chinese for a classroom: 字词 (words and characters), not the jargon 词元
    "done_in": {
        "en": "Done in {seconds} s · {tokens} tokens",
        "zh": "完成，用时 {seconds} 秒 · 共 {tokens} 个字词",
    },
    "done_in_one": {
        "en": "Done in {seconds} s · 1 token",
        "zh": "完成，用时 {seconds} 秒 · 共 1 个字词",
    },
    "failed": {"en": "Failed", "zh": "失败"},
    "stopped": {"en": "Stopped", "zh": "已停止"},
    "progress": {"en": "Progress", "zh": "进度"},
    "examples": {"en": "Examples", "zh": "示例"},
    "untitled": {"en": "(no question yet)", "zh": "（还没有问题）"},
    "n_images": {"en": "{n} images", "zh": "{n} 张图片"},
    "history": {"en": "Conversations", "zh": "对话记录"},
    "rename": {"en": "Rename", "zh": "重命名"},
    "delete": {"en": "Delete", "zh": "删除"},
    "title_label": {"en": "Title of this conversation", "zh": "本对话的标题"},
    "image_alt": {"en": "image {number}, {name}", "zh": "图片 {number}，{name}"},
    "no_image_used": {
        "en": "No image was used for this answer.",
        "zh": "这个回答没有参考任何图片。",
    },
    "still_answering": {
        "en": "An answer is still being written. Your question stays in the box: send it "
        "when the answer is done, or press Stop first.",
        "zh": "上一个回答还没有写完。您的问题留在输入框里：等回答完成后再发送，或先按“停止”。",
    },
    "edit_last_only": {
        "en": "Only the last question can be edited and sent again.",
        "zh": "只能修改并重新发送最后一个问题。",
    },
    "nothing_to_redo": {
        "en": "There is no question to answer again right now.",
        "zh": "现在没有可以重新回答的问题。",
    },
    "image_alt_of": {
        "en": "image {number} of {total}, {name}",
        "zh": "第 {number} 张图片（共 {total} 张），{name}",
    },
    "scope": {"en": "This model", "zh": "这个模型"},  # "This model: understands …"
    # names of Gradio's icon buttons, in the page's language (qwen_ui/web/static/a11y.js)
    "label_sidebar": {"en": "Show or hide the conversations", "zh": "显示或隐藏对话记录"},
    "label_attach": {"en": "Attach images", "zh": "添加图片"},
    "label_send": {"en": "Send the question", "zh": "发送问题"},
    "label_clear": {"en": "Delete this conversation", "zh": "删除本对话"},
    "label_copy": {"en": "Copy the answer", "zh": "复制回答"},
    "label_copied": {"en": "Copied", "zh": "已复制"},
    "label_fullscreen": {"en": "Full screen", "zh": "全屏"},
    "label_exit_fullscreen": {"en": "Leave full screen", "zh": "退出全屏"},
    "label_download": {"en": "Download", "zh": "下载"},
    "label_share": {"en": "Share", "zh": "分享"},
    "label_close": {"en": "Close", "zh": "关闭"},
    "label_remove": {"en": "Remove", "zh": "移除"},
    "label_retry": {"en": "Answer again", "zh": "重新回答"},
    "label_edit": {"en": "Edit the question", "zh": "修改问题"},
    # --- the login and logout pages -------------------------------------------------
    "login_page_title": {"en": "Log in · qwen-ui", "zh": "登录 · qwen-ui"},
    "login_heading": {"en": "Log in", "zh": "登录"},
    "login_intro": {
        "en": "Visual question answering for your organisation.",
        "zh": "面向您所在组织的视觉问答。",
    },
    "login_tenant": {"en": "Tenant (organisation)", "zh": "租户（组织）"},
    "login_method": {"en": "Sign in with", "zh": "登录方式"},
    "login_method_oss": {"en": "Alibaba Cloud AccessKey", "zh": "阿里云 AccessKey"},
    "login_method_local": {"en": "User name and password", "zh": "用户名和密码"},
    "login_key_id": {"en": "AccessKey ID", "zh": "AccessKey ID"},
    "login_key_secret": {"en": "AccessKey Secret", "zh": "AccessKey Secret"},
    "login_sts_token": {"en": "STS security token (optional)", "zh": "STS 安全令牌（可选）"},
    "login_sts_expiration": {
        "en": "STS expiration (optional, e.g. 2026-11-30T10:00:00Z)",
        "zh": "STS 过期时间（可选，例如 2026-11-30T10:00:00Z）",
    },
    "login_user": {"en": "User name", "zh": "用户名"},
    "login_password": {"en": "Password", "zh": "密码"},
    "login_submit": {"en": "Log in", "zh": "登录"},
    "login_oss_hint": {
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
    # --- the OSS images panel -------------------------------------------------------
    "oss_panel": {"en": "Images in your OSS folder", "zh": "您的 OSS 目录中的图片"},
    "oss_folder": {"en": "Folder (inside your prefix)", "zh": "目录（位于您的前缀内）"},
    "oss_open": {"en": "Open folder", "zh": "打开目录"},
    "oss_more": {"en": "Next page", "zh": "下一页"},
    "oss_objects": {"en": "Objects", "zh": "对象"},
    "oss_attach": {"en": "Attach to question", "zh": "添加到问题"},
    "oss_empty": {"en": "No objects here.", "zh": "此处没有对象。"},
    "oss_folders": {"en": "Sub-folders", "zh": "子目录"},
    # --- the engine's stage labels (qwen_ui.engine.events.Stage.label) ----------------
    "stage_queued": {
        "en": "Waiting in line: position {position}",
        "zh": "排队中：第 {position} 位",
    },
    "stage_downscaled": {
        "en": "Images reduced to at most {max_pixels} pixels each to fit the server's memory",
        "zh": "为适应服务器显存，图片已缩小至每张最多 {max_pixels} 像素",
    },
    "stage_loading_model": {"en": "Loading the model", "zh": "正在加载模型"},
    "stage_decoding": {
        "en": "Decoding image {index}/{total}",
        "zh": "正在解码图片 {index}/{total}",
    },
    "stage_encoding": {
        "en": "Encoding image {index}/{total}",
        "zh": "正在编码图片 {index}/{total}",
    },
    "stage_sending": {"en": "Sending to the model server", "zh": "正在发送到模型服务器"},
    "stage_waiting": {"en": "Waiting for the model server", "zh": "正在等待模型服务器"},
    "stage_answering": {"en": "Answering", "zh": "正在回答"},
    "stage_cached": {"en": " (cached)", "zh": "（缓存）"},
    "stage_wait": {"en": ", about {wait_s:.0f} s", "zh": "，约 {wait_s:.0f} 秒"},
}


def t(key: str, lang: Lang, **params: object) -> str:
    """The text for ``key`` in ``lang``, formatted with ``params`` when any are given."""
    text = TEXT[key][lang]
    return text.format(**params) if params else text
