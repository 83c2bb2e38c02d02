"""Shared fixtures: a real Prometheus, a real PodResources gRPC server, a binding-level fake NVML."""

pytest_plugins = ["tests.support.prometheus", "tests.podresources_server", "tests.support.fake_kube"]
