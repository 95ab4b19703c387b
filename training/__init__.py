"""The demo model's lab: training, probes, tokenizer building, quantization, device scripts.

Not part of the installed ``qwen_ui`` package; run from a checkout as ``python -m
training.<module>`` (see ``training/README.md``). What serving and ``qwen-ui demo eval`` need
(scene grammar, examples, install, evaluation) stays in ``qwen_ui.demo``.
"""
