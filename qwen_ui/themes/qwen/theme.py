"""The qwen-ui theme: calm blues, system fonts only (nothing fetched at run time)."""

import gradio as gr

SANS = [
    "system-ui",
    "-apple-system",
    "Segoe UI",
    "Noto Sans CJK SC",
    "PingFang SC",
    "Microsoft YaHei",
    "sans-serif",
]
MONO = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"]


def build() -> gr.themes.Base:
    theme = gr.themes.Soft(
        primary_hue="indigo", secondary_hue="sky", neutral_hue="slate", font=SANS, font_mono=MONO
    )
    return theme.set(
        body_background_fill="*neutral_50",
        body_background_fill_dark="*neutral_950",
        block_radius="10px",
        button_primary_background_fill="*primary_600",
        button_primary_background_fill_dark="*primary_500",
    )
