"""The HTTP side: routes, middleware, the Gradio UI; thin clients of the engine."""

import os

# Gradio reads this when first imported: no analytics call ever leaves the machine.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
