"""The failure limiter on a fake clock (no sleeps): waits grow per client network (IPv4 /32,
IPv6 /64) and for everyone, failures age out, episodes are logged once with counts, and memory
stays bounded under an address spray. That a valid key is never slowed: test_auth.py."""

from __future__ import annotations

import logging
from itertools import pairwise

import pytest

from modelswap.http.tracking.clients import client_network
from modelswap.http.tracking.failure_limiter import (
    FAILURE_WINDOW,
    FIRST_DELAY,
    GLOBAL_FREE,
    MAX_DELAY,
    MAX_NETWORKS,
    NETWORK_FREE,
    FailureLimiter,
    failure_wait,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def limiter(clock: FakeClock) -> FailureLimiter:
    return FailureLimiter(clock)


def messages(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    return [m for r in caplog.records if needle in (m := r.getMessage())]


@pytest.mark.parametrize(
    ("address", "network"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::1", "::/64"),
        (None, "unknown"),
        ("", "unknown"),
        ("/run/modelswap.sock", "/run/modelswap.sock"),
    ],
)
def test_client_network(address: str | None, network: str) -> None:
    assert client_network(address) == network


def test_the_wait_doubles_from_the_first_and_is_capped() -> None:
    assert failure_wait(0) == failure_wait(-3) == 0.0
    assert failure_wait(1) == FIRST_DELAY
    assert failure_wait(2) == 2 * FIRST_DELAY
    assert failure_wait(100) == MAX_DELAY
    assert failure_wait(11, per_doubling=10) == 2 * FIRST_DELAY


def test_a_networks_failures_past_the_free_ones_wait_longer_and_longer(
    limiter: FailureLimiter, clock: FakeClock
) -> None:
    waits = []
    for _ in range(NETWORK_FREE + 10):
        waits.append(limiter.failed("10.0.0.1"))
        clock.now += 0.5
    assert waits[:NETWORK_FREE] == [0.0] * NETWORK_FREE
    slowed = waits[NETWORK_FREE:]
    assert slowed[0] == FIRST_DELAY
    assert all(later >= earlier for earlier, later in pairwise(slowed))
    assert slowed[-1] == MAX_DELAY
    assert limiter.failed("10.0.0.2") == 0.0  # another network is not slowed


def test_failures_older_than_the_window_no_longer_count(
    limiter: FailureLimiter, clock: FakeClock
) -> None:
    for _ in range(NETWORK_FREE + 5):
        limiter.failed("10.0.0.3")
    assert limiter.failed("10.0.0.3") > 0
    clock.now += FAILURE_WINDOW + 1
    assert limiter.failed("10.0.0.3") == 0.0


def test_failures_spread_wider_than_the_window_never_wait(
    limiter: FailureLimiter, clock: FakeClock
) -> None:
    for _ in range(100):
        assert limiter.failed("10.0.0.4") == 0.0
        clock.now += FAILURE_WINDOW / (NETWORK_FREE - 1) + 0.1


def test_an_ipv6_client_counts_per_64(limiter: FailureLimiter) -> None:
    for n in range(NETWORK_FREE):  # a different address of one /64 each time
        assert limiter.failed(f"2001:db8:1:2::{n + 1:x}") == 0.0
    assert limiter.failed("2001:db8:1:2:ffff:ffff:ffff:1") > 0  # the same /64
    assert limiter.failed("2001:db8:1:3::1") == 0.0  # the next /64
    for _ in range(NETWORK_FREE):
        limiter.failed("192.0.2.9")
    assert limiter.failed("::ffff:192.0.2.9") > 0  # IPv4-mapped: that IPv4 address


def test_a_guesser_spread_over_60_networks_is_slowed_and_logged_once(
    limiter: FailureLimiter, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelswap")
    waits = []
    for n in range(60):  # one failure each: no network is over its own budget
        waits.append(limiter.failed(f"10.1.0.{n + 1}"))
        clock.now += 0.1
    assert waits[:GLOBAL_FREE] == [0.0] * GLOBAL_FREE
    slowed = waits[GLOBAL_FREE:]
    assert all(wait > 0 for wait in slowed)
    assert all(later >= earlier for earlier, later in pairwise(slowed))
    assert limiter.failed("10.9.9.9") >= slowed[-1]  # a fresh network waits as well
    began = messages(caplog, "networks within")
    assert began == [
        f"authentication: {GLOBAL_FREE + 1} failed attempts from {GLOBAL_FREE + 1} networks "
        f"within {FAILURE_WINDOW:.0f} s; every failed attempt now waits before its 401 "
        f"(up to {MAX_DELAY:.0f} s; valid keys are not slowed)"
    ]
    assert not messages(caplog, "failed attempts from 10.")  # no network on its own

    clock.now += FAILURE_WINDOW + 1  # quiet for a window: back under the budget
    assert limiter.failed("10.1.0.1") == 0.0
    ended = messages(caplog, "back under")
    assert len(ended) == 1
    assert "the episode had 61 over 1 s" in ended[0]  # 51 when it began, 10 more


def test_a_network_episode_is_logged_when_it_begins_and_when_it_ends(
    limiter: FailureLimiter, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelswap")
    for _ in range(NETWORK_FREE + 30):
        limiter.failed("10.0.0.5")
        clock.now += 0.2
    assert messages(caplog, "failed attempts from 10.0.0.5") == [
        f"authentication: {NETWORK_FREE + 1} failed attempts from 10.0.0.5 within "
        f"{FAILURE_WINDOW:.0f} s; its failed attempts now wait before their 401 "
        f"(up to {MAX_DELAY:.0f} s; valid keys are not slowed)"
    ]
    clock.now += FAILURE_WINDOW + 1
    limiter.failed("10.0.0.6")  # any later failure notices the quiet one
    assert messages(caplog, "no failed attempt from 10.0.0.5") == [
        f"authentication: no failed attempt from 10.0.0.5 for {FAILURE_WINDOW:.0f} s; "
        f"its episode had {NETWORK_FREE + 30} over 8 s"
    ]
    assert limiter.remembered_networks == 1


def test_memory_stays_bounded_under_an_address_spray(
    limiter: FailureLimiter, clock: FakeClock
) -> None:
    for n in range(MAX_NETWORKS + 5_000):  # within one window: the quietest are dropped
        limiter.failed(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}")
        clock.now += 0.001
    assert limiter.remembered_networks == MAX_NETWORKS
    assert limiter.failed("10.200.0.1") == MAX_DELAY  # the spray itself is being slowed
    for n in range(400):  # 200 s more, a failure every half second
        limiter.failed(f"10.201.{n // 256}.{n % 256}")
        clock.now += 0.5
    assert limiter.remembered_networks <= 2 * FAILURE_WINDOW + 1
    assert len(limiter._seconds) <= FAILURE_WINDOW + 1  # one counter per second of the window
