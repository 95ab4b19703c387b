"""The qwen-ui theme: calm blues, system fonts only (nothing fetched at run time).

Every text colour meets WCAG AA (at least 4.5:1 against what it sits on) in light and
dark mode; the pairs are checked by axe-core in the browser tests
(``tests/web/test_a11y_browser.py``), so change a colour here only with them green."""

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
        # soft text: slate 600 on slate 50 is 7.2:1 (slate 400, the default, was 2.5:1)
        body_text_color_subdued="*neutral_600",
        body_text_color_subdued_dark="*neutral_400",
        link_text_color="*secondary_700",
        link_text_color_hover="*secondary_800",
        link_text_color_visited="*secondary_700",
        link_text_color_active="*secondary_800",
        link_text_color_dark="*secondary_300",
        link_text_color_hover_dark="*secondary_200",
        link_text_color_visited_dark="*secondary_300",
        link_text_color_active_dark="*secondary_200",
        # labels: indigo 700 on indigo 100 is 6.4:1 (indigo 500 was 3.6:1)
        block_label_text_color="*primary_700",
        block_title_text_color="*primary_700",
        # placeholders: slate 500 on white is 4.8:1 (slate 400 was 2.6:1)
        input_placeholder_color="*neutral_500",
        input_placeholder_color_dark="*neutral_400",
        block_info_text_color="*neutral_600",
        block_info_text_color_dark="*neutral_400",
        # white on indigo 600 is 6.3:1 (on indigo 500 it was 4.5 by a hair short)
        button_primary_background_fill="*primary_600",
        button_primary_background_fill_dark="*primary_600",
        button_primary_background_fill_hover="*primary_700",
        button_primary_background_fill_hover_dark="*primary_700",
        checkbox_label_background_fill_selected="*primary_600",
        checkbox_label_background_fill_selected_dark="*primary_600",
    )
