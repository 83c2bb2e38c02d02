"""Pod labels and UID as Prometheus labels: dcgm-exporter's allowlist and sanitizing rules, table-tested.

Cases named ``kubernetes_label_filter_test.go:<Test>/<case>`` are dcgm-exporter's own
(internal/pkg/transformation/kubernetes_label_filter_test.go), inputs and expected results unchanged.
"""

from __future__ import annotations

import logging

import pytest

from exporter.pods.metadata_labels import (
    PodLabelPolicy,
    compile_allowlist,
    sanitize_label_name,
    split_patterns,
)

pytestmark = pytest.mark.unit

UPSTREAM = "kubernetes_label_filter_test.go:"
INCLUDE = UPSTREAM + "TestShouldIncludeLabel/"


@pytest.mark.parametrize(("patterns", "key", "included"), [
    pytest.param([], "any-label", True, id=INCLUDE + "NoFiltering_AllLabelsIncluded"),
    pytest.param([], "app.kubernetes.io/name", True, id=INCLUDE + "NoFiltering_ComplexLabel"),
    pytest.param(["^app$"], "app", True, id=INCLUDE + "ExactMatch_Included"),
    pytest.param(["^app$"], "tier", False, id=INCLUDE + "ExactMatch_Excluded"),
    pytest.param(["^app\\..*"], "app.kubernetes.io/name", True, id=INCLUDE + "PrefixMatch_Included"),
    pytest.param(["^app\\..*"], "tier", False, id=INCLUDE + "PrefixMatch_Excluded"),
    pytest.param(["^app$", "^tier$"], "app", True, id=INCLUDE + "MultiplePatterns_FirstMatches"),
    pytest.param(["^app$", "^tier$"], "tier", True, id=INCLUDE + "MultiplePatterns_SecondMatches"),
    pytest.param(["^app$", "^tier$"], "environment", False,
                 id=INCLUDE + "MultiplePatterns_NoneMatch"),
    pytest.param(["^(app|tier|version)$"], "app", True, id=INCLUDE + "RegexAlternation_FirstOption"),
    pytest.param(["^(app|tier|version)$"], "tier", True,
                 id=INCLUDE + "RegexAlternation_SecondOption"),
    pytest.param(["^(app|tier|version)$"], "environment", False,
                 id=INCLUDE + "RegexAlternation_NoMatch"),
    pytest.param(["^app\\.kubernetes\\.io/.*"], "app.kubernetes.io/name", True,
                 id=INCLUDE + "K8sStandardLabels_AppName"),
    pytest.param(["^app\\.kubernetes\\.io/.*"], "app.kubernetes.io/version", True,
                 id=INCLUDE + "K8sStandardLabels_AppVersion"),
    pytest.param(["^app\\.kubernetes\\.io/.*"], "custom-label", False,
                 id=INCLUDE + "K8sStandardLabels_NonAppLabel"),
    pytest.param(["^app$", "^tier$"], "build-id", False,
                 id=INCLUDE + "FilterHighCardinality_BuildID"),
    pytest.param(["^app$", "^tier$"], "pod-template-hash", False,
                 id=INCLUDE + "FilterHighCardinality_PodTemplateHash"),
    # Go's MatchString searches: an unanchored pattern matches anywhere in the key
    pytest.param(["tier"], "x-tier-y", True, id="unanchored-pattern-searches"),
])
def test_allowlist(patterns: list[str], key: str, included: bool) -> None:
    policy = PodLabelPolicy(labels=True, allowlist=compile_allowlist(patterns))
    assert (sanitize_label_name(key) in policy.extra_labels("", {key: "v"})) is included


