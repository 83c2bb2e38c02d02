"""Which pod holds a GPU: kubelet PodResources allocations, pod names from the kubelet's log directories or the
Kubernetes API, pod labels, and per-pod shares of shared GPUs from the driver's processes and their cgroups."""
