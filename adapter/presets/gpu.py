"""Built-in GPU rules for dcgm-exporter metrics (ours or NVIDIA's), in prometheus-adapter's format.

Served when the adapter runs without ``--config``; a rules file pulls them in with ``include: [gpu-presets]``
(after its own rules, so its own rules win). Each per-pod metric has two rules, one per way Prometheus can
store the exporter's pod labels:

* ``honorLabels: true`` on the ServiceMonitor: the series carry the workload's ``namespace``/``pod``;
* ``honorLabels: false`` (the default): they are renamed ``exported_namespace``/``exported_pod``, while
  ``namespace``/``pod`` name the exporter pod.

Both rules serve the same API metric; the query layer asks both and takes, per pod, the first rule that has
a value, so either scrape setup works without editing rules. Values are averaged over a pod's GPUs (a pod
with two GPUs at 50 % and 100 % reports 75), which is what a utilisation target means to an HPA.

On shared GPUs (time-slicing, MPS) the device-level DCGM series carry no pod labels; the exporter's per-pod
families ``gpu_pod_sm_utilization_ratio`` and ``gpu_pod_framebuffer_used_bytes`` do, one series per container
holding a share. Their rules first add up a pod's containers on each GPU, then average over its GPUs, so a
time-sliced Deployment scales on its own share (``pods/*/gpu_pod_sm_utilization_ratio``).
"""

from __future__ import annotations

from functools import cache

from adapter.rules.config import RulesConfig, parse_document
from adapter.rules.resources import BUILTIN, ResourceTable

GPU_PRESETS = "gpu-presets"

GPU_PRESETS_YAML = """\
# Built-in GPU rules (gpu-presets). Units: GPU_UTIL percent, FB_USED/FB_FREE MiB, POWER_USAGE W,
# PROF_GR_ENGINE_ACTIVE ratio 0-1 (the signal that also works on MIG, where GPU_UTIL is not reported),
# gpu_pod_sm_utilization_ratio 0-1 and gpu_pod_framebuffer_used_bytes bytes (a pod's own share of a shared GPU).
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{exported_namespace!="",exported_pod!=""}'
  resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_FB_USED{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_FB_USED{exported_namespace!="",exported_pod!=""}'
  resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_FB_FREE{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_FB_FREE{exported_namespace!="",exported_pod!=""}'
  resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_POWER_USAGE{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_DEV_POWER_USAGE{exported_namespace!="",exported_pod!=""}'
  resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{exported_namespace!="",exported_pod!=""}'
  resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'gpu_pod_sm_utilization_ratio{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (sum by (<<.GroupBy>>, UUID, GPU_I_ID) (<<.Series>>{<<.LabelMatchers>>}))'
- seriesQuery: 'gpu_pod_sm_utilization_ratio{exported_namespace!="",exported_pod!=""}'
  resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (sum by (<<.GroupBy>>, UUID, GPU_I_ID) (<<.Series>>{<<.LabelMatchers>>}))'
- seriesQuery: 'gpu_pod_framebuffer_used_bytes{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (sum by (<<.GroupBy>>, UUID, GPU_I_ID) (<<.Series>>{<<.LabelMatchers>>}))'
- seriesQuery: 'gpu_pod_framebuffer_used_bytes{exported_namespace!="",exported_pod!=""}'
  resources: {overrides: {exported_namespace: {resource: namespace}, exported_pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (sum by (<<.GroupBy>>, UUID, GPU_I_ID) (<<.Series>>{<<.LabelMatchers>>}))'
# Object metric for HPAs written like the EKS GPU guide: type Object, describedObject Service dcgm-exporter,
# metric DCGM_FI_DEV_GPU_UTIL_AVG = average utilisation of every GPU scraped through that Service.
# No label is mapped to namespaces on purpose: with honorLabels true, `namespace` on an allocated GPU's
# series is the workload's, not the exporter's. The metric is registered for the (namespaced) services
# resource and matched by Service name alone, so an HPA in any namespace can name the exporter's Service.
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{service!=""}'
  resources: {overrides: {service: {resource: service}}}
  name: {matches: '^DCGM_FI_DEV_GPU_UTIL$', as: DCGM_FI_DEV_GPU_UTIL_AVG}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
"""


def gpu_presets(table: ResourceTable = BUILTIN) -> RulesConfig:
    """The presets, parsed with the same loader as a rules file (source name ``gpu-presets``), once per table."""
    return _parsed(table)


@cache
def _parsed(table: ResourceTable) -> RulesConfig:
    return parse_document(GPU_PRESETS_YAML, GPU_PRESETS, table)
