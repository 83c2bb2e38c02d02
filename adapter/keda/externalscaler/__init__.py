"""Generated stubs for KEDA's external scaler contract (regenerate with scripts/gen-grpc-stubs.sh)."""