@pytest.mark.parametrize(("patterns", "pod_labels", "expected"), [
    pytest.param([], {"app": "nginx", "tier": "frontend", "app.kubernetes.io/name": "my-app",
                      "app.kubernetes.io/version": "1.0.0"},
                 {"app": "nginx", "tier": "frontend", "app_kubernetes_io_name": "my-app",
                  "app_kubernetes_io_version": "1.0.0"},
                 id=UPSTREAM + "TestGetPodMetadata_WithLabelFiltering/NoFiltering_AllLabelsIncluded"),
    pytest.param(["^app$"], {"app": "nginx", "tier": "frontend"}, {"app": "nginx"},
                 id=UPSTREAM + "TestGetPodMetadata_WithLabelFiltering/FilterByExactMatch"),
    pytest.param(["^app\\.kubernetes\\.io/.*"],
                 {"app": "nginx", "tier": "frontend", "app.kubernetes.io/name": "my-app",
                  "app.kubernetes.io/version": "1.0.0", "build-id": "abc123"},
                 {"app_kubernetes_io_name": "my-app", "app_kubernetes_io_version": "1.0.0"},
                 id=UPSTREAM + "TestGetPodMetadata_WithLabelFiltering/FilterByPrefix"),
    pytest.param(["^app$", "^tier$", "^environment$"],
                 {"app": "nginx", "tier": "frontend", "environment": "prod", "build-id": "abc123",
                  "pod-template-hash": "xyz789"},
                 {"app": "nginx", "tier": "frontend", "environment": "prod"},
                 id=UPSTREAM + "TestGetPodMetadata_WithLabelFiltering/FilterMultiplePatterns"),
    pytest.param(["^app\\.kubernetes\\.io/.*", "^version$"],
                 {"app.kubernetes.io/name": "my-app", "app.kubernetes.io/component": "backend",
                  "app.kubernetes.io/version": "2.0.0", "version": "v2", "build-id": "xyz",
                  "controller-revision-hash": "abc"},
                 {"app_kubernetes_io_name": "my-app", "app_kubernetes_io_component": "backend",
                  "app_kubernetes_io_version": "2.0.0", "version": "v2"},
                 id=UPSTREAM + "TestGetPodMetadata_WithLabelFiltering/FilterCommonK8sLabels"),
    pytest.param(["^nonexistent$"], {"app": "nginx", "tier": "frontend"}, {},
                 id=UPSTREAM + "TestGetPodMetadata_WithLabelFiltering/NoMatchingLabels"),
    # kubernetes_test.go TestProcessPodMapper_WithLabels: "invalid.label/key" is exported sanitized
    pytest.param([], {"valid_label_key": "label-value", "invalid.label/key": "another-value"},
                 {"valid_label_key": "label-value", "invalid_label_key": "another-value"},
                 id="kubernetes_test.go:TestProcessPodMapper_WithLabels"),
])
def test_pod_labels_filtered_and_sanitized(patterns: list[str], pod_labels: dict[str, str],
                                           expected: dict[str, str]) -> None:
    policy = PodLabelPolicy(labels=True, allowlist=compile_allowlist(patterns))
    assert policy.extra_labels("uid-1", pod_labels) == expected


@pytest.mark.parametrize(("patterns", "valid"), [
    pytest.param(["^app$"], 1, id=UPSTREAM + "TestNewLabelFilterCache/ValidSinglePattern"),
    pytest.param(["^app$", "^tier$", "^env-.*"], 3, id=UPSTREAM + "TestNewLabelFilterCache/ValidMultiplePatterns"),
    pytest.param(["[invalid"], 0, id=UPSTREAM + "TestNewLabelFilterCache/InvalidPattern"),
    pytest.param(["^app$", "[invalid", "^tier$"], 2, id=UPSTREAM + "TestNewLabelFilterCache/MixedValidInvalid"),
    pytest.param(["^app\\.kubernetes\\.io/.*", "^(tier|environment)$"], 2,
                 id=UPSTREAM + "TestNewLabelFilterCache/ComplexRegexPatterns"),
    pytest.param([], 0, id=UPSTREAM + "TestNewLabelFilterCache/EmptyPatterns"),
])
def test_invalid_patterns_are_skipped_with_a_warning(patterns: list[str], valid: int,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        compiled = compile_allowlist(patterns)
    assert len(compiled) == valid
    warned = [r.getMessage() for r in caplog.records]
    assert sum("[invalid" in m for m in warned) == patterns.count("[invalid")
    if patterns and not valid:  # all invalid: no filtering, as dcgm-exporter does, and said so
        assert any("every pod label is exported" in m for m in warned)
        assert PodLabelPolicy(labels=True, allowlist=compiled).extra_labels("", {"a": "1", "b": "2"}) == {
            "a": "1", "b": "2"}


def test_patterns_split_on_commas_and_repeats_like_a_string_slice_flag() -> None:
    assert split_patterns(["^app$,^tier$", "^env-.*"]) == ["^app$", "^tier$", "^env-.*"]
    assert split_patterns([]) == []


def test_uid_label_and_collisions() -> None:
    both = PodLabelPolicy(labels=True, uid=True)
    labels = {"app": "llm", "pod": "spoof", "namespace": "spoof", "container": "spoof", "pod_uid": "spoof",
              "a.b": "first", "a/b": "second", "9lives": "cat", "__meta": "x"}
    assert both.extra_labels("uid-1", labels) == {
        "pod_uid": "uid-1", "app": "llm", "a_b": "first", "_9lives": "cat"}
    assert PodLabelPolicy(uid=True).extra_labels("uid-1", labels) == {"pod_uid": "uid-1"}
    assert PodLabelPolicy(uid=True).extra_labels("", labels) == {}  # pod not known yet: no empty pod_uid
    assert PodLabelPolicy().enabled is False
