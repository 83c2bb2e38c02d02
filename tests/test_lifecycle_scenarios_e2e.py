"""The lifecycle goals (issue 40, docs/adapter.md "Lifecycle"), asserted on two real adapter replicas behind a
Service stand-in under an HPA fleet and other clients asking discovery twenty times a second, each on a new
connection (tests/support/lifecycle_scenarios.py): (a) a rolling update fails no request; (b) SIGKILL of a replica
fails only what it had in flight (on the connections open to it) or what the Service sent it before its removal
reached kube-proxy, and every HPA's next sync succeeds; (c) after a node's exporter is back, no HPA sees one of that
node's pods missing for longer than one scrape interval. The setup is small and the controller's pace compressed
(a 4 s sync period, 1 s propagation, 3 s shutdown delay, 2 s scrapes) so the suite stays fast; bench/lifecycle.py
runs the same scenarios at the chart's settings and the controller's 15 s and prints the figures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.lifecycle_scenarios import Cluster, Settings, cluster, kill_one, restart_exporter, rolling_update

pytestmark = pytest.mark.e2e

SETTINGS = Settings(workloads=20, sync_period_s=4, propagation_s=1, shutdown_delay_s=3, drain_timeout_s=5,
                    scrape_interval_s=2)


@pytest.fixture(scope="module")
def running() -> Iterator[Cluster]:
    with cluster(SETTINGS) as made:
        yield made


def test_a_rolling_update_fails_no_request(running: Cluster) -> None:
    report = rolling_update(running)
    assert report.failed == [] and report.others_failed == [], report.summary()
    assert report.notes["exit codes"] == "0,0"
    answered = {a.round for a in report.asked if a.hpa}
    assert len(answered) >= 3  # rounds before, during and after the update were all answered


def test_sigkill_fails_only_what_the_replica_had_or_was_sent_and_every_next_sync_succeeds(running: Cluster) -> None:
    report = kill_one(running)
    notes = report.notes
    # What it had (every connection open to it at the kill: one request each at most, those handshaking included)
    # and what the Service sent it before its removal propagated.
    bound = int(notes["connections open to it at the kill"]) + int(notes["connections the Service sent it after "
                                                                          "the kill (refused)"])
    failed = report.failed + report.others_failed
    assert len(failed) <= bound, report.summary()
    assert notes["failures later than the propagation delay"] == 0, report.summary()
    assert all(a.status is None for a in failed), failed  # never an error answer from the survivor
    assert report.next_sync_after_each_failure_succeeded(), report.failed


def test_after_the_exporter_is_back_no_pod_is_missing_longer_than_one_scrape_interval(running: Cluster) -> None:
    report = restart_exporter(running)
    assert report.failed == [], report.summary()
    assert report.notes["pods missing, as the adapter answered (s)"] > 0  # the restart was seen at all
    # One scrape interval, plus the scrape and the query themselves.
    assert report.notes["latest missing pod after the exporter was back (s)"] <= SETTINGS.scrape_interval_s + 0.5, \
        report.summary()
