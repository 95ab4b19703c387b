"""UI text in English and Chinese (the language itself is :mod:`qwen_ui.lang`'s)."""

from __future__ import annotations

from qwen_ui.lang import LANGS, Lang, negotiate

__all__ = ["LANGS", "TEXT", "Lang", "negotiate", "t"]

TEXT: dict[str, dict[Lang, str]] = {
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
    # boxes in answers and the export (branch export-boxes)
    "box_on_image": {"en": "{label} (image {number})", "zh": "{label}（图片 {number}）"},
    "box_unlabelled": {"en": "box", "zh": "框"},
    "box_list_sep": {"en": ", ", "zh": "、"},
    "boxes_alt": {
        "en": "image {number} with the answer's boxes drawn on it",
        "zh": "图片 {number}，已画出回答中的框",
    },
    "located_alt": {
        "en": "image {number}, where the answer located: {labels}",
        "zh": "图片 {number}，回答中的位置：{labels}",
    },
    "show_boxes": {"en": "Show boxes on images", "zh": "在图片上显示框"},
    "export": {"en": "Export", "zh": "导出"},
    "export_zip": {"en": "Markdown + images (zip)", "zh": "Markdown + 图片（zip）"},
    "export_json": {"en": "JSON", "zh": "JSON"},
    "export_none": {
        "en": "Ask a question first: there is nothing to export yet.",
        "zh": "请先提问：目前还没有可导出的内容。",
    },
    "export_note": {"en": "Exported from qwen-ui at {when}", "zh": "导出自 qwen-ui，时间 {when}"},
    "export_turn": {"en": "Question {n}", "zh": "问题 {n}"},
    "export_answer": {"en": "Answer", "zh": "回答"},
    "export_boxes": {"en": "Located", "zh": "位置"},
    "export_pending": {
        "en": "Images attached after the last answer",
        "zh": "最后一个回答之后添加的图片",
    },
    "export_missing": {"en": "no longer stored", "zh": "已不再保存"},
}


def t(key: str, lang: Lang) -> str:
    return TEXT[key][lang]
