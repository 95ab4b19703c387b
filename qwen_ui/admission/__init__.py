"""Admission control by a memory budget (after the checks, before any work), on plain
data: the engine hands over the model's facts and each request's shape
(:mod:`qwen_ui.engine.shapes`, the one engine module imported here) and gets back the
bytes to reserve.

* :mod:`~qwen_ui.admission.tokens`: image token counts from the processor's resize arithmetic;
* :mod:`~qwen_ui.admission.sizing`: a request's memory shape, and the downscale search;
* :mod:`~qwen_ui.admission.estimate`: a request's peak memory, per phase;
* :mod:`~qwen_ui.admission.controller`: the budget, the FIFO with per-tenant limits, the
  reservation context manager that always releases;
* :mod:`~qwen_ui.admission.share`: a continuous batch's one shared reservation (its slot
  cache once, and each request's part);
* :mod:`~qwen_ui.admission.budget`: the budget from the settings and the engine's placement;
* :mod:`~qwen_ui.admission.seam`: the engine's admission seam (fit, downscale, reserve);
* :mod:`~qwen_ui.admission.metrics` and :mod:`~qwen_ui.admission.errors`.
"""
