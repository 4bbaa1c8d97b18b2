"""Every tool the endpoint serves, in the order ``tools/list`` gives them."""

from __future__ import annotations

from modelswap.http.mcp import config_tools, docs_tools, model_tools, observe_tools
from modelswap.http.mcp.registry import Registry
from modelswap.runtime import Runtime


def build_registry() -> Registry:
    """The tools. ``models__dry_run`` only where the runtime has the load dry run
    (``Runtime.dry_run``, issue 39's other half)."""
    registry = Registry(docs_tools.TOOLS)
    registry.add(config_tools.GET_SCHEMA)  # docs__get_config_schema, beside the docs
    registry.add(config_tools.GET_CONFIG)
    for tool in model_tools.READ_TOOLS:
        registry.add(tool)
    if callable(getattr(Runtime, "dry_run", None)):
        registry.add(model_tools.DRY_RUN)
    for tool in (*observe_tools.TOOLS, *model_tools.ADMIN_TOOLS):
        registry.add(tool)
    return registry
