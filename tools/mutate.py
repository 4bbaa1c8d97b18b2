"""Mutation check: each listed one-line bug must be caught by the fast test tier (or by the e2e
tests it names, for a bug only a real gateway shows).

    make mutate                      # every mutation
    .venv/bin/python tools/mutate.py --only capped-per-chunk --keep

For each mutation the source tree is copied to a temporary folder, the one change is made
there (never in the checkout), and the tests that must catch it run on the copy with the fast
tier's marker expression (`make test-fast`). A mutation the tests pass on *survived*: the
script says which and exits 1. The unmutated copy runs the same tests first, so a red
baseline is never taken for a kill.

Add a mutation whenever a bug slipped past the fast tier: the exact text to change (it must
occur once in the file), what to change it to, and the tests that must fail. A bug only a
request through a real gateway shows (which door answered, what a real backend sends) names
end-to-end tests and their marker (``marks="e2e"``): they run the copy's gateway, as slowly as
the e2e tier does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAST = "not e2e and not ui and not vllm and not reliability"


@dataclass(frozen=True)
class Mutation:
    id: str
    path: str
    find: str
    replace: str
    tests: tuple[str, ...]
    marks: str = FAST  # the marker expression the tests run with


MUTATIONS = (
    Mutation(
        "mcp-tool-skips-scope",  # an admin MCP tool run for a read key (issue 39)
        "src/modelswap/http/mcp/registry.py",
        "if not caller.has_scope(tool.scope):",
        "if False:",
        ("tests/unit/http/test_mcp_endpoint.py",),
    ),
    Mutation(
        "relabel-drops-type",  # relayed backend metrics without their TYPE lines (issue 18)
        "src/modelswap/observe/relabel.py",
        'lines.append(f"# TYPE {name} {family.type}")',
        "pass",
        ("tests/unit/observe/test_metrics.py",),
    ),
    Mutation(
        "preflight-misses-auto",  # tool_choice "auto" let through to a start (issue 18)
        "src/modelswap/backends/hints.py",
        'return choice is None or choice == "auto" or choice == {"type": "auto"}',
        "return choice is None",
        ("tests/unit/backends/test_tool_preflight.py",),
    ),
    Mutation(
        "anthropic-404-type",  # Anthropic's 404 type wrong (issue 18)
        "src/modelswap/http/error_responses.py",
        '404: "not_found_error",',
        '404: "invalid_request_error",',
        ("tests/unit/http/test_anthropic_errors.py",),
    ),
    Mutation(
        "capped-per-chunk",  # the probe's 64 KiB cap counted per chunk, not per body
        "src/modelswap/bounded_read.py",
        "if len(body) > limit:",
        "if len(chunk) > limit:",
        ("tests/unit/test_bounded_read.py",),
    ),
    Mutation(
        "capped-off-by-one",  # a body of exactly the cap refused
        "src/modelswap/bounded_read.py",
        "if len(body) > limit:",
        "if len(body) >= limit:",
        ("tests/unit/test_bounded_read.py",),
    ),
    Mutation(
        "read-body-unbounded",  # a chunked client body read without the cap
        "src/modelswap/http/reading.py",
        "return await read_capped(request.content.iter_any(), limit)",
        "return await request.read()",
        ("tests/integration/test_read_body.py",),
    ),
    Mutation(
        "usage-strip-without-choices",  # an event with usage but no choices stripped
        "src/modelswap/observe/usage.py",
        'data.get("choices") == []',
        'not data.get("choices")',
        ("tests/unit/observe/test_usage.py",),
    ),
    Mutation(
        "alias-loses-context",  # alias rows without the reported context
        "src/modelswap/http/catalog.py",
        'if key != "aliases"}',
        'if key not in ("aliases", "max_model_len", "context_length", "meta")}',
        ("tests/unit/http/test_catalog_aliases.py",),
    ),
    Mutation(
        "redact-case-sensitive",  # a secret printed in another case left visible
        "src/modelswap/redact.py",
        "for v in ordered), re.IGNORECASE)",
        "for v in ordered))",
        ("tests/unit/test_redact.py",),
    ),
    Mutation(
        "json-depth-off-by-one",  # JSON at exactly the depth limit refused
        "src/modelswap/jsonsafe.py",
        "return opening <= max_depth or nesting_depth(data) <= max_depth",
        "return opening < max_depth or nesting_depth(data) < max_depth",
        ("tests/unit/test_jsonsafe.py",),
    ),
    Mutation(
        "duplicate-keys-allowed",  # {"model":"a","model":"b"} read as b by us, a by others
        "src/modelswap/http/relay/extract.py",
        "data = jsonsafe.loads(body, top_level_duplicates=True)",
        "data = jsonsafe.loads(body)",
        ("tests/unit/http/test_extract.py",),
    ),
    Mutation(
        "model-name-unbounded",  # a 10 MB model name reaches the lookup and the echo
        "src/modelswap/http/relay/extract.py",
        'if len(model.encode("utf-8", "surrogatepass")) > MAX_MODEL_NAME_BYTES:',
        "if False:",
        ("tests/unit/http/test_extract.py",),
    ),
    Mutation(
        "error-events-not-redacted",  # a backend's error event relayed with its secrets
        "src/modelswap/http/relay/relay.py",
        "lines[index] = redact_error_body(line, redactor)",
        "lines[index] = line",
        ("tests/unit/http/test_error_redaction.py",),
    ),
    Mutation(
        "receipt-unchecked",  # an absurd figure from a log line reported as the receipt
        "src/modelswap/backends/capacity.py",
        "if math.isfinite(value) and 0 < value <= limit:",
        "if True:",
        ("tests/unit/backends/test_capacity.py",),
    ),
    Mutation(
        "inflight-cancel-read-scope",  # a read key could cancel requests (issue 17)
        "src/modelswap/http/routes/inflight.py",
        'declare(app, "POST", "/api/inflight/{id}/cancel", cancel, ADMIN)',
        'declare(app, "POST", "/api/inflight/{id}/cancel", cancel, "read")',
        ("tests/unit/http/test_auth.py",),
    ),
    Mutation(
        "go-layout-day-zero-padded",  # Go's _2 is space-padded (issue 17, logTimeFormat)
        "src/modelswap/config/logtime.py",
        'return f"{dt.day:2d}"  # Go\'s _2',
        'return f"{dt.day:02d}"  # Go\'s _2',
        ("tests/unit/config/test_compat_logging.py",),
    ),
    Mutation(
        "prompt-cache-keeps-stale-file",  # a restored slot used since: its newer state unsaved
        "src/modelswap/supervisor/promptcache.py",
        "        if slot.tokens is None and existing is not None:",
        "        if existing is not None:",
        (
            "tests/e2e/test_prompt_cache.py::test_a_restored_conversation_that_went_on_is_saved_anew",
        ),
        marks="e2e",
    ),
    Mutation(
        "prompt-cache-proof-any-reuse-works",  # a restore that kept a little read as working
        "src/modelswap/supervisor/cacheproof.py",
        "    if cached >= WORKS_SHARE * reusable:",
        "    if cached > 0:",
        ("tests/unit/supervisor/test_cacheproof.py",),
    ),
    Mutation(
        "prompt-cache-stops-never",  # restores that never work saved on every swap
        "src/modelswap/supervisor/cacheproof.py",
        "        if verdict.saving and verdict.failed_in_a_row >= self._stop_after:",
        "        if False:",
        ("tests/unit/supervisor/test_cacheproof.py",),
    ),
    Mutation(
        "histogram-bins-not-sturges",  # llama-swap's /api/metrics/stats bins (issue 17)
        "src/modelswap/observe/histogram.py",
        "math.ceil(math.log2(len(values))) + 1",
        "math.ceil(math.log2(len(values)))",
        ("tests/unit/observe/test_histogram.py",),
    ),
    Mutation(
        "backend-pool-never-stale",  # a pooled connection closed unanswered is not asked again
        "src/modelswap/http/relay/backend_pool.py",
        "self._fail(BackendClosedError(self.reused, reason))",
        "self._fail(BackendClosedError(False, reason))",
        ("tests/unit/http/test_backend_pool.py",),
    ),
    Mutation(
        "backend-pool-keeps-closing-connection",  # Connection: close ignored: pooled anyway
        "src/modelswap/http/relay/backend_pool.py",
        "            and head.keep_alive\n",
        "\n",
        ("tests/unit/http/test_backend_pool.py",),
    ),
    Mutation(
        "keeper-tree-gone-ignores-cgroup",  # the keeper exits with a helper left in the cgroup
        "src/modelswap/supervisor/keeper_program.py",
        "return no_children and (cgroup is None or not cgroup_populated(cgroup))",
        "return no_children",
        ("tests/unit/supervisor/test_keeper_rules.py",),
    ),
    Mutation(
        "keeper-reap-never-done",  # no child left never noticed: the keeper never exits
        "src/modelswap/supervisor/keeper_program.py",
        "            return status, True",
        "            return status, False",
        ("tests/unit/supervisor/test_keeper_rules.py",),
    ),
    Mutation(
        "keeper-exit-drops-signal",  # a backend killed by a signal reported as a plain exit
        "src/modelswap/supervisor/keeper_program.py",
        "return 128 - code, -code",
        "return 128 - code, 0",
        ("tests/unit/supervisor/test_keeper_rules.py",),
    ),
    Mutation(
        "tree-tag-prefix-match",  # another backend's longer tag taken for this one's
        "src/modelswap/supervisor/tree.py",
        'needle = b"\\0" + os.fsencode(f"{TAG_ENV}={tag}") + b"\\0"',
        'needle = b"\\0" + os.fsencode(f"{TAG_ENV}={tag}")',
        ("tests/unit/supervisor/test_keeper_rules.py",),
    ),
    Mutation(
        "spl-deny-ignored",  # a policy's deny let the request through (issue 29: fail closed)
        "src/modelswap/http/relay/spl.py",
        "raise PolicyDeniedError(denied.status, denied.message, denied.provenance())",
        "pass",
        ("tests/unit/http/test_spl_relay.py",),
    ),
    Mutation(
        "spl-hook-not-compiled",  # hooks.on_request accepted but never run (issue 29)
        "src/modelswap/config/policies.py",
        'on_request = compile_one(raw.hooks.on_request, shared, ("hooks", "on_request"))',
        "on_request = None",
        ("tests/unit/config/test_spl_config.py",),
    ),
    Mutation(
        "spl-not-equal-inverted",  # != read as = (issue 29)
        "src/modelswap/policy/evaluate.py",
        "return not _equals(value, condition.value)",
        "return _equals(value, condition.value)",
        ("tests/unit/policy/test_spl_eval.py",),
    ),
    Mutation(
        "dry-run-misses-busy",  # a busy model to evict predicted idle: no drain (issue 39)
        "src/modelswap/routing/prediction.py",
        "in_flight = snapshot.in_flight.get(model, 0)",
        "in_flight = 0",
        ("tests/unit/routing/test_prediction.py",),
    ),
    Mutation(
        "together-ignores-evictions",  # sets that evict their own members (issue 39)
        "src/modelswap/routing/together.py",
        "if eviction is None or eviction.models:",
        "if eviction is None:",
        ("tests/unit/routing/test_together_sets.py",),
    ),
    Mutation(
        "state-parents-umask",  # stateDir's missing parents made 0755 by the umask (issue 38)
        "src/modelswap/statefile.py",
        "folder.mkdir(mode=FOLDER_MODE)",
        "folder.mkdir()",
        ("tests/unit/test_statefile.py",),
    ),
    Mutation(
        "activity-corrupt-off",  # a corrupt activity database turned the log off (issue 38)
        "src/modelswap/observe/activity.py",
        "corrupt = attempt == 1 and self.where != MEMORY and _corrupt(exc)",
        "corrupt = False",
        ("tests/unit/observe/test_activity.py",),
    ),
    Mutation(
        "state-file-corrupt-kept",  # a corrupt stats/capabilities/index file not moved aside
        "src/modelswap/statefile.py",
        "            self._set_aside(exc)\n",
        "            pass\n",
        ("tests/unit/test_statefile.py", "tests/unit/observe/test_capability_memory.py"),
    ),
    Mutation(
        "empty-pin-refused",  # a llama-swap profile pin of "" refused (issue 38)
        "src/modelswap/config/scheduling.py",
        "target = written or None",
        "target = written",
        ("tests/unit/config/test_compat_newest.py",),
    ),
    Mutation(
        "generic-context-forgotten",  # a generic backend's context lost after unload (issue 38)
        "src/modelswap/backends/adapter.py",
        "return CapabilityReport(self.name, meta.source, context=meta.context_length)",
        "return None",
        ("tests/unit/observe/test_capability_memory.py",),
    ),
    Mutation(
        "fair-share-ignored",  # every client at the same tag: FIFO again (issue 40)
        "src/modelswap/routing/fairshare.py",
        "return max(self._finish.get(client.name, 0.0), self._virtual.get(client.rank, 0.0))",
        "return 0.0",
        ("tests/unit/routing/test_fair_share_sim.py",),
    ),
    Mutation(
        "batch-class-ignored",  # batch waiters ranked with interactive ones (issue 40)
        "src/modelswap/routing/fairshare.py",
        "return (client.rank, self.tag(client), lane[0].arrived)",
        "return (0, self.tag(client), lane[0].arrived)",
        ("tests/unit/routing/test_fair_share_sim.py",),
    ),
    Mutation(
        "fair-idle-client-credit",  # a returning client keeps credit from its idle time
        "src/modelswap/routing/fairshare.py",
        "self._virtual[rank] = start",
        "pass",
        ("tests/unit/routing/test_fair_share_sim.py",),
    ),
    Mutation(
        "quota-retry-after-zero",  # a 429 that says retry at once (issue 40)
        "src/modelswap/routing/quota.py",
        'return "requests", account.requests.seconds_until(1.0)',
        'return "requests", 0.0',
        ("tests/unit/routing/test_quota.py",),
    ),
    Mutation(
        "capabilities-list-no-hint",  # the old list form refused with no mapping to write (41)
        "src/modelswap/config/schema.py",
        "    if isinstance(value, list):\n        mapping = _capabilities_mapping(value)",
        "    if isinstance(value, tuple):\n        mapping = _capabilities_mapping(value)",
        ("tests/unit/config/test_capabilities_config.py",),
    ),
    Mutation(
        "fast-door-ignores-key-models",  # a key limited to some models uses any ready one (#37)
        "src/modelswap/runtime.py",  # Runtime.direct_target, the fast door's admission query
        "if model is None or model.fallback or (key is not None and not key.allows(model)):",
        "if model is None or model.fallback:",
        (
            "tests/e2e/test_security.py::"
            "test_a_restricted_key_is_refused_a_ready_idle_model_outside_its_list",
        ),
        marks="e2e",
    ),
    Mutation(
        "backend-pool-charset-not-a-stream",  # vLLM's "; charset=utf-8" read as no stream (#37)
        "src/modelswap/http/relay/backend_pool.py",
        'event_stream = value.split(b";", 1)[0].strip().lower() == b"text/event-stream"',
        'event_stream = value.strip().lower() == b"text/event-stream"',
        (
            "tests/e2e/test_gateway.py::"
            "test_a_stream_is_relayed_as_a_stream_whatever_its_content_type_parameters",
            "tests/e2e/test_gateway.py::"
            "test_backend_crash_mid_stream_ends_the_stream_with_an_error_event",
        ),
        marks="e2e",
    ),
    Mutation(
        "cors-origin-prefix-match",  # https://app.example.evil.net passes as app.example (#41)
        "src/modelswap/http/middleware/cors.py",
        'return origin if origin in allowed or "*" in allowed else None',
        'return origin if any(origin.startswith(a) for a in allowed) or "*" in allowed else None',
        ("tests/e2e/test_security.py::test_cors_refuses_other_origins",),
        marks="e2e",
    ),
    Mutation(
        "deny-names-the-applying-program",  # a deny in an applied policy blamed on its caller (#41)
        "src/modelswap/policy/evaluate.py",
        "                program=program.name,",
        "                program=applied_by[0].split(' line')[0] if applied_by else program.name,",
        ("tests/unit/policy/test_spl_provenance.py",),
    ),
    Mutation(
        "client-stop-counted-as-error",  # a client's own stop (499) red again (#41)
        "src/modelswap/observe/records.py",
        "        if self.status == CLIENT_STOPPED:",
        "        if False:",
        ("tests/unit/observe/test_activity_why_store.py",),
    ),
    Mutation(
        "limit-refusal-forgets-the-model",  # a 429 row with no model (#41)
        "src/modelswap/http/middleware/concurrency.py",
        "            await _note_model(request)",
        "            pass",
        ("tests/unit/http/test_refusal_marks.py",),
    ),
    Mutation(
        "queue-ordinal-teens",  # "queued 11st for qwen" (#40)
        "src/modelswap/routing/queue_place.py",
        'suffix = "th" if 10 <= n % 100 <= 20 else',
        'suffix = "th" if 10 <= n % 100 <= 10 else',
        ("tests/unit/routing/test_queue_place.py",),
    ),
    Mutation(
        "queue-wait-ignores-concurrency-limit",  # a full model's waiter said to wait its turn
        "src/modelswap/routing/scheduler.py",
        'if limit and self._in_flight[model] >= limit:\n                return "concurrencyLimit"',
        'if limit and self._in_flight[model] > limit:\n                return "concurrencyLimit"',
        ("tests/unit/routing/test_queue_place.py",),
    ),
    Mutation(
        "queue-estimate-one-round",  # every waiter told the next one's wait (#40)
        "src/modelswap/routing/queue_place.py",
        "return None if facts.service is None else rounds * facts.service",
        "return None if facts.service is None else facts.service",
        ("tests/unit/routing/test_queue_place.py",),
    ),
    Mutation(
        "peer-refusal-not-counted",  # a refused peer never opens its breaker (issue 37's passage)
        "src/modelswap/routing/peer_directory.py",
        "            if failed:\n                self.breaker.failure(self.now())",
        "            if False:\n                self.breaker.failure(self.now())",
        ("tests/e2e/test_peers.py::test_breaker_opens_after_failures_and_a_probe_closes_it",),
        marks="e2e",
    ),
    Mutation(
        "scope-requested-kept-across-redactors",  # a reload's redactor reuses old maskings
        "src/modelswap/http/tracking/scope.py",
        "if not _ECHOED_BY or _ECHOED_BY[0] is not redactor:",
        "if not _ECHOED_BY:",
        (
            "tests/unit/http/test_scope_requested.py::"
            "test_the_same_name_is_redacted_by_each_redactor_in_turn",
        ),
    ),
    Mutation(
        "gate-place-kept-after-disconnect",  # aiohttp's door never gives a key's place back
        "src/modelswap/http/relay/dispatch.py",
        "        charge(admitted, request.get(OBS), len(body.raw))",
        "        pass",
        (
            "tests/e2e/test_key_sharing.py::"
            "test_a_client_that_leaves_mid_stream_gives_its_place_back",
        ),
        marks="e2e",
    ),
    Mutation(
        "gate-handover-counted-twice",  # the fast door's admission not given back on hand-over
        "src/modelswap/http/server/fast_door.py",
        "            let_in.refund()  # and admits it again",
        "            pass",
        ("tests/e2e/test_key_sharing.py::test_a_request_waiting_for_a_busy_model_is_counted_once",),
        marks="e2e",
    ),
    Mutation(
        "gate-stream-waits-as-anonymous",  # a waiting stream's key not passed to the fair queue
        "src/modelswap/http/relay/loading_stream.py",
        "        pending = runtime.admit(model, self._client)",
        "        pending = runtime.admit(model)",
        (
            "tests/e2e/test_key_sharing.py::"
            "test_a_waiting_request_is_told_its_place_and_listed_by_its_key",
        ),
        marks="e2e",
    ),
    Mutation(
        "backend-error-message-dropped",  # a backend's 501 row says no why (issue 41)
        "src/modelswap/http/relay/relay.py",
        "obs.error_event(TOOL_CHOICE_CODE if hint is not None else why.code, why.message)",
        "obs.error_event(TOOL_CHOICE_CODE if hint is not None else why.code, None)",
        (
            "tests/e2e/test_refusals_explained.py::"
            "test_backend_and_gateway_errors_and_a_stop_explained_on_both_doors",
        ),
        marks="e2e",
    ),
    Mutation(
        "deny-without-its-program",  # a policy's deny no longer says where it is written
        "src/modelswap/http/relay/spl.py",
        "raise PolicyDeniedError(denied.status, denied.message, denied.provenance())",
        "raise PolicyDeniedError(denied.status, denied.message)",
        ("tests/e2e/test_refusals_explained.py::test_gateway_refusals_name_their_rule",),
        marks="e2e",
    ),
    Mutation(
        "stop-misses-its-first-token",  # a stopped client credited one token too few
        "src/modelswap/observe/usage.py",
        "self._text_from = self._relayed + _event_count(data[: text.start()]) - 1",
        "self._text_from = self._relayed + _event_count(data[: text.start()])",
        (
            "tests/unit/observe/test_usage.py::"
            "test_a_stream_cut_short_counts_the_text_events_it_relayed_at_every_split",
        ),
    ),
    Mutation(
        "quota-head-lines-skip-tokens-day",  # the fast door's head lacks a limit the key has (40)
        "src/modelswap/routing/quota.py",
        "        if capacity := quota.tokens_per_day:\n            level = self.tokens_day",
        "        if capacity := 0:\n            level = self.tokens_day",
        ("tests/unit/routing/test_quota.py",),
    ),
    Mutation(
        "inflight-drops-fast-quota-headers",  # /api/inflight lacks the x-ratelimit-* sent (40)
        "src/modelswap/http/tracking/scope.py",
        "_decode(raw if more is None else [*raw, *more()])",
        "_decode(raw)",
        (
            "tests/e2e/test_key_sharing.py::"
            "test_a_client_that_leaves_mid_stream_gives_its_place_back",
        ),
        marks="e2e",
    ),
)


def copy_tree(into: Path) -> None:
    # docs: the package ships its pages (src/modelswap/docs links there) and tests compare them.
    for name in ("src", "tests", "docs", "pyproject.toml"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(
                source,
                into / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache"),
            )
        else:
            shutil.copy2(source, into / name)


def run_tests(root: Path, tests: tuple[str, ...], marks: str) -> int:
    # The copy's own src first, for this process and every child it starts (fakes, watchdog).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    command += ["-m", marks, *tests]
    return subprocess.run(
        command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ).returncode


def apply(root: Path, mutation: Mutation) -> None:
    path = root / mutation.path
    text = path.read_text()
    count = text.count(mutation.find)
    if count != 1:
        where = f"{mutation.id}: {mutation.find!r} occurs {count} times in {mutation.path}"
        raise SystemExit(where)
    path.write_text(text.replace(mutation.find, mutation.replace))


def check(mutation: Mutation, keep: bool) -> str:
    root = Path(tempfile.mkdtemp(prefix=f"mutate-{mutation.id}-"))
    try:
        copy_tree(root)
        if run_tests(root, mutation.tests, mutation.marks) != 0:
            return "baseline red"  # the unmutated tests fail: nothing can be concluded
        apply(root, mutation)
        return "killed" if run_tests(root, mutation.tests, mutation.marks) != 0 else "SURVIVED"
    finally:
        if keep:
            print(f"  kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="run this mutation id (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--keep", action="store_true", help="keep the mutated copies")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.id in args.only]
    if args.list or not chosen:
        for m in MUTATIONS:
            print(f"{m.id:32} {m.path}  <- {', '.join(m.tests)}")
        return 0 if args.list else 2
    bad = 0
    for mutation in chosen:
        started = time.monotonic()
        outcome = check(mutation, args.keep)
        bad += outcome != "killed"
        print(f"{outcome:12} {mutation.id:32} ({time.monotonic() - started:.0f} s)", flush=True)
    print(f"{len(chosen) - bad} of {len(chosen)} mutations killed by their tests")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
