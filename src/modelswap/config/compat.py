"""llama-swap compatibility: a llama-swap ``config.yaml`` is read as-is.

:func:`translate` runs on the parsed YAML, before validation. It recognises llama-swap's own
spellings -- ``filters.strip_params``, comma-separated ``stripParams``, ``ttl: -1``, aliases as
``{id, name, unlisted}``, ``hooks.on_startup``, ``filters.setParamsByID``, ``store.path``, the
newer ``routing`` block, a peer's ``apiKey: ${env.NAME}`` -- and rewrites them into modelswap's
vocabulary. Documented llama-swap keys that modelswap does not implement (``matrix`` spelled
otherwise, ``tailcat``, ``ui`` ...) are removed, each with one warning that names it.
Keys that are neither llama-swap's nor modelswap's are left alone, so validation still reports
them as unknown, with a did-you-mean.

Every llama-swap key found is recorded as a :class:`KeyMapping` (``modelswap check --explain``).
Keys both spell alike are recorded once per key, with ``*`` for the model or peer id.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from modelswap.config.compat_keys import (
    CAPTURE_BUFFER,
    METRICS_WINDOW,
    MODEL_IGNORED,
    MODEL_SAME,
    PEER_SAME,
    SESSION_HEADERS,
    SOFT_DEFAULT,
    SPL,
    TIMEOUTS_IGNORED,
    TIMEOUTS_SAME,
    TOP_IGNORED,
    TOP_SAME,
)
from modelswap.config.logtime import layout
from modelswap.config.paths import Problems, key_path
from modelswap.config.resolved import KeyMapping
from modelswap.config.schema import RawConfig, type_name

log = logging.getLogger(__name__)

Data = dict[Any, Any]
Path = tuple[str | int, ...]

SAME, REWRITTEN, IGNORED, DIFFERS = "same", "rewritten", "ignored", "differs"
COMFYUI_MODEL, COMFYUI_MIN = "comfyui_auto", 50  # /comfyui/'s model (llama-swap's load.go)
SELECTOR_KEYS = frozenset(
    {"targets", "strategy", "reservations", "name", "description", "unlisted"}
)
_ENV_REF_RE = re.compile(r"\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class Translation:
    """The rewritten YAML data, how each llama-swap key was read, and what could not be."""

    data: Data
    mappings: tuple[KeyMapping, ...]
    problems: tuple[tuple[str, str], ...]


def translate(data: Data, *, anchor_keys: frozenset[str] = frozenset()) -> Translation:
    """Rewrite llama-swap's spellings in ``data`` (left untouched) into modelswap's.
    ``anchor_keys``: top-level keys that only hold YAML anchors (dropped when unknown)."""
    translator = _Translator()
    out = copy.deepcopy(data)
    translator.drop_anchor_keys(out, anchor_keys)
    translator.run(out)
    return Translation(out, tuple(translator.mappings.values()), tuple(translator.problems))


def log_warnings(mappings: Sequence[KeyMapping]) -> None:
    """One WARNING per llama-swap key whose behaviour modelswap does not reproduce."""
    for mapping in mappings:
        if mapping.warning:
            log.warning("%s", warning_text(mapping))


def warning_text(mapping: KeyMapping) -> str:
    if mapping.kind == IGNORED:
        return f"llama-swap key {mapping.source} is not implemented and is ignored: {mapping.note}"
    return f"llama-swap key {mapping.source} (read as {mapping.target}): {mapping.note}"


def explain(mappings: Sequence[KeyMapping]) -> str:
    """``modelswap check --explain``: each llama-swap key found and how it was read, then the
    warnings (the keys modelswap does not implement, or reads differently)."""
    if not mappings:
        return "llama-swap keys: none found"
    same = [m for m in mappings if m.kind == SAME]
    rewritten = [m for m in mappings if m.kind == REWRITTEN]
    warned = [m for m in mappings if m.warning]
    lines = [f"llama-swap keys: {len(mappings)} found"]
    if same:
        lines += ["", "read as-is (the same key in modelswap):"]
        lines += [f"  {m.source}: {m.note}" for m in same]
    if rewritten:
        lines += ["", "rewritten:"]
        lines += [f"  {m.source} -> {m.target or '(built in)'}: {m.note}" for m in rewritten]
    if warned:
        lines += ["", f"warnings ({len(warned)}):"]
        lines += [f"  {warning_text(m)}" for m in warned]
    ignored = not_acted_on(mappings)
    if ignored:
        lines += ["", f"not acted on ({len(ignored)} keys, each once):"]
        lines += [f"  {key}: {why}" for key, why in ignored.items()]
    return "\n".join(lines)


def not_acted_on(mappings: Sequence[KeyMapping]) -> dict[str, str]:
    """Each llama-swap key modelswap ignores, once (``models.*.x`` for every model's ``x``),
    with why."""
    found: dict[str, str] = {}
    for mapping in mappings:
        if mapping.kind == IGNORED:
            found.setdefault(_generic_text(mapping.source), mapping.note)
    return found


def _generic_text(path: str) -> str:
    """``models.qwen.timeouts.keepalive`` -> ``models.*.timeouts.keepalive``; list indexes go."""
    parts = re.sub(r"\[\d+\]", "", path).split(".")
    if len(parts) > 2 and parts[0] in ("models", "peers", "selectors"):
        parts[1] = "*"
    return ".".join(parts)


def _generic(path: Path) -> Path:
    """``models.qwen.filters`` -> ``models.*.filters``: a key both spell alike, in any model."""
    return (path[0], "*", *path[2:])


class _Translator:
    def __init__(self) -> None:
        self.mappings: dict[str, KeyMapping] = {}
        self.problems: Problems = []
        self.selectors_read: dict[str, Data] = {}

    # -- records ---------------------------------------------------------------------------

    def note(self, source: Path, target: Path | None, note: str, kind: str = "") -> None:
        """Record how ``source`` was read (first record wins); ``kind`` defaults to ``same``
        when both paths are equal, else ``rewritten``."""
        path = key_path(*source)
        goal = None if target is None else key_path(*target)
        kind = kind or (SAME if goal == path else REWRITTEN)
        self.mappings.setdefault(path, KeyMapping(path, goal, note, kind))

    def ignore(self, data: Data, key: str, base: Path, reason: str) -> None:
        del data[key]
        self.note((*base, key), None, reason, IGNORED)

    def problem(self, path: Path, message: str) -> None:
        self.problems.append((key_path(*path), message))

    def mapping(self, value: object, path: Path) -> Data | None:
        if isinstance(value, dict):
            return value
        self.problem(path, f"expected a mapping, got {type_name(value)}")
        return None

    # -- top level -------------------------------------------------------------------------

    def drop_anchor_keys(self, data: Data, keys: frozenset[str]) -> None:
        """``defaults: &defaults {...}``: a key that only holds anchors for ``*defaults``
        elsewhere. A key modelswap or llama-swap knows is read as usual."""
        known = {info.alias or name for name, info in RawConfig.model_fields.items()}
        known |= set(TOP_IGNORED) | set(TOP_SAME) | {"store", "routing"}
        for key in sorted(keys - known):
            del data[key]
            self.note((key,), None, "only holds YAML anchors (&name) used elsewhere", REWRITTEN)

    def run(self, data: Data) -> None:
        if "models" in data and data["models"] is None:
            del data["models"]  # llama-swap's `models:` left empty (merged -config-dir files)
            self.note(("models",), ("models",), "null: no models of its own")
        for key, reason in TOP_IGNORED.items():
            if key in data and key not in ("selectors", "matrix", "ui"):
                self.ignore(data, key, (), reason)
        if "ui" in data:
            self.ui(data)
        if "matrix" in data:
            self.matrix(data, data["matrix"], ("matrix",))
        if isinstance(data.get("selectors"), dict):
            self.selectors(data["selectors"])
        self.activity_keys(data)
        if data.get("unloadTimeout") == 0:
            del data["unloadTimeout"]
            note = "0: the default grace (modelswap's 5 s; llama-swap's is 10 s)"
            self.note(("unloadTimeout",), ("unloadTimeout",), note)
        if isinstance(data.get("performance"), dict):
            self.performance(data["performance"])
        if isinstance(data.get("logToStdout"), str):
            self.log_to_stdout(data)
        time_format = data.get("logTimeFormat")
        if isinstance(time_format, str) and time_format.strip() and layout(time_format) is None:
            self.note(
                ("logTimeFormat",),
                ("logTimeFormat",),
                "not one of llama-swap's names: modelswap's own timestamp (llama-swap writes none)",
                DIFFERS,
            )
        for key, note in TOP_SAME.items():
            if key in data:
                self.note((key,), (key,), note)
        if "store" in data:
            self.store(data)
        if isinstance(data.get("upstream"), dict):
            upstream = data["upstream"]
            for key in [k for k in upstream if k != "ignorePaths"]:
                self.ignore(upstream, key, ("upstream",), "only upstream.ignorePaths is read")
        if "routing" in data:
            self.routing(data)
        models = data.get("models")
        if isinstance(models, dict):
            for model_id, model in models.items():
                if isinstance(model_id, str) and isinstance(model, dict):
                    self.model(model_id, model)
        if isinstance(data.get("hooks"), dict):
            self.hooks(data["hooks"], models if isinstance(models, dict) else {})
        peers = data.get("peers")
        if isinstance(peers, dict):
            for peer_id, peer in list(peers.items()):
                if not isinstance(peer_id, str) or not isinstance(peer, dict):
                    continue
                if str(peer.get("proxy", "")).startswith("tailcat://"):
                    self.ignore(peers, peer_id, ("peers",), TOP_IGNORED["tailcat"])
                else:
                    self.peer(peer_id, peer)

    def selectors(self, selectors: Data) -> None:
        """Selectors modelswap reads are kept; one spelled otherwise warns and is dropped."""
        for selector_id, entry in list(selectors.items()):
            if isinstance(entry, dict):
                self.selector_settings(str(selector_id), entry)
            keys = set(entry) if isinstance(entry, dict) else {"?"}
            strategy = entry.get("strategy", "warm") if isinstance(entry, dict) else None
            if keys <= SELECTOR_KEYS and strategy in ("warm", "pin", "spillover"):
                self.selectors_read[str(selector_id)] = entry
                note = "a virtual model id, resolved per request to one of its targets"
                self.note(("selectors", "*"), ("selectors", "*"), note)
            else:
                self.ignore(selectors, selector_id, ("selectors",), TOP_IGNORED["selectors"])

    def ui(self, data: Data) -> None:
        """``ui.activity.session_id`` (the headers naming a request's session) is
        ``activity.sessionHeaders``; anything else under ``ui`` warns."""
        ui = data.pop("ui")
        if not isinstance(ui, dict):
            self.note(("ui",), None, TOP_IGNORED["ui"], IGNORED)
            return
        activity = ui.get("activity")
        rest: list[Path] = [(key,) for key in ui if key != "activity"]
        if not isinstance(activity, dict):
            rest += [("activity",)] if "activity" in ui else []
            activity = {}
        session = activity.pop("session_id", None)
        if isinstance(session, list) and all(isinstance(name, str) for name in session):
            settings = data.setdefault("activity", {})
            if isinstance(settings, dict) and "sessionHeaders" not in settings:
                settings["sessionHeaders"] = session
                source, target = ("ui", "activity", "session_id"), ("activity", "sessionHeaders")
                self.note(source, target, SESSION_HEADERS)
            elif isinstance(settings, dict):
                self.problem(("ui", "activity", "session_id"), "activity.sessionHeaders is set too")
        elif session is not None:
            self.problem(("ui", "activity", "session_id"), "expected a list of header names")
        rest += [("activity", key) for key in activity]
        for path in rest:
            self.note(("ui", *path), None, TOP_IGNORED["ui"], IGNORED)

    def log_to_stdout(self, data: Data) -> None:
        """llama-swap's newest ``logToStdout``: a comma-separated list of proxy, upstream and
        http. proxy and upstream together are ``both``; http (an access-log line per request)
        is not written by modelswap (its activity log holds every request) and warns."""
        value = data["logToStdout"]
        items = [item.strip() for item in value.split(",")]
        if len(items) == 1 and items[0] in ("proxy", "upstream", "both", "none"):
            data["logToStdout"] = items[0]
            return
        if not set(items) <= {"proxy", "upstream", "http"}:
            return  # validation names it
        streams = {"proxy", "upstream"} & set(items)
        data["logToStdout"] = "both" if len(streams) == 2 else streams.pop() if streams else "none"
        note = f"the list {value!r}: {data['logToStdout']}"
        self.note(("logToStdout",), ("logToStdout",), note, REWRITTEN)
        if "http" in items:
            reason = "no access-log line per request (GET /api/activity lists every request)"
            self.note(("logToStdout", "http"), None, reason, IGNORED)

    def selector_settings(self, selector_id: str, entry: Data) -> None:
        """llama-swap's newest selector spellings: ``settings.spillover`` is ``reservations``;
        ``metadata`` is not listed by modelswap (dropped with a warning, the selector kept)."""
        base: Path = ("selectors", selector_id)
        settings = entry.get("settings")
        if isinstance(settings, dict) and set(settings) <= {"spillover"}:
            del entry["settings"]
            if "spillover" in settings:
                if "reservations" in entry:
                    self.problem((*base, "settings", "spillover"), "reservations is set too")
                else:
                    entry["reservations"] = settings["spillover"]
                    target = (*base, "reservations")
                    note = "requests per target before the next (llama-swap's newest name)"
                    self.note((*base, "settings", "spillover"), target, note)
        if "metadata" in entry:
            self.ignore(entry, "metadata", base, "a selector's metadata is not listed")

    def matrix(self, data: Data, value: object, source: Path) -> None:
        """A matrix modelswap reads is kept; one spelled otherwise warns and is dropped."""
        if isinstance(value, dict) and set(value) <= {"vars", "sets", "evict_costs"}:
            self.note(source, ("matrix",), TOP_SAME["matrix"])
        else:
            del data["matrix"]
            self.note(source, None, TOP_IGNORED["matrix"], IGNORED)

    def store(self, data: Data) -> None:
        store = self.mapping(data.pop("store"), ("store",))
        if store is None:
            return
        for key in list(store):
            if key != "path":
                self.ignore(store, key, ("store",), "only store.path has a meaning here")
        if "path" not in store:
            return
        activity = data.setdefault("activity", {})
        if isinstance(activity, dict) and "path" in activity:
            self.problem(("store", "path"), "activity.path is set too: keep one of the two")
        elif isinstance(activity, dict):
            activity["path"] = store["path"]
            self.note(("store", "path"), ("activity", "path"), "the SQLite activity log")

    def routing(self, data: Data) -> None:
        routing = self.mapping(data.pop("routing"), ("routing",))
        if routing is None:
            return
        for key, value in routing.items():
            if key not in ("router", "scheduler"):
                self.problem(("routing", key), "unknown key (known: router, scheduler)")
            elif (section := self.mapping(value, ("routing", key))) is None:
                continue
            elif key == "router":
                self.router(data, section)
            else:
                self.scheduler(data, section)

    def router(self, data: Data, router: Data) -> None:
        base: Path = ("routing", "router")
        use = router.get("use", "group")
        if use == "matrix":
            self.note((*base, "use"), ("matrix",), "the least-cost matrix replaces groups")
        elif use == "group":
            self.note((*base, "use"), ("groups",), "groups are modelswap's swap rules")
        else:
            self.problem((*base, "use"), f"expected group or matrix, got {use!r}")
        settings = self.mapping(router.get("settings", {}), (*base, "settings"))
        for key, value in (settings or {}).items():
            if key == "groups":
                if "groups" in data:
                    self.problem((*base, "settings", key), "groups is set too: keep one")
                else:
                    data["groups"] = value
                    self.note((*base, "settings", key), ("groups",), TOP_SAME["groups"])
            elif key == "matrix":
                if "matrix" in data:
                    self.problem((*base, "settings", key), "matrix is set too: keep one")
                else:
                    data["matrix"] = value
                    self.matrix(data, value, (*base, "settings", key))
            else:
                self.problem((*base, "settings", key), "unknown key (known: groups, matrix)")

    def scheduler(self, data: Data, scheduler: Data) -> None:
        base: Path = ("routing", "scheduler")
        if scheduler.get("use", "fifo") != "fifo":
            self.problem((*base, "use"), f"expected fifo, got {scheduler.get('use')!r}")
        elif "use" in scheduler:
            self.note((*base, "use"), None, "waiting requests go by priority, then age")
        settings = self.mapping(scheduler.get("settings", {}), (*base, "settings")) or {}
        fifo = self.mapping(settings.get("fifo", {}), (*base, "settings", "fifo")) or {}
        where: Path = (*base, "settings", "fifo", "priority")
        priorities = self.mapping(fifo.get("priority", {}), where) or {}
        models = data.get("models")
        for model_id, priority in priorities.items():
            model = models.get(model_id) if isinstance(models, dict) else None
            if not isinstance(model, dict):
                self.problem((*where, str(model_id)), f"{model_id!r} is not a model id")
            elif "priority" in model:
                self.problem((*where, model_id), f"models.{model_id}.priority is set too")
            else:
                model["priority"] = priority
                self.note(
                    (*where, model_id), ("models", model_id, "priority"), "higher is served first"
                )

    def hooks(self, hooks: Data, models: Data) -> None:
        if "on_request" in hooks:
            self.note(("hooks", "on_request"), ("hooks", "on_request"), SPL)
        if "on_startup" not in hooks:
            return
        if "onStartup" in hooks:
            self.problem(("hooks", "on_startup"), "hooks.onStartup is set too: keep one")
            return
        startup = hooks.pop("on_startup")
        hooks["onStartup"] = startup
        if isinstance(startup, dict):
            if "profile" in startup:
                target = ("hooks", "onStartup", "profile")
                self.note(("hooks", "on_startup", "profile"), target, "active at startup")
            if "preload" in startup:
                target = ("hooks", "onStartup", "preload")
                self.note(("hooks", "on_startup", "preload"), target, "models loaded at startup")
                self.preload_aliases(startup["preload"], models)

    def preload_aliases(self, preload: object, models: Data) -> None:
        """llama-swap preloads an alias as its model; modelswap's preload takes model ids."""
        if not isinstance(preload, list):
            return
        owners = {
            alias: model_id
            for model_id, model in models.items()
            if isinstance(model, dict) and isinstance(model.get("aliases"), list)
            for alias in model["aliases"]
            if isinstance(alias, str)
        }
        for index, name in reversed(list(enumerate(preload))):
            source = ("hooks", "on_startup", "preload", index)
            if isinstance(name, str) and name not in models and name in owners:
                preload[index] = owners[name]
                self.note(source, ("models", owners[name]), f"the alias {name!r}: its model")
            elif isinstance(name, str) and name not in models and name in self.selectors_read:
                targets = self.selectors_read[name].get("targets")
                first = targets[0] if isinstance(targets, list) and targets else None
                first = owners.get(first, first) if isinstance(first, str) else None
                if isinstance(first, str) and first in models:
                    preload[index] = first
                    self.note(source, ("models", first), f"the selector {name!r}: its first target")
                else:
                    del preload[index]
                    note = f"the selector {name!r} has no local first target to preload"
                    self.note(source, None, note, IGNORED)

    # -- models ----------------------------------------------------------------------------

    def model(self, model_id: str, model: Data) -> None:
        base: Path = ("models", model_id)
        for key, reason in MODEL_IGNORED.items():
            if key in model:
                self.ignore(model, key, base, reason)
        if model.get("unloadTimeout") == 0:
            del model["unloadTimeout"]
            note = "0: the top-level unloadTimeout, as in llama-swap"
            self.note((*base, "unloadTimeout"), ("unloadTimeout",), note)
        if model.get("ttl") == -1:
            del model["ttl"]
            self.note((*base, "ttl"), ("globalTTL",), "-1: the model uses globalTTL")
        limit = model.get("concurrencyLimit")
        if model_id == COMFYUI_MODEL and isinstance(limit, int) and 0 < limit < COMFYUI_MIN:
            model["concurrencyLimit"] = COMFYUI_MIN  # a browser loads ComfyUI's page in parallel
            self.note(
                (*base, "concurrencyLimit"),
                (*base, "concurrencyLimit"),
                f"raised to {COMFYUI_MIN} for {COMFYUI_MODEL}, as llama-swap does",
                REWRITTEN,
            )
        for key, note in MODEL_SAME.items():
            if key in model:
                self.note(("models", "*", key), ("models", "*", key), note)
        if isinstance(model.get("aliases"), list):
            self.aliases(base, model["aliases"])
            if model_id in model["aliases"]:  # llama-swap accepts a model named as its alias
                model["aliases"] = [a for a in model["aliases"] if a != model_id]
                note = "the model's own id: the name already reaches it"
                self.note((*base, "aliases"), (*base, "aliases"), note, REWRITTEN)
        if isinstance(model.get("filters"), dict):
            self.filters((*base, "filters"), model["filters"])
            self.set_params_by_id(model_id, model)
        if isinstance(model.get("timeouts"), dict):
            self.timeouts((*base, "timeouts"), model["timeouts"])

    def aliases(self, base: Path, aliases: list[Any]) -> None:
        for index, entry in enumerate(aliases):
            if not isinstance(entry, dict):
                continue
            path: Path = (*base, "aliases", index)
            if not isinstance(entry.get("id"), str):
                self.problem(path, "an alias written as a mapping needs an id")
                continue
            for key in sorted(k for k in entry if k != "id"):
                reason = "an alias has no name of its own; it shares its model's row"
                if key == "unlisted":
                    reason = "every alias is listed (with alias_for)"
                self.note((*path, key), None, reason, IGNORED)
            aliases[index] = entry["id"]
            self.note((*path, "id"), path, "the alias")

    def filters(self, base: Path, filters: Data) -> None:
        if "policy" in filters:
            self.note((*_generic(base), "policy"), (*_generic(base), "policy"), SPL)
        if "strip_params" in filters:
            if "stripParams" in filters:
                self.problem((*base, "strip_params"), "stripParams is set too: keep one")
                return
            filters["stripParams"] = filters.pop("strip_params")
            self.note((*base, "strip_params"), (*base, "stripParams"), "llama-swap's old name")
        generic = _generic(base)
        if isinstance(filters.get("stripParams"), list):
            self.note((*generic, "stripParams"), (*generic, "stripParams"), "same meaning")
        elif isinstance(filters.get("stripParams"), str):
            names: list[str] = []
            for name in (part.strip() for part in filters["stripParams"].split(",")):
                if name and name != "model" and name not in names:
                    names.append(name)
            filters["stripParams"] = names
            note = "a comma-separated string, read as a list (`model` is never stripped)"
            self.note((*base, "stripParams"), (*base, "stripParams"), note, REWRITTEN)
        if "setParams" in filters:
            self.note((*generic, "setParams"), (*generic, "setParams"), "same meaning")
        if isinstance(filters.get("setParams"), dict):
            defaults = filters.setdefault("defaultParams", {})
            if isinstance(defaults, dict):
                where = (*base, "setParams")
                target = (*base, "defaultParams")
                filters["setParams"] = self.soft_params(
                    where, target, filters["setParams"], defaults
                )
                if not defaults:
                    del filters["defaultParams"]

    def soft_params(self, base: Path, target: Path, params: Data, defaults: Data) -> Data:
        """llama-swap's soft defaults: a key ending in ``?`` is set only when the body does not
        carry it (a value present counts, even null), which is modelswap's ``defaultParams``.
        Returns the hard keys; the soft ones go into ``defaults``. The hard spelling of a key
        wins over its soft one, as in llama-swap; ``model`` is never set."""
        hard = {k: v for k, v in params.items() if not (isinstance(k, str) and k.endswith("?"))}
        for key in params:
            if isinstance(key, str) and "." in key:  # llama-swap's path: said, never silent
                note = (
                    "llama-swap reads a dotted key as a path into nested objects; modelswap "
                    f"sets one top-level key named {key.rstrip('?')!r}: write the nested object"
                )
                self.note((*base, key), (*base, key), note, DIFFERS)
        for key, value in params.items():
            if not (isinstance(key, str) and key.endswith("?")):
                continue
            name, source = key[:-1], (*base, key)
            if name == "model":
                self.problem(source, "`model` cannot be filtered")
            elif not name:
                self.note(source, None, "no parameter name: skipped, as llama-swap does", SAME)
            elif name in hard:
                note = (
                    f"{name!r} is set hard in the same block: the hard value wins, as in llama-swap"
                )
                self.note(source, None, note, SAME)
            elif name in defaults:
                self.problem(source, f"defaultParams sets {name!r} too: keep one")
            else:
                defaults[name] = value
                self.note(source, (*target, name), SOFT_DEFAULT)
        return hard

    def set_params_by_id(self, model_id: str, model: Data) -> None:
        """``setParamsByID`` sets params by the name a client used: each name becomes an alias
        (unless it is the model's id) with its own ``aliasFilters`` entry."""
        filters = model["filters"]
        if "setParamsByID" not in filters:
            return
        base: Path = ("models", model_id, "filters", "setParamsByID")
        by_id = self.mapping(filters.pop("setParamsByID"), base) or {}
        aliases = model.setdefault("aliases", [])
        alias_filters = model.setdefault("aliasFilters", {})
        if not isinstance(aliases, list) or not isinstance(alias_filters, dict):
            return
        for key, params in by_id.items():
            name = str(key).replace("${MODEL_ID}", model_id)
            if "${" in name.replace("${PORT}", ""):  # ${PORT} is read once ports are given
                self.problem(
                    (*base, str(key)), "only ${MODEL_ID} and ${PORT} may be used in these names"
                )
                continue
            if name in alias_filters:
                self.problem((*base, str(key)), f"aliasFilters sets {name!r} too: keep one")
                continue
            if name != model_id and name not in aliases:
                aliases.append(name)
            entry: Data = {}
            if isinstance(params, dict):
                soft: Data = {}
                target = ("models", model_id, "aliasFilters", name, "defaultParams")
                entry["setParams"] = self.soft_params((*base, str(key)), target, params, soft)
                if soft:
                    entry["defaultParams"] = soft
            else:
                entry["setParams"] = params  # validation names its type
            alias_filters[name] = entry
            target = ("models", model_id, "aliasFilters", name, "setParams")
            self.note((*base, str(key)), target, "applied when a client names it")

    def performance(self, performance: Data) -> None:
        """llama-swap's first spelling of the monitor's keys (May 2026): ``enable``, read as
        ``disabled`` (its later name); ``maxAge`` and ``gc``, fixed since."""
        base: Path = ("performance",)
        if "enable" in performance:
            enable = performance.pop("enable")
            if "disabled" in performance:
                self.problem((*base, "enable"), "performance.disabled is set too: keep one")
            elif not isinstance(enable, bool):
                self.problem((*base, "enable"), f"expected a boolean, got {type_name(enable)}")
            else:
                if not enable:
                    performance["disabled"] = True
                note = "llama-swap's first spelling: enable: false is disabled: true"
                self.note((*base, "enable"), (*base, "disabled"), note)
        for key in ("maxAge", "gc"):
            if key in performance:
                reason = "llama-swap's first performance keys, fixed since (not configurable)"
                self.ignore(performance, key, base, reason)

    def activity_keys(self, data: Data) -> None:
        """``metricsMaxInMemory`` and ``captureBuffer`` become the activity log's bounds,
        unless the file sets those (or, for the first, ``store.path``, as in llama-swap)."""
        store = data.get("store")
        activity = data.get("activity")
        if activity is not None and not isinstance(activity, dict):
            return  # validation names it
        settings: Data = activity if activity is not None else {}
        if "metricsMaxInMemory" in data:
            value = data.pop("metricsMaxInMemory")
            if isinstance(store, dict) and "path" in store:
                self.note(
                    ("metricsMaxInMemory",),
                    None,
                    "store.path is set, and llama-swap then ignores it too",
                    IGNORED,
                )
            elif "maxRows" in settings:
                self.note(
                    ("metricsMaxInMemory",), None, "activity.maxRows is set, and wins", IGNORED
                )
            elif isinstance(value, int) and not isinstance(value, bool):
                settings["maxRows"] = value if value > 0 else 1000
                self.note(("metricsMaxInMemory",), ("activity", "maxRows"), METRICS_WINDOW)
            else:
                self.problem(
                    ("metricsMaxInMemory",), f"expected an integer, got {type_name(value)}"
                )
        if "captureBuffer" in data:
            value = data.pop("captureBuffer")
            if "capture" in settings or "captureBytes" in settings:
                self.note(
                    ("captureBuffer",),
                    None,
                    "activity.capture or captureBytes is set, and wins",
                    IGNORED,
                )
            elif isinstance(value, int) and not isinstance(value, bool):
                settings["capture"] = value > 0
                if value > 0:
                    settings["captureBytes"] = value * 1024 * 1024
                self.note(("captureBuffer",), ("activity", "captureBytes"), CAPTURE_BUFFER)
            else:
                self.problem(("captureBuffer",), f"expected an integer, got {type_name(value)}")
        if settings and activity is None:
            data["activity"] = settings

    def timeouts(self, base: Path, timeouts: Data) -> None:
        for key, reason in TIMEOUTS_IGNORED.items():
            if key in timeouts:
                self.ignore(timeouts, key, base, reason)
        for key, note in TIMEOUTS_SAME.items():
            if key in timeouts:
                generic = (*_generic(base), key)
                self.note(generic, generic, note)
        if "responseHeader" in timeouts:
            if "firstByte" in timeouts:
                self.problem((*base, "responseHeader"), "firstByte is set too: keep one")
                return
            timeouts["firstByte"] = timeouts.pop("responseHeader")
            note = "seconds to the response's headers (0: no limit)"
            self.note((*base, "responseHeader"), (*base, "firstByte"), note)
        if "connect" in timeouts:
            generic = (*_generic(base), "connect")
            self.note(generic, generic, "seconds to open the connection (0: no limit)")

    # -- peers -----------------------------------------------------------------------------

    def peer(self, peer_id: str, peer: Data) -> None:
        base: Path = ("peers", peer_id)
        if "tailcatKey" in peer:
            self.ignore(peer, "tailcatKey", base, TOP_IGNORED["tailcat"])
        key = peer.get("apiKey")
        if isinstance(key, str) and (env := _ENV_REF_RE.fullmatch(key.strip())):
            if "apiKeyEnv" in peer:
                self.problem((*base, "apiKey"), "apiKeyEnv is set too: keep one")
            else:
                del peer["apiKey"]
                peer["apiKeyEnv"] = env.group(1)
                self.note((*base, "apiKey"), (*base, "apiKeyEnv"), "the key read from there")
        elif isinstance(key, str) and (env := _ENV_REF_RE.search(key)):
            # set variables were read before (tree_macros): this one is not set
            self.problem((*base, "apiKey"), f"environment variable {env.group(1)} is not set")
        for name, note in PEER_SAME.items():
            if name in peer:
                self.note(("peers", "*", name), ("peers", "*", name), note)
        if isinstance(peer.get("filters"), dict):
            self.filters((*base, "filters"), peer["filters"])
        if isinstance(peer.get("timeouts"), dict):
            self.timeouts((*base, "timeouts"), peer["timeouts"])
