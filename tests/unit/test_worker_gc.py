"""The collector's threshold while workers run in one process (`ingest.gc_threshold.Collector`)."""

from __future__ import annotations

import gc

from ingest.gc_threshold import GC_GEN0, Collector


def test_the_last_worker_to_stop_restores_the_threshold_the_first_found() -> None:
    before = gc.get_threshold()
    try:
        Collector.enter()
        assert gc.get_threshold() == (GC_GEN0, *before[1:])
        Collector.enter()  # a second worker in the same process
        Collector.leave()  # the first one stops: the second still runs
        assert gc.get_threshold()[0] == GC_GEN0
        Collector.leave()
        assert gc.get_threshold() == before
    finally:
        gc.set_threshold(*before)
