"""llama-swap's documented configuration keys, and how modelswap reads each one.

The vocabulary :mod:`modelswap.config.compat` recognises: keys both spell alike (with a note on
any difference in meaning), and llama-swap keys modelswap does not implement (with the reason,
which is what the warning says). Sources: llama-swap's docs/configuration.md and
config.example.yaml.
"""

from __future__ import annotations

SPL = "the Swap Policy Language, the same programs: filters, then hooks.on_request, then the "
SPL += "model's or peer's filters.policy; a program that cannot be honoured refuses the config"
SESSION_HEADERS = "the first of these headers a request carries is recorded as its session "
SESSION_HEADERS += "(metadata.session_id in the activity log; GET /api/activity?session_id=)"
SOFT_DEFAULT = "a soft default: set only when the body lacks the key (a null counts as sent), "
SOFT_DEFAULT += "after stripParams and before the hard keys"

# Keys both spell alike -> a note on how modelswap reads them.
TOP_SAME = {
    "healthCheckTimeout": "another name for startTimeout, the ceiling of a start; a silent "
    "server is stopped sooner (silenceTimeout)",
    "logLevel": "same values: debug, info, warn, error",
    "startPort": "first ${PORT}; later ports follow the models' order in the file",
    "globalTTL": "same meaning",
    "macros": "strings, numbers or booleans; macros may use other macros",
    "apiKeys": "strings; ${env.NAME} reads the environment. A string key may use the model "
    "routes only; give it scopes [inference, read, admin] ({key, scopes}) for /running, /logs, "
    "/api/models/unload and /upstream, which llama-swap's keys also open",
    "groups": "members, swap, exclusive, persistent: same meaning",
    "includeAliasesInList": "same meaning: each alias is a row of GET /v1/models (alias_for)",
    "unloadTimeout": "seconds a stopping server gets after SIGTERM (or cmdStop) before SIGKILL",
    "upstream": "ignorePaths: /upstream/<model>/<path> paths that never start a model",
    "sendLoadingState": "while a model starts, a chat stream gets the progress as "
    "reasoning_content",
    "matrix": "vars, sets, evict_costs: the least-cost set of models that may run together",
    "profiles": "named sets of models; the active one (PUT /api/profiles/active) is loaded and "
    "pinned",
    "logToStdout": "same values: proxy (the gateway's log on stdout, not stderr), upstream (each "
    "backend's output copied to stdout; the gateway's log stays on stderr), both, none (nothing "
    "on stdout; the gateway's log on stderr)",
    "logTimeFormat": "same names (ansic ... stampnano): the timestamp of the gateway's log "
    "lines on stdout/stderr; empty or unknown: modelswap's own timestamp (llama-swap writes none)",
    "globalConcurrencyLimit": "same meaning: requests at once across every model and peer; "
    "one more gets 429 at once (with Retry-After: 1), never queued; 0: no limit",
    "performance": "disabled, every: same meaning (every also takes seconds, at least 1); "
    "GET /api/performance answers in llama-swap's shape",
    "policies": SPL,
}
MODEL_SAME = {
    "cmd": "same meaning ('#' lines and '\\' continuations allowed)",
    "cmdStop": "same meaning; ${PID} is the server's pid",
    "proxy": "same meaning",
    "aliases": "same meaning",
    "env": 'same meaning ("KEY=VALUE" strings)',
    "checkEndpoint": "same meaning; 'none' skips it",
    "ttl": "same meaning",
    "unlisted": "same meaning",
    "useModelName": "same meaning",
    "name": "shown in /v1/models; macros expand",
    "description": "shown in /v1/models; macros expand",
    "concurrencyLimit": "requests beyond it wait in the queue instead of getting 429",
    "macros": "same meaning: they override top-level macros",
    "metadata": "shown in /v1/models as meta.llamaswap; macros expand, keeping their type",
    "unloadTimeout": TOP_SAME["unloadTimeout"],
    "capabilities": "same keys and checks; listed in /v1/models as llama-swap lists them, filled "
    "from what the backend reported when last ready (unless disableAuto)",
    "sendLoadingState": TOP_SAME["sendLoadingState"],
    "disableKeepAlives": "same meaning: a new connection per request (Connection: close), so "
    "timeouts.idleConn does nothing for that model",
}
PEER_SAME = {
    "proxy": "same meaning",
    "models": "same meaning",
    "apiKey": "sent to the peer as Authorization: Bearer",
}
TOP_IGNORED = {
    "logRequests": "every request is recorded in the activity log (activity.enabled)",
    "ui": "the web UI has no settings but the session headers (ui.activity.session_id)",
    "matrix": "a matrix with keys other than vars, sets, evict_costs is not read (groups "
    "and resources budgets apply instead)",
    "tailcat": "there is no Tailcat listener",
    "selectors": "a selector with other keys than targets, strategy (warm, pin, spillover), "
    "reservations, name, description, unlisted is not read",
}
MODEL_IGNORED = {
    "compat": "there are no upstream compatibility switches",
    "cmd_stop": "llama-swap ignores this old spelling too; cmdStop is the stop command",
}
TIMEOUTS_SAME = {
    "keepalive": "TCP keep-alive probes after this many idle seconds, then at this interval "
    "(0: none)",
    "tlsHandshake": "an https proxy or peer gets connect + tlsHandshake seconds to connect (the "
    "HTTP client times the TCP connect and the TLS handshake as one)",
    "idleConn": "seconds an idle connection is kept for reuse (0: no limit)",
}
TIMEOUTS_IGNORED = {
    "expectContinue": "modelswap has read the whole body before it forwards a request and sends "
    "it at once: there is no 100 Continue to wait for",
}
METRICS_WINDOW = "the rows the activity log keeps (llama-swap's default in-memory window; "
METRICS_WINDOW += "modelswap keeps them in activity.path); <= 0 means 1000, as in llama-swap"
CAPTURE_BUFFER = "MB for captures: > 0 turns activity.capture on, each body kept up to that "
CAPTURE_BUFFER += "size (captures are rows of the activity log, not a ring of N MB); 0: off"
