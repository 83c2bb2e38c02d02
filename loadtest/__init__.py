"""gpu-autoscaler loadtest package."""
