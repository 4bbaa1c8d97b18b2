"""Metrics on its own registry, the live per-model collector, and relabelled backend metrics,
read back through prometheus-client's own parser."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from modelswap.observe.metrics import NO_KEY, KeyQuotaView, Metrics, ModelView
from modelswap.observe.records import RequestRecord
from modelswap.observe.relabel import relabel_backend_metrics
from modelswap.states import ProcessState

Labels = frozenset[tuple[str, str]]


def samples(text: str) -> dict[str, dict[Labels, float]]:
    """sample name -> {labels: value}, every sample of the exposition."""
    out: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def lab(**labels: str) -> Labels:
    return frozenset(labels.items())


def rec(**changes: object) -> RequestRecord:
    base = RequestRecord(
        at=1_750_000_000.0,
        key_name=None,
        model="qwen",
        route="/v1/chat/completions",
        status=200,
        streamed=False,
        prompt_tokens=10,
        completion_tokens=20,
        ttft=0.02,
        duration=0.3,
        first_byte=0.02,
        bytes_in=100,
        bytes_out=200,
        error_code=None,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


class Views:
    def __init__(self) -> None:
        self.views: dict[str, ModelView] = {}

    def __call__(self) -> Mapping[str, ModelView]:
        return self.views


def exposition(metrics: Metrics) -> dict[str, dict[Labels, float]]:
    return samples(metrics.exposition().decode())


def test_request_counts_tokens_and_histograms() -> None:
    metrics = Metrics(Views())
    metrics.request_finished(rec())
    metrics.request_finished(
        rec(streamed=True, prompt_tokens=5, completion_tokens=7, first_byte=0.2)
    )
    metrics.request_finished(rec(route="/v1/completions", prompt_tokens=3, completion_tokens=4))
    metrics.request_finished(rec(status=400, prompt_tokens=None, completion_tokens=None))
    metrics.request_finished(rec(model="other", prompt_tokens=0, completion_tokens=None))
    metrics.request_finished(  # a gateway error before any model was resolved
        rec(model=None, status=404, first_byte=None, prompt_tokens=None, completion_tokens=None)
    )
    metrics.request_finished(rec(key_name="ana", prompt_tokens=2, completion_tokens=None))
    got = exposition(metrics)
    chat, comp = "/v1/chat/completions", "/v1/completions"
    ok = {"outcome": "ok", "code": "", "key": "anonymous"}
    error = {"outcome": "error", "code": "", "key": "anonymous"}
    assert got["modelswap_requests_total"] == {
        lab(model="qwen", route=chat, status="200", **ok): 2,
        lab(model="qwen", route=comp, status="200", **ok): 1,
        lab(model="qwen", route=chat, status="400", **error): 1,
        lab(model="other", route=chat, status="200", **ok): 1,
        lab(model="", route=chat, status="404", **error): 1,
        lab(model="qwen", route=chat, status="200", **{**ok, "key": "ana"}): 1,
    }
    assert got["modelswap_tokens_total"] == {
        lab(model="qwen", kind="prompt", key="anonymous"): 18,
        lab(model="qwen", kind="completion", key="anonymous"): 31,
        lab(model="qwen", kind="prompt", key="ana"): 2,
    }
    durations = got["modelswap_request_duration_seconds_count"]
    assert durations == {  # no key label on latency: buckets x keys
        lab(model="qwen", route=chat, outcome="ok"): 3,
        lab(model="qwen", route=chat, outcome="error"): 1,
        lab(model="qwen", route=comp, outcome="ok"): 1,
        lab(model="other", route=chat, outcome="ok"): 1,
        lab(model="", route=chat, outcome="error"): 1,
    }
    assert got["modelswap_request_duration_seconds_sum"][
        lab(model="qwen", route=chat, outcome="ok")
    ] == pytest.approx(0.9)
    ttfb = got["modelswap_time_to_first_byte_seconds_count"]
    assert ttfb == {  # no first byte: not observed
        lab(model="qwen", route=chat, outcome="ok"): 3,
        lab(model="qwen", route=chat, outcome="error"): 1,
        lab(model="qwen", route=comp, outcome="ok"): 1,
        lab(model="other", route=chat, outcome="ok"): 1,
    }
    assert got["modelswap_time_to_first_byte_seconds_sum"][
        lab(model="qwen", route=chat, outcome="ok")
    ] == pytest.approx(0.24)
    # Buckets are cumulative: 0.02 s below 0.025, 0.2 s below 0.25.
    buckets = got["modelswap_time_to_first_byte_seconds_bucket"]
    ok_chat = {"model": "qwen", "route": chat, "outcome": "ok"}
    assert buckets[lab(**ok_chat, le="0.01")] == 0
    assert buckets[lab(**ok_chat, le="0.025")] == 2
    assert buckets[lab(**ok_chat, le="0.25")] == 3
    assert buckets[lab(**ok_chat, le="+Inf")] == 3


def test_an_error_event_inside_a_200_stream_is_counted_as_an_error_with_its_code() -> None:
    """A streamed request whose start failed after its loading comments: the client got 200
    and then an error event. Counted under its status, as an error, with the code."""
    metrics = Metrics(Views())
    metrics.request_finished(rec(streamed=True))
    failed = rec(streamed=True, error_code="utilization_guard", first_byte=None)
    metrics.request_finished(failed)
    metrics.request_finished(failed)
    metrics.request_finished(rec(status=499, error_code="request_cancelled"))
    got = exposition(metrics)
    chat = "/v1/chat/completions"
    assert got["modelswap_requests_total"] == {
        lab(model="qwen", route=chat, status="200", outcome="ok", code="", key=NO_KEY): 1,
        lab(
            model="qwen",
            route=chat,
            status="200",
            outcome="error",
            code="utilization_guard",
            key=NO_KEY,
        ): 2,
        lab(
            model="qwen",
            route=chat,
            status="499",
            outcome="error",
            code="request_cancelled",
            key=NO_KEY,
        ): 1,
    }
    assert got["modelswap_request_duration_seconds_count"] == {
        lab(model="qwen", route=chat, outcome="ok"): 1,
        lab(model="qwen", route=chat, outcome="error"): 3,
    }
    errors = sum(v for k, v in got["modelswap_requests_total"].items() if ("outcome", "error") in k)
    assert errors == 3


def test_starts_by_result_and_start_duration() -> None:
    metrics = Metrics(Views())
    metrics.start_finished("qwen", True, 4.0)
    metrics.start_finished("qwen", True, 6.0)
    metrics.start_finished("qwen", False, None)
    metrics.start_finished("llama", True, None)  # duration unknown: counted, not observed
    got = exposition(metrics)
    assert got["modelswap_starts_total"] == {
        lab(model="qwen", result="ready"): 2,
        lab(model="qwen", result="failed"): 1,
        lab(model="llama", result="ready"): 1,
    }
    assert got["modelswap_start_duration_seconds_count"] == {lab(model="qwen"): 2}
    assert got["modelswap_start_duration_seconds_sum"] == {lab(model="qwen"): 10.0}


def test_live_gauges_are_read_at_scrape_time() -> None:
    views = Views()
    metrics = Metrics(views)
    assert "modelswap_model_state" not in exposition(metrics)  # no models yet

    views.views = {
        "qwen": ModelView(
            ProcessState.READY,
            in_flight=2,
            queued=3,
            context_length=4096,
            kv_cache_tokens=8192,
            max_concurrency=2.5,
        ),
        "llama": ModelView(ProcessState.STARTING, in_flight=0, queued=1),
    }
    got = exposition(metrics)
    states = got["modelswap_model_state"]
    assert len(states) == 2 * len(ProcessState)
    for model, current in (("qwen", ProcessState.READY), ("llama", ProcessState.STARTING)):
        for state in ProcessState:
            expected = 1.0 if state is current else 0.0
            assert states[lab(model=model, state=state.value)] == expected, (model, state)
    assert got["modelswap_in_flight"] == {lab(model="qwen"): 2, lab(model="llama"): 0}
    assert got["modelswap_queue_depth"] == {lab(model="qwen"): 3, lab(model="llama"): 1}
    assert got["modelswap_context_length_tokens"] == {lab(model="qwen"): 4096}
    assert got["modelswap_kv_cache_tokens"] == {lab(model="qwen"): 8192}
    assert got["modelswap_max_concurrency"] == {lab(model="qwen"): 2.5}

    # The next scrape sees the new state: nothing is cached.
    views.views = {"qwen": ModelView(ProcessState.STOPPING, in_flight=0, queued=0)}
    got = exposition(metrics)
    assert got["modelswap_model_state"][lab(model="qwen", state="stopping")] == 1
    assert got["modelswap_model_state"][lab(model="qwen", state="ready")] == 0
    assert lab(model="llama", state="starting") not in got["modelswap_model_state"]
    assert got["modelswap_in_flight"] == {lab(model="qwen"): 0}
    assert "modelswap_context_length_tokens" not in got


def test_each_metrics_has_its_own_registry() -> None:
    first, second = Metrics(Views()), Metrics(Views())  # no "Duplicated timeseries" error
    first.request_finished(rec())
    assert "modelswap_requests_total" in exposition(first)
    assert "modelswap_requests_total" not in exposition(second)


LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 42
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
"""

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 2.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="Qwen/Qwen3-8B"} 3.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-8B"} 4.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="Qwen/Qwen3-8B"} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="Qwen/Qwen3-8B"} 5.5
"""


def test_relabel_llamacpp_metrics_adds_the_model_label() -> None:
    out = relabel_backend_metrics(LLAMACPP_METRICS, "smollm2")
    got = samples(out)
    assert got["llamacpp:prompt_tokens_total"] == {lab(model="smollm2"): 120}
    assert got["llamacpp:tokens_predicted_total"] == {lab(model="smollm2"): 42}
    assert got["llamacpp:requests_processing"] == {lab(model="smollm2"): 1}


def test_relabel_keeps_existing_labels_and_escapes_values() -> None:
    out = relabel_backend_metrics(VLLM_METRICS, 'we"ird\\name')
    got = samples(out)
    model = 'we"ird\\name'
    assert got["vllm:num_requests_running"] == {
        lab(engine="0", model_name="Qwen/Qwen3-8B", model=model): 2.0
    }
    assert got["vllm:e2e_request_latency_seconds_bucket"] == {
        lab(engine="0", le="1.0", model_name="Qwen/Qwen3-8B", model=model): 3.0,
        lab(engine="0", le="+Inf", model_name="Qwen/Qwen3-8B", model=model): 4.0,
    }
    assert got["vllm:e2e_request_latency_seconds_sum"] == {
        lab(engine="0", model_name="Qwen/Qwen3-8B", model=model): 5.5
    }


def test_relabel_overrides_a_backend_model_label() -> None:
    text = 'x_total{model="theirs"} 1\n'
    assert samples(relabel_backend_metrics(text, "ours"))["x_total"] == {lab(model="ours"): 1}


def test_relabel_is_bounded() -> None:
    text = "".join(f'g{{i="{i}"}} {i}\n' for i in range(50))
    out = relabel_backend_metrics(text, "m", limit=10)
    got = samples(out)
    assert sum(len(v) for v in got.values()) == 10
    assert got["g"] == {lab(i=str(i), model="m"): i for i in range(10)}


@pytest.mark.parametrize(
    "text",
    ["", "<html>not metrics</html>\n", "metric{unclosed 1\n", "# TYPE x counter\nx abc\n"],
)
def test_relabel_unparsable_or_empty_yields_nothing(text: str) -> None:
    assert relabel_backend_metrics(text, "m") == ""


def test_relabelled_text_appended_to_the_exposition_still_parses() -> None:
    metrics = Metrics(Views())
    metrics.request_finished(rec())
    body = metrics.exposition() + relabel_backend_metrics(LLAMACPP_METRICS, "qwen").encode()
    got = samples(body.decode())
    assert (
        got["modelswap_requests_total"][
            lab(
                model="qwen",
                route="/v1/chat/completions",
                status="200",
                outcome="ok",
                code="",
                key="anonymous",
            )
        ]
        == 1
    )
    assert got["llamacpp:prompt_tokens_total"] == {lab(model="qwen"): 120}


def test_families_of_several_backends_merge_under_one_help_and_type() -> None:
    from modelswap.observe.relabel import merge_backend_metrics

    counter = (
        "# HELP llamacpp:n_tokens_max Largest observed n_tokens.\n"
        "# TYPE llamacpp:n_tokens_max counter\nllamacpp:n_tokens_max 7\n"
    )
    out = merge_backend_metrics([("a", LLAMACPP_METRICS + counter), ("b", counter), ("c", "x{")])
    assert out.count("# TYPE llamacpp:n_tokens_max counter\n") == 1
    assert out.count("# HELP llamacpp:n_tokens_max Largest observed n_tokens.\n") == 1
    block = out[out.index("# HELP llamacpp:n_tokens_max") :].splitlines()
    assert block[2:] == [  # the samples follow their TYPE line, the name as written
        'llamacpp:n_tokens_max{model="a"} 7',
        'llamacpp:n_tokens_max{model="b"} 7',
    ]
    assert samples(out)["llamacpp:prompt_tokens_total"] == {lab(model="a"): 120}
    assert 'model="c"' not in out  # a backend whose text is not the format adds nothing


def test_queue_wait_by_model_and_key_and_each_keys_quota_at_scrape_time() -> None:
    standing = [
        KeyQuotaView("ana", {"requests": (60, 58), "concurrency": (4, 3)}, 1),
        KeyQuotaView("ben", {}, 0),  # no quota: nothing to show
    ]
    metrics = Metrics(Views(), quotas=lambda: standing)
    metrics.queue_waited("qwen", "ana", 3.0)
    metrics.queue_waited("qwen", "ana", 0.2)
    metrics.queue_waited("qwen", NO_KEY, 40.0)
    got = exposition(metrics)
    assert got["modelswap_queue_wait_seconds_count"] == {
        lab(model="qwen", key="ana"): 2,
        lab(model="qwen", key="anonymous"): 1,
    }
    assert got["modelswap_queue_wait_seconds_sum"][lab(model="qwen", key="ana")] == 3.2
    assert got["modelswap_key_quota_limit"] == {
        lab(key="ana", limit="requests"): 60,
        lab(key="ana", limit="concurrency"): 4,
    }
    assert got["modelswap_key_quota_remaining"] == {
        lab(key="ana", limit="requests"): 58,
        lab(key="ana", limit="concurrency"): 3,
    }
    assert got["modelswap_key_in_flight"] == {lab(key="ana"): 1}
    standing[0] = KeyQuotaView("ana", {"requests": (60, 60)}, 0)  # read again at each scrape
    assert exposition(metrics)["modelswap_key_quota_remaining"] == {
        lab(key="ana", limit="requests"): 60
    }
