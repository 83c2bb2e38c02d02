"""Generated stubs for KEDA's external scaler contract (regenerate with scripts/gen-keda-externalscaler.sh)."""
