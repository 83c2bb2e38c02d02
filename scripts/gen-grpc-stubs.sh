#!/usr/bin/env bash
# Regenerate the gRPC Python stubs (*_pb2.py, *_pb2_grpc.py) beside each of the project's .proto files: the kubelet
# PodResources v1 API (the exporter's pod mapping) and KEDA's external scaler contract (the adapter's KEDA scaler).
# No .pyi is emitted: ruff excludes only the *_pb2*.py files, and protoc's stub style is not ruff clean.
# Needs grpcio-tools at pyproject's floor (1.85.1; '.[dev]' installs the newest): the stubs refuse a grpcio older
# than the grpcio-tools that wrote them (GRPC_GENERATED_VERSION), and make test-lowest runs grpcio 1.85.1.
# Run from anywhere; paths resolve to the repo root.
set -euo pipefail

cd "$(dirname "$0")/.."
for proto in exporter/pods/podresources/v1/api.proto adapter/keda/externalscaler/externalscaler.proto; do
  python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. "$proto"
  echo "generated ${proto%.proto}_pb2{,_grpc}.py"
done
