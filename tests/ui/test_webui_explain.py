"""Issue 41 in the browser (Debian's chromium through Playwright): every refusal and failure
explained where people look — the Memory page's "free" as the scheduler counts it, a failed
swap's phase, its one time and its unload's reason, the chat's policy denial and eviction, the
load test's refusals, the prompt cache of a swap, and the smaller findings — each at desktop size
and at 390 px (one view light, the other dark), against ``python -m modelswap serve`` with fake
backends. A view also fails when its page scrolls sideways or throws."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, chat, fake_cmd, request
from tests.ui.conftest import screenshot
from tests.ui.test_activity_outcome import failing_stream
from tests.ui.test_webui import vllm_receipt_cmd
from tests.ui.test_webui_round3 import (
    ADMIN_KEY,
    CLOCK,
    DESKTOP,
    GUARD,
    GUARD_LOG,
    KEYS,
    PHONE,
    READ_KEY,
    card,
    fits,
    name,
    sign_in,
    view,
)

StartGateway = Callable[..., Gateway]
ui = pytest.mark.ui

VIEWS = [(DESKTOP, "light"), (PHONE, "dark")]
GIB = 1024**3


# ---- #1: the Memory page's "free" is what the scheduler counts --------------------------------


@ui
def test_memory_free_is_what_the_scheduler_counts_with_the_receipt_as_the_detail(
    gateway: StartGateway, browser: Any
) -> None:
    # big declares 90 GiB; its receipt says 83.59 (weights 22.07 + KV 61.52). The budget
    # charges 90: 10 GiB are free for a start, not the 16.41 the receipt would leave.
    gw = gateway(
        f"  big:\n    cmd: {vllm_receipt_cmd()}\n    uses: {{gpu0: 90GiB}}\n"
        f"  small:\n    cmd: {fake_cmd()}\n    uses: {{gpu0: 12GiB}}\n",
        extra_top="resources: {gpu0: 100GiB}\n",
    )
    assert gw.post("/api/models/load/big", b"")[0] == 200
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/memory"))
            basin = tab.locator('.basin[data-resource="gpu0"]')
            big = basin.locator('.legend li[data-model="big"]')
            big.locator('[data-role="receipt"]').wait_for()  # once the receipt has been read
            free = basin.locator('[data-role="free"]')
            assert int(free.get_attribute("data-free-bytes") or 0) == 10 * GIB
            assert free.inner_text() == "free 10.0 GiB of 100.0 GiB, as the scheduler counts"
            assert big.locator('[data-role="counted"]').inner_text() == "90.0 GiB counted"
            receipt = big.locator('[data-role="receipt"]').inner_text()
            assert receipt == "receipt 83.6 GiB (weights 22.1 GiB + KV 61.5 GiB)"
            source = big.locator('[data-role="source"]').inner_text()
            assert "counted as declared (90.00 GiB)" in source, source
            assert "receipt (83.59 GiB: weights + KV) is within it" in source, source
            band = basin.locator('rect.band[data-model="big"]')
            assert int(band.get_attribute("data-bytes") or 0) == 90 * GIB
            heights = basin.evaluate(
                """(b) => Object.fromEntries([...b.querySelectorAll('g[data-model="big"] rect')]
                  .map((r) => [r.dataset.part || 'band', Number(r.getAttribute('height'))]))"""
            )
            # The receipt's parts inside the counted band, never past it.
            assert heights["weights"] + heights["kv"] < heights["band"]
            fits(tab, size)
            screenshot(tab, f"explain-memory{name(size, scheme)}")

    # What the page calls free is what a start gets: 12 GiB do not fit in it, so big goes.
    assert gw.post("/api/models/load/small", b"")[0] == 200
    assert gw.get_json("/v1/models/big")["last_stop"]["reason"] == "evicted"  # type: ignore[index]


# ---- #8 and #10: a failed swap's phase, one time for one swap, an unload's reason -------------


@ui
def test_a_failed_swap_marks_its_failed_phase_one_time_and_its_unload_says_why(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(f"  chat:\n    cmd: {fake_cmd()}\n  guard:\n    cmd: {GUARD}\n")
    assert chat(gw, "chat").status == 200
    assert chat(gw, "guard").status == 503  # chat was evicted for it
    gw.wait_for(lambda: gw.get_json("/v1/models/chat").get("last_stop", {}).get("outcome"))
    receipt = gw.running()["guard"]["last_swap"]
    assert isinstance(receipt, dict)
    assert receipt["error"]
    stop_at = gw.get_json("/v1/models/chat")["last_stop"]["at"]  # type: ignore[index]
    assert stop_at == receipt["began_at"]  # one swap, one time
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/models"))
            swap = card(tab, "guard").locator('[data-role="swap"]')
            swap.locator("li.failed").wait_for()
            phases = swap.locator("li").evaluate_all(
                """(ls) => ls.filter((l) => l.dataset.part !== 'first byte').map((l) => ({
                  part: l.dataset.part, cls: l.className,
                  ms: l.querySelector('strong').textContent}))"""
            )
            failed = [p for p in phases if "failed" in p["cls"].split()]
            assert len(failed) == 1, phases
            assert failed[0]["part"] in ("start (failed)", "listening → failed"), phases
            slowest = [p for p in phases if "slowest" in p["cls"].split()]
            assert len(slowest) == 1, phases

            def seconds(text: str) -> float:
                value, unit = text.split(" ", 1)
                return float(value) / 1000 if unit == "ms" else float(value)

            # "← most" is the largest of every phase, the failed start among them.
            assert seconds(slowest[0]["ms"]) == max(seconds(p["ms"]) for p in phases), phases
            marker = swap.locator("li.failed").evaluate(
                "(l) => getComputedStyle(l, '::after').content"
            )
            assert "failed here" in marker, marker

            # One time for the swap on both cards, written the same way.
            total = swap.locator('[data-part="total"]').inner_text()
            evicted = card(tab, "chat").locator('[data-role="last-stop"]').inner_text()
            when = re.search(CLOCK, total)
            assert when is not None, total
            assert evicted.startswith(f"stopped: evicted to start guard at {when.group(0)}"), (
                evicted,
                total,
            )
            fits(tab, size)
            screenshot(tab, f"explain-failed-swap{name(size, scheme)}")

    # Unloaded while failed: its stop reason says so, with the failure's code.
    assert gw.post("/api/models/unload/guard", b"")[0] == 200
    stop = gw.get_json("/v1/models/guard").get("last_stop")
    assert isinstance(stop, dict), stop
    assert stop["reason"] == "unloaded"
    assert stop["detail"] == "unloaded after a failed start (utilization_guard)"
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/models"))
            line = card(tab, "guard").locator('[data-role="last-stop"]')
            line.wait_for()
            assert re.fullmatch(
                rf"stopped: unloaded after a failed start \(utilization_guard\) at {CLOCK}",
                line.inner_text(),
            ), line.inner_text()
            fits(tab, size)


# ---- #9: a policy denial and a failed start's eviction in the chat -----------------------------

POLICY = (
    "hooks:\n  on_request: |\n"
    '    deny 403 "no passwords here" when messages[-1].content matches /password/\n'
)


def send(tab: Any, model: str, text: str) -> None:
    tab.locator("#pg-model option", has_text=model).first.wait_for(state="attached")
    tab.locator("#pg-model").select_option(model)
    tab.get_by_label("Message", exact=True).fill(text)
    tab.get_by_role("button", name="Send", exact=True).click()


@ui
def test_the_chat_says_a_denial_is_the_gateways_policy_and_names_what_a_failed_start_evicted(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(
        f"  chat:\n    cmd: {fake_cmd('--llamacpp-errors')}\n  guard:\n    cmd: {GUARD}\n",
        extra_top=POLICY + "failureBackoff: 0\n",
    )
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/playground"))
            send(tab, "chat", "my password is hunter2")
            refusal = tab.locator('#pg-chat .msg[data-refusal="policy"]')
            refusal.wait_for()
            assert "the gateway's policy" in refusal.locator(".role").inner_text()
            assert "not the model's answer" in refusal.locator(".role").inner_text()
            assert refusal.locator(".content").inner_text() == (
                "403 policy_denied: no passwords here"
            )
            assert tab.locator('#pg-chat .msg[data-role="assistant"]').count() == 0
            fits(tab, size)
            screenshot(tab, f"explain-chat-policy{name(size, scheme)}")

            # The same denial, as the gateway recorded it, on the Activity page: its program
            # and line; beside it a backend's own refusal, in its own words.
            embeddings = json.dumps({"model": "chat", "input": "hi"}).encode()
            headers = {"Content-Type": "application/json"}
            assert request(gw, "POST", "/v1/embeddings", embeddings, headers).status == 501
            tab.goto(gw.url("/ui/#/activity"))
            table = tab.locator("#activity-table tbody")
            backend = table.locator('tr[data-status="501"]').first
            backend.wait_for()
            assert backend.locator('[data-role="why"]').inner_text() == (
                "This server does not support embeddings. Start it with `--embeddings`"
            )
            status = backend.locator('[data-role="status"] span').first
            assert status.inner_text() == "501 not_supported_error"
            why = table.locator('tr[data-status="403"]').first.locator('[data-role="why"]')
            assert why.inner_text() == "denied by hooks.on_request line 1: no passwords here"
            fits(tab, size)
            screenshot(tab, f"explain-why-recorded{name(size, scheme)}")
            tab.goto(gw.url("/ui/#/playground"))

            # chat is ready; guard's start evicts it, then fails: the turn says so.
            assert gw.post("/api/models/load/chat", b"")[0] == 200
            tab.get_by_role("button", name="New chat", exact=True).click()
            send(tab, "guard", "hello")
            evicted = tab.locator('#pg-chat .msg[data-role="error"] [data-role="evicted"]')
            evicted.wait_for()
            assert evicted.inner_text() == (
                "Before it failed, the start of guard evicted chat: it is stopped now."
            )
            error = tab.locator('#pg-chat .msg[data-role="error"]').last
            assert "utilization_guard" in error.inner_text()
            assert error.get_attribute("data-refusal") != "policy"
            fits(tab, size)
            screenshot(tab, f"explain-chat-evicted{name(size, scheme)}")


# ---- #5: the load test reports refusals apart and can honour Retry-After -----------------------


def run_load(tab: Any, n: int, c: int) -> str:
    tab.get_by_label("Requests (N)", exact=True).fill(str(n))
    tab.get_by_label("Concurrency (C)", exact=True).fill(str(c))
    tab.get_by_label("Tokens each", exact=True).fill("4")
    tab.get_by_role("button", name="Start", exact=True).click()
    status = tab.locator("#pg-loadtest-status", has_text=re.compile(r"^(finished|stopped):"))
    status.wait_for()
    return str(status.inner_text())


@ui
def test_the_load_test_counts_refusals_apart_and_can_honour_retry_after(
    gateway: StartGateway, browser: Any
) -> None:
    # One request at a time in the whole gateway; each answer (4 tokens at 5 a second) takes
    # about 0.8 s, so of four sent together those that arrive while one is served are refused.
    gw = gateway(
        f"  slow:\n    cmd: {fake_cmd('--tps', '5')}\n",
        extra_top="globalConcurrencyLimit: 1\n",
    )
    assert gw.post("/api/models/load/slow", b"")[0] == 200
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/playground?tab=loadtest"))
            tab.locator("#pg-loadtest-model option", has_text="slow").wait_for(state="attached")
            said = run_load(tab, 4, 4)
            found = re.fullmatch(r"finished: (\d+) ok · (\d+) refused \(429\)", said)
            assert found is not None, said
            ok, refused = int(found.group(1)), int(found.group(2))
            assert ok >= 1, said
            assert refused >= 1, said
            assert ok + refused == 4, said
            result = tab.locator('[data-role="load-result"][data-state="finished"]')
            assert result.locator('dd[data-role="refused"]').inner_text() == f"{refused} (429)"
            assert result.locator('dd[data-role="ok"]').inner_text() == str(ok)
            assert (
                "globalConcurrencyLimit"
                in result.locator('dd[data-role="last-refusal"]').inner_text()
            )

            tab.get_by_label("Honour Retry-After").check()
            said = run_load(tab, 3, 3)
            found = re.fullmatch(r"finished: 3 ok · (\d+) retried after Retry-After", said)
            assert found is not None, said
            assert int(found.group(1)) >= 1
            result = tab.locator('[data-role="load-result"][data-state="finished"]')
            assert result.locator('dd[data-role="refused"]').inner_text() == "0 (429)"
            fits(tab, size)
            screenshot(tab, f"explain-loadtest{name(size, scheme)}")


# ---- #6: the prompt cache of the last swap on the card -------------------------------------------

WORDS = " ".join(f"w{i}" for i in range(200))


def turn(gw: Gateway, model: str, *history: str) -> dict[str, Any]:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(history)
    ]
    body = json.dumps({"model": model, "messages": messages, "max_tokens": 4}).encode()
    reply = request(gw, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    assert reply.status == 200, reply.body
    data = reply.json()
    assert isinstance(data, dict)
    return data


@ui
def test_a_cards_last_swap_shows_what_the_prompt_cache_saved_and_restored(
    gateway: StartGateway, browser: Any
) -> None:
    flags = fake_cmd("--slot-bytes-per-token 1000")
    gw = gateway(
        f"  a:\n    cmd: {flags}\n  b:\n    cmd: {flags}\n",
        extra_top="promptCache: {enabled: true}\n",
    )
    first = turn(gw, "a", WORDS)
    turn(gw, "b", "hello")  # evicts a: its slot is saved
    turn(gw, "a", WORDS, first["choices"][0]["message"]["content"], "and then?")  # restored
    gw.wait_for(lambda: "first_byte_seconds" in gw.running()["a"]["last_swap"])  # type: ignore[operator]
    receipt = gw.running()["a"]["last_swap"]
    assert isinstance(receipt, dict)
    restored = receipt["prompt_cache"]["restored"]
    saved = receipt["prompt_cache"]["saved"]
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/models"))
            block = card(tab, "a").locator('[data-role="prompt-cache"]')
            block.wait_for()
            back = block.locator('li[data-cache="restored"]').inner_text()
            tokens = f"{restored['tokens']:,}"
            assert back.startswith(f"restored: {tokens} tokens in 1 slot ("), back
            assert f"{round(restored['ms'])} ms)" in back, back
            used = receipt["first_request_cached_tokens"]
            assert back.endswith(f"its first request took {used:,} from the cache"), back
            away = block.locator('li[data-cache="saved"][data-model="b"]').inner_text()
            assert away.startswith(f"saved b: {saved[0]['tokens']:,} tokens in 1 slot ("), away
            fits(tab, size)
            screenshot(tab, f"explain-prompt-cache{name(size, scheme)}")


# ---- #11: the smaller findings ----------------------------------------------------------------


@ui
def test_activity_shows_a_failed_streams_outcome_headers_and_processed_tokens(
    gateway: StartGateway, browser: Any
) -> None:
    guard = fake_cmd(
        "--load-delay", "2.0", "--flavor", "vllm", "--print-log", str(GUARD_LOG), "--fail-start"
    )
    gw = gateway(
        f"  tiny:\n    cmd: {fake_cmd('--cached-tokens', '5')}\n  guard:\n    cmd: {guard}\n",
        extra_top="activity: {capture: true}\n",
    )
    words = [{"role": "user", "content": " ".join(f"w{i}" for i in range(40))}]
    for _ in range(2):
        assert chat(gw, "tiny", messages=words).status == 200
    failing_stream(gw, "guard")  # a 200 stream, then an error event
    assert chat(gw, "no-such-model").status == 404
    gw.wait_for(lambda: len(gw.get_json("/api/activity")["data"]) == 4)  # type: ignore[arg-type]
    rows = gw.get_json("/api/activity")["data"]
    assert isinstance(rows, list)
    ok = [r for r in rows if r["model"] == "tiny"]
    processed = sum(r["prompt_tokens"] - r["cached_tokens"] for r in ok)
    assert all(r["cached_tokens"] == 5 for r in ok)
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/activity"))
            bad = tab.locator('#activity-table tbody tr[data-outcome="error"][data-status="200"]')
            bad.wait_for()
            # A refusal's code beside its status, on screen at 390 px too (the error column
            # is not).
            missing = tab.locator(
                '#activity-table tbody tr[data-status="404"] [data-role="status"]'
            )
            assert missing.locator("span").first.inner_text() == "404 model_not_found"
            assert missing.is_visible()
            # and under it why, in its own words (issue 41)
            said = missing.locator('[data-role="why"]').inner_text()
            assert said == "The model `no-such-model` does not exist."
            status = bad.locator('[data-role="status"]')
            assert status.locator("span").first.inner_text() == "utilization_guard (mid-stream)"
            assert "HTTP 200" in (status.get_attribute("title") or "")
            stat = tab.locator('[data-stat="processed"] .stat-value').inner_text()
            assert stat == f"{processed:,}"  # the cached tokens are not processed
            assert tab.locator('[data-stat="cached"] .stat-value').inner_text() == "10"

            # The dialog's headers: a table, one header a row, not a JSON string.
            good = tab.locator('#activity-table tbody tr[data-outcome="ok"]').first
            good.locator("button.row-open").click()
            dialog = tab.locator("dialog#capture")
            table = dialog.locator('dd[data-field="request_headers"] table[data-role="headers"]')
            table.wait_for()
            names = table.locator("th").all_text_contents()
            assert any(n.lower() == "content-type" for n in names), names
            assert "{" not in dialog.locator('dd[data-field="request_headers"]').inner_text()
            fits(tab, size)
            screenshot(tab, f"explain-activity{name(size, scheme)}")
            tab.get_by_role("button", name="Close request details").click()

            tab.goto(gw.url("/ui/#/model?id=guard"))
            own = tab.locator('#model-activity tbody tr[data-outcome="error"] [data-role="status"]')
            own.wait_for()
            assert own.locator("span").first.inner_text() == "utilization_guard (mid-stream)"
            fits(tab, size)


@ui
def test_cards_show_descriptions_say_need_and_never_count_down_to_nothing(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(
        f"  tiny:\n    cmd: {fake_cmd()}\n    description: A small model for quick answers\n"
        f"  guard:\n    cmd: {GUARD}\n",
        extra_top=KEYS + "failureBackoff: 600\n",
    )
    auth = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    body = json.dumps({"model": "guard", "messages": [{"role": "user", "content": "hi"}]})
    assert request(gw, "POST", "/v1/chat/completions", body.encode(), auth).status == 503
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/models"))
            sign_in(tab, READ_KEY)
            desc = card(tab, "tiny").locator('[data-role="description"]')
            desc.wait_for()
            assert desc.inner_text() == "A small model for quick answers"
            assert card(tab, "guard").locator('[data-role="description"]').is_hidden()
            perm = tab.locator("#models-perm")
            assert perm.inner_text().startswith("Load, Unload and Unload all need a key with")

            # The backoff's countdown: under a tenth of a second left it is over, never
            # "for 0.0 s more".
            card(tab, "guard").locator('[data-role="failure"]').wait_for()
            said = tab.evaluate(
                """(left) => {
                  const box = document.querySelector('article.card[data-model="guard"]');
                  const model = models.list.find((m) => m.id === 'guard');
                  const out = [];
                  for (const l of left) {
                    const run = {...models.running.guard, _at: Date.now()};
                    run.last_failure = {...run.last_failure, retry_in: l};
                    updateCard(box, model, run);
                    out.push(box.querySelector('[data-role="fail-retry"]').textContent);
                  }
                  return out;
                }""",
                [0.04, 2.5],
            )
            assert said[0] == "the next request retries the start", said
            assert said[1].startswith("the same answer for 2."), said
            assert "0.0 s" not in " ".join(said)
            fits(tab, size)
            screenshot(tab, f"explain-cards{name(size, scheme)}")

            tab.goto(gw.url("/ui/#/model?id=tiny"))
            tab.locator('#model-card [data-role="details"]').wait_for()
            # Its own page lists the description once, in its details.
            mentions = tab.locator("#model-card").get_by_text("A small model for quick answers")
            assert mentions.count() == 1


@ui
def test_the_network_legend_says_its_values_in_the_axis_unit(
    gateway: StartGateway, browser: Any
) -> None:
    """The gateway's own samples, with their network rates set to figures the test chooses (a
    test reaches loopback only, which the chart leaves out): 300 B/s received, 1.5 KiB/s sent."""
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n", extra_top="performance: {every: 1s}\n")
    gw.wait_for(lambda: bool(gw.get_json("/api/performance").get("sys_stats")))

    def rates(route: Any) -> None:
        answer = route.fetch()
        data = answer.json()
        for sample in data.get("sys_stats") or []:
            sample.update(net_recv_bps=300, net_sent_bps=1536)
        route.fulfill(response=answer, json=data)

    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.route(re.compile(r".*/api/performance.*"), rates)
            tab.goto(gw.url("/ui/#/performance"))
            network = tab.locator('[data-chart="network"]')
            network.locator('polyline[data-series="sent"]').wait_for(state="attached")
            axis = network.locator("text.axis-label").all_text_contents()
            units = {t.split(" ", 1)[1] for t in axis if re.fullmatch(r"[\d.]+ \S+", t)}
            assert units == {"KiB/s"}, axis
            legend = network.locator('[data-role="value"]').all_text_contents()
            assert legend == ["0.3 KiB/s", "1.5 KiB/s"], legend
            fits(tab, size)
