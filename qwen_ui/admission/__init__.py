"""Admission control by a memory budget (DESIGN.md step 4).

* :mod:`~qwen_ui.admission.tokens`: image token counts from the processor's resize arithmetic;
* :mod:`~qwen_ui.admission.shape`: the sizes the estimate needs, read from the model's config;
* :mod:`~qwen_ui.admission.facts`: what the served model's snapshot says (config, processor);
* :mod:`~qwen_ui.admission.sizing`: a request's shape, and the downscale search;
* :mod:`~qwen_ui.admission.estimate`: a request's peak memory, per phase;
* :mod:`~qwen_ui.admission.controller`: the budget, the FIFO with per-tenant limits, the
  reservation context manager that always releases;
* :mod:`~qwen_ui.admission.budget`: the budget from the settings and the device;
* :mod:`~qwen_ui.admission.seam`: the engine's admission seam (estimate, downscale, reserve);
* :mod:`~qwen_ui.admission.metrics` and :mod:`~qwen_ui.admission.errors`.
"""
