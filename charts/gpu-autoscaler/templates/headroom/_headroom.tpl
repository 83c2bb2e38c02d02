{{/*
GPU headroom (values headroom.*): names, sizes and the render-time checks shared by capacitybuffer.yaml,
placeholders.yaml, hpa.yaml, the adapter's rules (the capacity-headroom preset) and NOTES.txt.
*/}}

{{/*
The metric headroom.auto's HPA reads, from the capacity-headroom preset (adapter/presets/capacity.py): the demand's
growth times the provisioning time the chart's PrometheusRule records (recordingRules below). Signal requests: the
arrival rate one provisioning time ahead (requests/s); signal queue: what will be waiting by then (requests).
*/}}
{{- define "gpu-autoscaler.headroom.metric" -}}
{{- if eq .Values.headroom.auto.signal "queue" -}}
inference_queue_ahead
{{- else -}}
inference_request_rate_ahead
{{- end -}}
{{- end -}}

{{/* The value holding the demand one replica stands for, in the signal's unit: requestsPerReplica or queuePerReplica. */}}
{{- define "gpu-autoscaler.headroom.perReplicaKey" -}}
{{- ternary "queuePerReplica" "requestsPerReplica" (eq .Values.headroom.auto.signal "queue") -}}
{{- end -}}

{{/* The rules-file include name of that preset. */}}
{{- define "gpu-autoscaler.headroom.preset" -}}
capacity-headroom
{{- end -}}

{{/* "true" when the adapter's rules carry the capacity-headroom preset: asked for, or headroom.auto reads it. */}}
{{- define "gpu-autoscaler.capacityPresetsOn" -}}
{{- if or .Values.adapter.rules.capacityPresets .Values.headroom.auto.enabled }}true{{ end -}}
{{- end -}}

{{- define "gpu-autoscaler.headroom.namespace" -}}
{{- default .Release.Namespace .Values.headroom.namespace -}}
{{- end -}}

