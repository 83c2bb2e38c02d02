#!/usr/bin/env bash
# Regenerate the kubelet PodResources v1 Python stubs from exporter/podresources/v1/api.proto.
# No .pyi is emitted: ruff excludes only api_pb2*.py, and protoc's stub style is not ruff clean.
# Needs grpcio-tools (pip install -e '.[dev]'). Run from anywhere; paths resolve to the repo root.
set -euo pipefail

cd "$(dirname "$0")/.."
python -m grpc_tools.protoc -I. \
  --python_out=. --grpc_python_out=. \
  exporter/podresources/v1/api.proto
echo "generated exporter/podresources/v1/api_pb2{,_grpc}.py"
