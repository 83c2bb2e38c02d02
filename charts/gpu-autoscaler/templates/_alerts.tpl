{{/*
Alerts for the autoscaling path (prometheusRule.alerts), one group. Each is shaped as the kubernetes-mixin alert
it mirrors (kubernetes-monitoring/kubernetes-mixin alerts/apps_alerts.libsonnet and kube_apiserver.libsonnet),
narrowed to what this chart serves: GPU pods, HPAs that read a custom or external metric (a metric other than the
cpu/memory Resource metrics; kube-state-metrics' kube_horizontalpodautoscaler_spec_target_metric names it) and the
adapter's own APIServices. Series as kube-state-metrics (internal/store/pod.go, horizontalpodautoscaler.go) and
the kube-apiserver's aggregator (kube-aggregator pkg/controllers/status/metrics) export them.
*/}}
{{- define "gpu-autoscaler.autoscalingAlerts" -}}
{{- $p := .Values.prometheusRule -}}
{{- $hpa := "namespace, horizontalpodautoscaler" -}}
{{- $custom := printf "and on (%s) kube_horizontalpodautoscaler_spec_target_metric{metric_name!~\"cpu|memory\"}" $hpa -}}
{{- $apis := list -}}
{{- range include "gpu-autoscaler.adapter.apiServices" . | fromJsonArray }}{{ $apis = append $apis (printf "%s.%s" (index . 1) (index . 0)) }}{{ end -}}
- name: gpu-autoscaler.autoscaling
  rules:
  # kubernetes-mixin's KubePodNotReady (phase Pending, Job pods and scheduling-gated pods left out), for pods that
  # request GPUs.
  - alert: GPUPodPending
    expr: |-
      max by (namespace, pod) (kube_pod_status_phase{phase="Pending"} == 1)
      and on (namespace, pod) kube_pod_container_resource_requests{resource=~"nvidia_com_.+"} > 0
      and on (namespace, pod) kube_pod_owner{owner_kind!="Job"}
      unless on (namespace, pod) kube_pod_status_reason{reason="SchedulingGated"} == 1
    for: {{ $p.gpuPodPendingFor }}
    labels:
      severity: warning
    annotations:
      summary: GPU pod {{`{{ $labels.namespace }}/{{ $labels.pod }}`}} has been Pending for {{ $p.gpuPodPendingFor }}
      description: >-
        Pod {{`{{ $labels.namespace }}/{{ $labels.pod }}`}} requests GPUs and has been Pending for longer than
        {{ $p.gpuPodPendingFor }}: no node with a free GPU came (kubectl describe pod: FailedScheduling; kubectl get
        nodeclaims, or Cluster Autoscaler's status ConfigMap), or its image is still being pulled. A headroom
        placeholder Pending this long means the autoscaler cannot add its node (NodePool limits, quotas, instance
        availability). A replica Pending with a nominated node (kubectl get pod -o
        jsonpath='{.status.nominatedNodeName}') whose node holds no terminating victim is stuck, not slow: neither
        Karpenter nor Cluster Autoscaler provisions for a nominated pod (docs/capacity.md, "Placeholder settings").
  # No kubernetes-mixin alert watches ScalingActive; shaped as its KubeHpaReplicasMismatch. An HPA whose scale
  # target was set to 0 by hand (ScalingDisabled: current 0, minReplicas above 0) is left out.
  - alert: GPUHpaScalingInactive
    expr: |-
      max by ({{ $hpa }}) (kube_horizontalpodautoscaler_status_condition{condition="ScalingActive",status="false"} == 1)
      {{ $custom }}
      unless on ({{ $hpa }}) (
        kube_horizontalpodautoscaler_status_current_replicas == 0
        and on ({{ $hpa }}) kube_horizontalpodautoscaler_spec_min_replicas > 0
      )
    for: {{ $p.hpaScalingInactiveFor }}
    labels:
      severity: warning
    annotations:
      summary: HPA {{`{{ $labels.namespace }}/{{ $labels.horizontalpodautoscaler }}`}} cannot get its metric
      description: >-
        HPA {{`{{ $labels.namespace }}/{{ $labels.horizontalpodautoscaler }}`}} has had ScalingActive False for
        {{ $p.hpaScalingInactiveFor }}: it cannot compute a replica count and keeps its current replicas, whatever
        the load does. kubectl describe hpa shows the reason (FailedGetObjectMetric, FailedGetExternalMetric,
        FailedGetPodsMetric) with the metrics API's answer; gpu-adapter explain shows the query behind it.
  # kubernetes-mixin's KubeHpaMaxedOut (current = max, max != min), only while the HPA wants more than its maximum
  # (ScalingLimited True at the maximum: TooManyReplicas): demand waits.
  - alert: GPUHpaMaxedOut
    expr: |-
      (
        kube_horizontalpodautoscaler_status_current_replicas
          ==
        kube_horizontalpodautoscaler_spec_max_replicas
      )
      and on ({{ $hpa }}) (
        kube_horizontalpodautoscaler_spec_max_replicas
          !=
        kube_horizontalpodautoscaler_spec_min_replicas
      )
      and on ({{ $hpa }}) kube_horizontalpodautoscaler_status_condition{condition="ScalingLimited",status="true"} == 1
      {{ $custom }}
    for: {{ $p.hpaMaxedOutFor }}
    labels:
      severity: warning
    annotations:
      summary: HPA {{`{{ $labels.namespace }}/{{ $labels.horizontalpodautoscaler }}`}} is at its maximum while demand waits
      description: >-
        HPA {{`{{ $labels.namespace }}/{{ $labels.horizontalpodautoscaler }}`}} has run at its maximum of
        {{`{{ $value }}`}} replicas for {{ $p.hpaMaxedOutFor }} and its metric asks for more (ScalingLimited,
        TooManyReplicas). Raise maxReplicas, and the GPU limit of the nodes' pool with it, or serve less.
{{- if $apis }}
  # kubernetes-mixin's KubeAggregatedAPIDown and KubeAggregatedAPIErrors, for the adapter's APIServices.
  - alert: GPUMetricsAPIDown
    expr: |-
      (1 - max by (name, namespace) (avg_over_time(aggregator_unavailable_apiservice{name=~"{{ join "|" $apis }}"}[10m]))) * 100 < 85
    for: 5m
    labels:
      severity: warning
    annotations:
      summary: The adapter's APIService {{`{{ $labels.name }}`}} is down
      description: >-
        APIService {{`{{ $labels.name }}`}} has been available only {{`{{ $value | humanize }}`}}% of the last 10
        minutes. While it is unavailable every HPA on its metrics has ScalingActive False and keeps its replicas:
        kubectl get apiservice {{`{{ $labels.name }}`}} says why (MissingEndpoints, FailedDiscoveryCheck).
  - alert: GPUMetricsAPIErrors
    expr: |-
      sum by (instance, name, reason) (increase(aggregator_unavailable_apiservice_total{name=~"{{ join "|" $apis }}"}[1m])) > 0
    for: 10m
    labels:
      severity: warning
    annotations:
      summary: The adapter's APIService {{`{{ $labels.name }}`}} keeps turning unavailable
      description: >-
        The kube-apiserver {{`{{ $labels.instance }}`}} has marked APIService {{`{{ $labels.name }}`}} unavailable
        ({{`{{ $labels.reason }}`}}) every minute for 10 minutes.
{{- end }}
{{- end -}}
