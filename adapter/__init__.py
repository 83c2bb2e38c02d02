"""gpu-autoscaler adapter: the Kubernetes custom, external and resource metrics APIs, answered from Prometheus."""
