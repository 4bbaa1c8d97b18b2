"""The fit planner: will this model serve this context on this GPU?

``shape`` (what a model is), ``hf`` / ``gguf_reader`` / ``params`` (reading it), ``kv`` and
``memory`` (the arithmetic and the verdict), ``render`` (table, bar, SVG, JSON), ``configured``
(a configured command line), ``accuracy`` (plan versus the receipt: what the backend
allocated), ``command`` (``modelswap plan``; ``names``: the engines and quantization schemes
it offers). Sits above ``backends`` (it reads command lines through ``backends.configured``)
and below ``runtime``/``http``/``cli``.
"""
