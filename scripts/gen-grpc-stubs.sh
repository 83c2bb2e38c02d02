#!/usr/bin/env bash
# Regenerate the gRPC Python stubs (*_pb2.py, *_pb2_grpc.py) and the messages' type stubs (*_pb2.pyi, which mypy
# reads in place of the *_pb2.py that builds its classes at run time) beside each of the project's .proto files: the
# kubelet PodResources v1 API (the exporter's pod mapping) and KEDA's external scaler contract (the adapter's KEDA
# scaler). ruff skips all of them (protoc's style is not ruff clean); mypy skips the *_pb2_grpc.py bodies.
# Needs grpcio-tools at pyproject's floor (1.85.1; '.[dev]' installs the newest): the stubs refuse a grpcio older
# than the grpcio-tools that wrote them (GRPC_GENERATED_VERSION), and make test-lowest runs grpcio 1.85.1.
# Run from anywhere; paths resolve to the repo root.
set -euo pipefail

cd "$(dirname "$0")/.."
for proto in exporter/pods/podresources/v1/api.proto adapter/keda/externalscaler/externalscaler.proto; do
  python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. "$proto"
  echo "generated ${proto%.proto}_pb2{.py,.pyi,_grpc.py}"
done