{{- define "gpu-autoscaler.headroom.capacityBufferName" -}}
{{- default (printf "%s-headroom" .Values.headroom.workload.name) .Values.headroom.capacityBuffer.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-autoscaler.headroom.placeholdersName" -}}
{{- default (printf "%s-headroom" .Values.headroom.workload.name) .Values.headroom.placeholders.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-autoscaler.headroom.priorityClassName" -}}
{{- default (printf "%s-headroom" (include "gpu-autoscaler.fullname" .)) .Values.headroom.placeholders.priorityClass.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-autoscaler.headroom.selectorLabels" -}}
{{ include "gpu-autoscaler.selectorLabels" . }}
app.kubernetes.io/component: headroom
{{- end -}}

{{- define "gpu-autoscaler.headroom.labels" -}}
{{ include "gpu-autoscaler.labels" . }}
app.kubernetes.io/component: headroom
{{- end -}}

{{/* "true" when the placeholder Deployment (and its PriorityClass) is rendered: static placeholders or auto. */}}
{{- define "gpu-autoscaler.headroom.placeholdersOn" -}}
{{- if or .Values.headroom.placeholders.enabled .Values.headroom.auto.enabled }}true{{ end -}}
{{- end -}}

{{/* "true" when any headroom form is asked for (the CapacityBuffer's switch counts when not false). */}}
{{- define "gpu-autoscaler.headroom.anyOn" -}}
{{- $h := .Values.headroom -}}
{{- if or (ne (toString $h.capacityBuffer.enabled) "false") (include "gpu-autoscaler.headroom.placeholdersOn" .) }}true{{ end -}}
{{- end -}}

{{/* Seconds in a duration made of whole h/m/s parts ("3m", "1m30s"); values.schema.json admits only those. */}}
{{- define "gpu-autoscaler.seconds" -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+[hms]" . -1 -}}
{{- $n := int (trimSuffix "h" (trimSuffix "m" (trimSuffix "s" .))) -}}
{{- $unit := ternary 3600 (ternary 60 1 (hasSuffix "m" .)) (hasSuffix "h" .) -}}
{{- $total = add $total (mul $n $unit) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
The auto HPA's target averageValue as a Kubernetes quantity: requestsPerReplica (or, with signal queue,
queuePerReplica), the demand one replica stands for, rounded to 0.001 (the HPA controller compares targets with
Quantity.MilliValue), whole numbers written whole. Fails when the value is missing or below 1m, or when
provisioningTime (the fallback, or the fixed time) is no time at all.
*/}}
{{- define "gpu-autoscaler.headroom.averageValue" -}}
{{- $a := .Values.headroom.auto -}}
{{- $key := include "gpu-autoscaler.headroom.perReplicaKey" . -}}
{{- $per := get $a $key -}}
{{- if kindIs "invalid" $per -}}
{{- fail (printf "headroom.auto.%s: required with signal %s (the %s one replica stands for at the workload HPA's target)" $key $a.signal (ternary "requests waiting" "requests per second" (eq $a.signal "queue"))) -}}
{{- end -}}
{{- if le (int (include "gpu-autoscaler.seconds" $a.provisioningTime)) 0 -}}
{{- fail (printf "headroom.auto.provisioningTime: %q is no time at all; give the expected time to capacity, e.g. 9m" $a.provisioningTime) -}}
{{- end -}}
{{- $milli := int (round (mulf (float64 $per) 1000.0) 0) -}}
{{- if lt $milli 1 -}}
{{- fail (printf "headroom.auto.%s: %v is below 0.001, finer than an HPA target can be" $key $per) -}}
{{- end -}}
{{- if eq (mod $milli 1000) 0 }}{{ div $milli 1000 }}{{ else }}{{ printf "%dm" $milli }}{{ end -}}
{{- end -}}

{{/* The HPA's minReplicas: the value, or 0 from Kubernetes 1.37 (HPAScaleToZero on by default) and 1 before. */}}
{{- define "gpu-autoscaler.headroom.minReplicas" -}}
{{- $min := .Values.headroom.auto.minReplicas -}}
{{- if kindIs "invalid" $min -}}
{{- ternary 0 1 (semverCompare ">=1.37.0-0" .Capabilities.KubeVersion.Version) -}}
{{- else -}}
{{- int $min -}}
{{- end -}}
{{- end -}}

{{/* The GPU instance-type table (files/gpu-instance-types.yaml): type -> {gpus, gpu}. */}}
{{- define "gpu-autoscaler.gpuInstanceTypes" -}}
{{- .Files.Get "files/gpu-instance-types.yaml" -}}
{{- end -}}

{{/*
The NodePool's instance types as the table knows them, YAML {types: [{name, gpus}], complete: bool}: the pinned
instanceTypes (each must be in the table: karpenter.yaml fails otherwise), or every row of the instanceFamilies;
complete is false when some family has no rows (its sizes, and so the largest GPU count, are unknown).
*/}}
{{- define "gpu-autoscaler.nodePoolTypes" -}}
{{- $pool := .Values.karpenter.nodePool -}}
{{- $table := include "gpu-autoscaler.gpuInstanceTypes" . | fromYaml -}}
{{- $types := list -}}
{{- $complete := true -}}
{{- if $pool.instanceTypes -}}
{{- range $pool.instanceTypes -}}
{{- if hasKey $table . }}{{ $types = append $types (dict "name" . "gpus" (int (get $table .).gpus)) }}{{ end -}}
{{- end -}}
{{- else -}}
{{- range $pool.instanceFamilies -}}
{{- $family := . -}}
{{- $found := false -}}
{{- range $name, $row := $table -}}
{{- if eq (index (splitList "." $name) 0) $family }}{{ $types = append $types (dict "name" $name "gpus" (int $row.gpus)) }}{{ $found = true }}{{ end -}}
{{- end -}}
{{- if not $found }}{{ $complete = false }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "types" $types "complete" $complete) -}}
{{- end -}}

{{/*
Render-time checks of headroom.* and of headroom against the chart's NodePool: a one-line error naming the value.
Renders nothing.
*/}}
{{- define "gpu-autoscaler.headroom.validate" -}}
{{- $h := .Values.headroom -}}
{{- if include "gpu-autoscaler.headroom.anyOn" . -}}
{{- $w := $h.workload -}}
{{- if not $w.name -}}
{{- fail "headroom.workload.name: required when a headroom form is on (the Deployment, StatefulSet or ReplicaSet the headroom is for)" -}}
{{- end -}}
{{- $cb := $h.capacityBuffer -}}
{{- if and (ne (toString $cb.enabled) "false") (kindIs "invalid" $cb.replicas) (kindIs "invalid" $cb.percentage) (kindIs "invalid" $cb.gpus) -}}
{{- fail "headroom.capacityBuffer: set replicas, percentage or gpus (all are null, so the buffer has no size)" -}}
{{- end -}}
{{- if and (ne (toString $cb.enabled) "false") (eq $cb.ref "podTemplate") (not (kindIs "invalid" $cb.percentage)) -}}
{{- fail "headroom.capacityBuffer.percentage counts the workload's replicas, which only a buffer with ref scalableRef reads: set replicas (or gpus) instead, or ref: scalableRef once the workload's pod template requests its GPUs under requests" -}}
{{- end -}}
{{- if and $h.placeholders.enabled $h.auto.enabled -}}
{{- fail "headroom.placeholders.enabled and headroom.auto.enabled both size the placeholder Deployment: turn placeholders off (auto keeps headroom.auto.minReplicas as its floor)" -}}
{{- end -}}
{{- if $h.auto.enabled -}}
{{- $a := $h.auto -}}
{{- if eq $a.source "gateway" -}}
{{- if not $a.inferencePool -}}
{{- fail "headroom.auto.inferencePool: required with source gateway (the InferencePool whose queue the HPA reads)" -}}
{{- end -}}
{{- if not (and .Values.adapter.enabled .Values.adapter.apiService.externalMetrics.enabled) -}}
{{- fail (printf "headroom.auto.source: gateway reads the External metric %s, served only with adapter.apiService.externalMetrics.enabled=true (or use source servers)" (include "gpu-autoscaler.headroom.metric" .)) -}}
{{- end -}}
{{- else if ne $w.kind "Deployment" -}}
{{- fail (printf "headroom.auto.source: servers reads the Object metric %s on the workload's Deployment, but headroom.workload.kind is %s (use source gateway)" (include "gpu-autoscaler.headroom.metric" .) $w.kind) -}}
{{- end -}}
{{- $min := int (include "gpu-autoscaler.headroom.minReplicas" .) -}}
{{- if gt $min (int $a.maxReplicas) -}}
{{- fail (printf "headroom.auto.minReplicas: %d is above headroom.auto.maxReplicas %d" $min (int $a.maxReplicas)) -}}
{{- end -}}
{{- $_ := include "gpu-autoscaler.headroom.averageValue" . -}}
{{- end -}}
{{- include "gpu-autoscaler.headroom.fitsNodePool" . -}}
{{- end -}}
{{- end -}}

{{/*
Headroom against the chart's NodePool, when it is rendered: the GPUs the headroom may hold at most must fit under
its nvidia.com/gpu limit, and one replica's GPUs on one of the instance types it may launch. A CapacityBuffer counts
as replicas x gpusPerReplica capped by gpus; its percentage is not counted (the workload's replica count is not
known at render time); the error and NOTES.txt say so when percentage is set.
*/}}
{{- define "gpu-autoscaler.headroom.fitsNodePool" -}}
{{- if include "gpu-autoscaler.renders" (list . "karpenter.nodePool.enabled") -}}
{{- $h := .Values.headroom -}}
{{- $per := int $h.workload.gpusPerReplica -}}
{{- $parts := list -}}
{{- $total := 0 -}}
{{- if include "gpu-autoscaler.renders" (list . "headroom.capacityBuffer.enabled") -}}
{{- $cb := $h.capacityBuffer -}}
{{- if not (kindIs "invalid" $cb.replicas) -}}
{{- $gpus := mul (int $cb.replicas) $per -}}
{{- if not (kindIs "invalid" $cb.gpus) }}{{ $gpus = min $gpus (int $cb.gpus) }}{{ end -}}
{{- $total = add $total $gpus -}}
{{- $parts = append $parts (printf "capacityBuffer %d" $gpus) -}}
{{- else if not (kindIs "invalid" $cb.gpus) -}}
{{- $total = add $total (int $cb.gpus) -}}
{{- $parts = append $parts (printf "capacityBuffer %d" (int $cb.gpus)) -}}
{{- end -}}
{{- end -}}
{{- if $h.placeholders.enabled -}}
{{- $total = add $total (mul (int $h.placeholders.replicas) $per) -}}
{{- $parts = append $parts (printf "placeholders %d x %d" (int $h.placeholders.replicas) $per) -}}
{{- else if $h.auto.enabled -}}
{{- $total = add $total (mul (int $h.auto.maxReplicas) $per) -}}
{{- $parts = append $parts (printf "auto.maxReplicas %d x %d" (int $h.auto.maxReplicas) $per) -}}
{{- end -}}
{{- $limits := .Values.karpenter.nodePool.limits | default dict -}}
{{- if hasKey $limits "nvidia.com/gpu" -}}
{{- $limit := int (toString (get $limits "nvidia.com/gpu")) -}}
{{- if gt $total $limit -}}
{{- $uncounted := "" -}}
{{- if and (include "gpu-autoscaler.renders" (list . "headroom.capacityBuffer.enabled")) (not (kindIs "invalid" $h.capacityBuffer.percentage)) -}}
{{- $uncounted = " (a CapacityBuffer's percentage is not counted: it depends on the workload's replicas at run time)" -}}
{{- end -}}
{{- fail (printf "headroom: %d GPUs of headroom (%s) is more than karpenter.nodePool.limits nvidia.com/gpu %d, so the NodePool could never hold it; lower the headroom or raise the limit%s" $total (join " + " $parts) $limit $uncounted) -}}
{{- end -}}
{{- end -}}
{{- $pool := include "gpu-autoscaler.nodePoolTypes" . | fromYaml -}}
{{- if and $pool.types $pool.complete -}}
{{- $most := 0 -}}
{{- $largest := "" -}}
{{- range $pool.types }}{{ if gt (int .gpus) $most }}{{ $most = int .gpus }}{{ $largest = .name }}{{ end }}{{ end -}}
{{- if gt $per $most -}}
{{- fail (printf "headroom.workload.gpusPerReplica: %d GPUs per replica, but no instance type karpenter.nodePool may launch has that many (the most: %s, %d)" $per $largest $most) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The headroom's recording rules (prometheusrule.yaml, group gpu-autoscaler.headroom), as a YAML list; empty without
headroom. With headroom.auto: the provisioning time its HPA's metric multiplies the demand's growth by
(namespace_deployment:headroom_provisioning_seconds, label source): with provisioningTimeSource history, the
workload's measured p90 (namespace_deployment:gpu_provisioning_seconds:p90, a Deployment's only), provisioningTime
while there is none; with fixed, provisioningTime. Labelled with the workload's namespace and Deployment, and its
InferencePool with source gateway, so that either side of the preset finds it. The p90 is read over the last 15
minutes, three evaluations of its group (every 5m, its own interval): Prometheus evaluates groups apart, so an instant
read from this group (the global interval, 5m lookback) finds nothing after a late or missed evaluation of the
history group (prometheus_rule_group_iterations_missed_total) and would fall back to provisioningTime for a round.
For every form: which objects hold headroom for the workload (namespace_workload:headroom:info, value 1).
*/}}
{{- define "gpu-autoscaler.headroom.recordingRules" -}}
{{- if include "gpu-autoscaler.headroom.anyOn" . -}}
{{- $h := .Values.headroom -}}
{{- $a := $h.auto -}}
{{- $ns := include "gpu-autoscaler.headroom.namespace" . -}}
{{- if $a.enabled }}
{{- $seconds := int (include "gpu-autoscaler.seconds" $a.provisioningTime) }}
{{- $labels := dict "namespace" $ns }}
{{- if eq $h.workload.kind "Deployment" }}{{ $_ := set $labels "deployment" $h.workload.name }}{{ end }}
{{- if eq $a.source "gateway" }}{{ $_ := set $labels "inference_pool" $a.inferencePool }}{{ end }}
- record: namespace_deployment:headroom_provisioning_seconds
  {{- if and (eq $a.provisioningTimeSource "history") (eq $h.workload.kind "Deployment") }}
  expr: |-
    label_replace(max(last_over_time(namespace_deployment:gpu_provisioning_seconds:p90{namespace={{ $ns | quote }},deployment={{ $h.workload.name | quote }}}[15m])), "source", "history", "", "")
    or on ()
    label_replace(vector({{ $seconds }}), "source", "fallback", "", "")
  {{- else }}
  expr: label_replace(vector({{ $seconds }}), "source", {{ ternary "fixed" "fallback" (eq $a.provisioningTimeSource "fixed") | quote }}, "", "")
  {{- end }}
  labels:
    {{- toYaml $labels | nindent 4 }}
{{- end }}
{{- $info := dict "namespace" $ns "workload" $h.workload.name "workload_kind" $h.workload.kind }}
{{- if include "gpu-autoscaler.headroom.placeholdersOn" . }}{{ $_ := set $info "placeholders" (include "gpu-autoscaler.headroom.placeholdersName" .) }}{{ end }}
{{- if include "gpu-autoscaler.renders" (list . "headroom.capacityBuffer.enabled") }}{{ $_ := set $info "capacitybuffer" (include "gpu-autoscaler.headroom.capacityBufferName" .) }}{{ end }}
- record: namespace_workload:headroom:info
  expr: vector(1)
  labels:
    {{- toYaml $info | nindent 4 }}
{{- end -}}
{{- end -}}

{{/*
One replica's shape, shared by the placeholder pods and the CapacityBuffer's PodTemplate: a pause container
requesting gpusPerReplica GPUs (under requests and limits: a template is stored as written, and only a Pod gets its
limits copied into requests) and workload.requests; and where it may run (placeholders.tolerations, nodeSelector,
affinity).
*/}}
{{- define "gpu-autoscaler.headroom.replicaContainers" -}}
{{- $h := .Values.headroom -}}
{{- $gpus := int $h.workload.gpusPerReplica -}}
- name: pause
  image: {{ $h.placeholders.image }}
  imagePullPolicy: IfNotPresent
  resources:
    requests:
      {{- range $resource, $quantity := $h.workload.requests }}
      {{ $resource }}: {{ toString $quantity | quote }}
      {{- end }}
      nvidia.com/gpu: {{ $gpus | quote }}
    limits:
      nvidia.com/gpu: {{ $gpus | quote }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities: {drop: [ALL]}
{{- end -}}

{{- define "gpu-autoscaler.headroom.replicaScheduling" -}}
{{- $p := .Values.headroom.placeholders -}}
{{- with $p.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $p.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $p.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
headroom.capacityBuffer.ref scalableRef: Karpenter builds the buffer's virtual pods from the workload's pod template as
stored (pkg/utils/apps/resolve.go, pkg/state/virtualpods/utilities.go BuildVirtualPods), and the API server copies
limits into requests for a Pod only, so a container that asks for a GPU under limits alone gives a buffer without
GPUs. Where helm can look at the cluster (install, upgrade), a workload that does so fails the render naming the
container; helm template cannot look (lookup answers nothing) and renders.
*/}}
{{- define "gpu-autoscaler.headroom.checkScalableRef" -}}
{{- $w := .Values.headroom.workload -}}
{{- $ns := include "gpu-autoscaler.headroom.namespace" . -}}
{{- $workload := lookup "apps/v1" $w.kind $ns $w.name -}}
{{- if $workload -}}
{{- range (dig "spec" "template" "spec" "containers" list $workload) -}}
{{- $requests := dig "resources" "requests" dict . -}}
{{- $container := .name -}}
{{- range $resource, $quantity := dig "resources" "limits" dict . -}}
{{- if and (hasPrefix "nvidia.com/" $resource) (not (hasKey $requests $resource)) -}}
{{- fail (printf "headroom.capacityBuffer.ref scalableRef: %s %s/%s's container %q asks for %s under limits only, and Karpenter builds the buffer's pods from the template as stored (no GPU: the API server copies limits into requests for Pods only). Add requests: {%s: %q} to that container, or use headroom.capacityBuffer.ref podTemplate" $w.kind $ns $w.name $container $resource $resource (toString $quantity)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
(list . gpus what): a NOTES line when the chart's NodePool cannot hold that many GPUs of headroom on one node of exactly
that size. Karpenter packs the pods of one batch onto as few NodeClaims as fit (pkg/controllers/provisioning/
scheduling/scheduler.go: existing and in-flight nodes first, then new NodeClaims whose instance-type options shrink as
pods are added), so placeholders created together share a node, and a node larger than the headroom keeps the rest of
its GPUs idle. Empty when some type holds exactly that many, when the NodePool is not rendered, or when the types are
not all known.
*/}}
{{- define "gpu-autoscaler.headroom.wholeNodes" -}}
{{- $root := index . 0 -}}
{{- $gpus := int (index . 1) -}}
{{- $what := index . 2 -}}
{{- if and (gt $gpus 0) (include "gpu-autoscaler.renders" (list $root "karpenter.nodePool.enabled")) -}}
{{- $pool := include "gpu-autoscaler.nodePoolTypes" $root | fromYaml -}}
{{- if and $pool.types $pool.complete -}}
{{- $exact := false -}}
{{- $smallest := 0 -}}
{{- $name := "" -}}
{{- range $pool.types -}}
{{- if eq (int .gpus) $gpus }}{{ $exact = true }}{{ end -}}
{{- if and (gt (int .gpus) $gpus) (or (eq $smallest 0) (lt (int .gpus) $smallest)) }}{{ $smallest = int .gpus }}{{ $name = .name }}{{ end -}}
{{- end -}}
{{- if and (not $exact) (gt $smallest 0) -}}
Karpenter packs the {{ $what }} of one batch onto one node: no instance type of the NodePool has exactly {{ $gpus }} GPU(s), and the smallest that holds them all ({{ $name }}) has {{ $smallest }}, {{ sub $smallest $gpus }} of them idle. Size headroom in whole nodes ({{ $smallest }} GPUs here) or pin karpenter.nodePool.instanceTypes to a size that divides it.
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
