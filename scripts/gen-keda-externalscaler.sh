#!/usr/bin/env bash
# Regenerate the KEDA external scaler Python stubs from adapter/keda/externalscaler/externalscaler.proto.
# No .pyi is emitted: ruff excludes only externalscaler_pb2*.py, and protoc's stub style is not ruff clean.
# Needs grpcio-tools (pip install -e '.[dev]'). Run from anywhere; paths resolve to the repo root.
set -euo pipefail

cd "$(dirname "$0")/.."
python -m grpc_tools.protoc -I. \
  --python_out=. --grpc_python_out=. \
  adapter/keda/externalscaler/externalscaler.proto
echo "generated adapter/keda/externalscaler/externalscaler_pb2{,_grpc}.py"
