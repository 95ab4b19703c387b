"""Several models served at once, switched without a restart.

The layer sits around the engine: :class:`~qwen_ui.models.registry.ModelRegistry` keeps
one entry per offered model (``OWNER/NAME@REV``); each entry creates its engine on its
first question, counts the engine's weights in one ledger shared by every model
(:mod:`qwen_ui.models.memory`), and unloads the least recently used idle model when a load
would not fit. ``activate`` and ``SIGHUP`` change the offered list while requests run:
a request finishes on the engine it started on.
"""
