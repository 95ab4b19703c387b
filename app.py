from qwen_ui.server import create_app

app = create_app()
