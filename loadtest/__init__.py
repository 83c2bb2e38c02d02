"""gpu-autoscaler load testing (``gpu-loadtest``): load generation, the closed-loop scaling demo that runs the
exporter, Prometheus, the adapter and inference replicas locally, and the HPA algorithm (``loadtest.hpa``).

Packages by layer, each importing only from those below it:

* ``clock``: the demo's compressed clock, every real <-> demo time conversion;
* ``loadgen/``: load generation: rate profiles, the open-loop generator, the closed loop of virtual users that
  runs a Taurus file (``taurus/``);
* ``standins/``: local stand-ins for a cluster: inference replicas, a Deployment of them, the gateway, the kubelet's
  PodResources API, kube-state-metrics, Prometheus, the metrics path, the child-process registry;
* ``nodes/``: GPU nodes as pure models (the cluster, Karpenter, Cluster Autoscaler) and the layer that runs them
  under the demo's replicas;
* ``hpa/``: the HPA controller: the pure model, its loop over the metrics APIs, watching a real one;
* ``measure/``: the timeline, the summary, time to capacity, the plot, Prometheus range data, live progress;
* ``scenarios/``: the demo and its settings, ``run`` against a real endpoint, the comparisons;
* ``cli/``: the command line.
"""
