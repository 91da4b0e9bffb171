"""Test-suite layout: the seeded fault campaigns are split between the default run and ``make test-campaign``.

Each protocol's ``test_campaign`` is parametrized over its CI seeds (200 and more). The first
:data:`DEFAULT_CAMPAIGN_SEEDS` of them run in the default suite (``make test``), so every protocol's campaign is
exercised on every change within the default run's time budget; the rest carry the ``campaign`` marker and run with
``make test-campaign``, which CI (``.ci/run``) runs after the default suite, so every seed still runs in CI.
"""

from __future__ import annotations

import pytest

DEFAULT_CAMPAIGN_SEEDS = 25


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.originalname != "test_campaign" or not item.module.__name__.endswith("_campaign"):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        first = params.get("seed", params.get("first"))
        if isinstance(first, int) and first >= DEFAULT_CAMPAIGN_SEEDS:
            item.add_marker(pytest.mark.campaign)


@pytest.fixture(autouse=True)
def _sigint_restored():
    """Every test starts with the SIGINT handling the session had and leaves it so. A library a test drives (a
    worker pool, a cluster) can set SIGINT to ignored in this process; every process started afterwards inherits
    the ignore across exec, and a real run that is to be stopped by Ctrl-C then runs on (seen: the SIGINT CLI test
    hanging 60 s in full runs only; reproduced by ignoring SIGINT before it)."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before and before is not None:
        signal.signal(signal.SIGINT, before)
