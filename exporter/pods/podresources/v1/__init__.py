"""Generated stubs for the kubelet PodResources v1 API (regenerate with scripts/gen-grpc-stubs.sh)."""
