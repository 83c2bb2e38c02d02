"""gpu-autoscaler load testing: the HPA algorithm (``loadtest.hpa``), an open-loop load generator, and the closed-loop
scaling demo (``gpu-loadtest demo``) that runs the exporter, Prometheus, the adapter and inference replicas locally."""
