"""Kubelet PodResources API: generated gRPC stubs (``v1``) and a small client."""
