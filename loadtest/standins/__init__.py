"""Local stand-ins for a cluster, as real processes and servers on this machine: the inference replicas (and the
minimal HTTP/1.1 they speak), a Deployment of them, the buffering gateway in front, the kubelet's PodResources API,
kube-state-metrics' owner series, Prometheus, the metrics path (exporter, Prometheus, adapter) and the registry that
stops every child process."""
