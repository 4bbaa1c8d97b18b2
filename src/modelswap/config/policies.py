"""llama-swap's Swap Policy Language in a configuration: ``policies``, ``hooks.on_request``,
``models.*.filters.policy`` and ``peers.*.filters.policy``, compiled once per load.

Fail closed: a program that cannot be honoured whole refuses the configuration, one problem
per fault, naming the key and the line:column inside the program (``models.qwen.filters.policy:
line 2:7: unexpected "1", expected 'to'``): a syntax error, a regular expression RE2 refuses,
``apply`` of a policy that does not exist, a write of ``model``, policies that apply one another
in a cycle. Nothing of a policy is ever skipped with a warning.

Macros expand first, as in llama-swap: the top-level ones everywhere, a model's own and
``${MODEL_ID}`` / ``${PORT}`` in its ``filters.policy``; a reference left unknown is a problem
(also inside an SPL ``#`` comment).

Each program is named by its key (``hooks.on_request``, ``policies.strict``) and keeps its text
(macros expanded: what runs), so a ``deny`` that fires says where: program, line, rule (issue 41).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from modelswap.config.macros import Scope, expand
from modelswap.config.paths import Problems, key_path
from modelswap.config.schema import RawConfig
from modelswap.policy import (
    POLICY_NAME_RE,
    PolicyError,
    PolicySet,
    Program,
    check,
    find_cycle,
    parse,
)

Where = tuple[str | int, ...]
_ONLY_IN_A_MODEL = "is only available in a model's filters.policy"
_CMD_STOP = "is only available in cmdStop"


def resolve_policies(
    raw: RawConfig,
    *,
    macros: Mapping[str, Mapping[str, str]],
    top_macros: Mapping[str, str],
    ports: Mapping[str, int],
    environ: Mapping[str, str],
    problems: Problems,
    secrets: set[str],
) -> PolicySet | None:
    """The compiled programs, or None when the configuration has none (no cost at all per
    request). Every fault is appended to ``problems``."""
    shared = Scope(
        builtins={},
        macros=top_macros,
        environ=environ,
        unavailable={"MODEL_ID": _ONLY_IN_A_MODEL, "PORT": _ONLY_IN_A_MODEL, "PID": _CMD_STOP},
        secrets=secrets,
    )
    library = _library(raw.policies, shared, problems)
    known = frozenset(raw.policies)

    def compile_one(source: str, scope: Scope, where: Where) -> Program | None:
        text = _expanded(source, scope, where, problems)
        if text is None or not text.strip():
            return None
        program = _parsed(text, where, problems)
        if program is not None:
            _report(where, check(program, known), problems)
        return program

    on_request = compile_one(raw.hooks.on_request, shared, ("hooks", "on_request"))
    models: dict[str, Program] = {}
    for model_id, model in raw.models.items():
        port = ports.get(model_id)
        scope = Scope(
            builtins={"MODEL_ID": model_id} | ({"PORT": str(port)} if port is not None else {}),
            macros=macros.get(model_id, top_macros),
            environ=environ,
            unavailable={"PID": _CMD_STOP},
            secrets=secrets,
        )
        where: Where = ("models", model_id, "filters", "policy")
        if (program := compile_one(model.filters.policy, scope, where)) is not None:
            models[model_id] = program
        for name, alias_filters in model.alias_filters.items():
            if alias_filters.policy.strip():
                problems.append(
                    (
                        key_path("models", model_id, "aliasFilters", name, "policy"),
                        "a policy belongs to the model (its filters.policy, which may test "
                        "request.model), not to one of its names",
                    )
                )
    peers: dict[str, Program] = {}
    for peer_id, peer in raw.peers.items():
        where = ("peers", peer_id, "filters", "policy")
        if (program := compile_one(peer.filters.policy, shared, where)) is not None:
            peers[peer_id] = program
    if not (raw.policies or on_request or models or peers):
        return None
    return PolicySet(
        library=MappingProxyType(library),
        on_request=on_request,
        models=MappingProxyType(models),
        peers=MappingProxyType(peers),
    )


def _library(sources: Mapping[str, str], scope: Scope, problems: Problems) -> dict[str, Program]:
    """The named policies: each parsed and checked, then the ``apply`` graph for a cycle."""
    library: dict[str, Program] = {}
    for name in sorted(sources):
        where: Where = ("policies", name)
        if not POLICY_NAME_RE.fullmatch(name):
            problems.append(
                (
                    key_path(*where),
                    f"invalid policy name {name!r}: it must match {POLICY_NAME_RE.pattern} "
                    "(what `apply <name>` can spell)",
                )
            )
            continue
        text = _expanded(sources[name], scope, where, problems)
        program = _parsed(text, where, problems) if text is not None else None
        if program is not None:
            library[name] = program
    for name, program in library.items():
        _report(("policies", name), check(program, sources), problems)
    cycle = find_cycle(library)
    if cycle is not None:
        problems.append(("policies", "cycle detected: " + " -> ".join(cycle)))
    return library


def _expanded(source: str, scope: Scope, where: Where, problems: Problems) -> str | None:
    text, found = expand(source, scope)
    problems.extend((key_path(*where), message) for message in found)
    return None if found else text


def _parsed(text: str, where: Where, problems: Problems) -> Program | None:
    """``text`` parsed, named by its key (a denial says where it fired and quotes the rule as
    it ran: its macros expanded)."""
    try:
        return parse(text, name=key_path(*where))
    except PolicyError as exc:
        problems.append((key_path(*where), str(exc)))
        return None


def _report(where: Where, errors: list[PolicyError], problems: Problems) -> None:
    problems.extend((key_path(*where), str(error)) for error in errors)
