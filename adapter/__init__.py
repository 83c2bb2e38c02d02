"""gpu-autoscaler adapter package."""
