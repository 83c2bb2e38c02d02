{{/*
GPU headroom (values headroom.*): names, sizes and the render-time checks shared by capacitybuffer.yaml,
placeholders.yaml, hpa.yaml, the adapter's rules (the capacity-headroom preset) and NOTES.txt.
*/}}

{{/*
The metric headroom.auto's HPA reads, from the capacity-headroom preset (adapter/presets/capacity.py): signal requests,
the arrival rate's growth (requests/s per second); signal queue, what waits growing (requests/s).
*/}}
{{- define "gpu-autoscaler.headroom.metric" -}}
{{- if eq .Values.headroom.auto.signal "queue" -}}
inference_queue_growth_rate
{{- else -}}
inference_request_rate_growth
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
The auto HPA's target averageValue as a Kubernetes quantity in milli-units: requestsPerReplica (or, with signal
queue, queuePerReplica) / provisioningTime, rounded to the nearest 0.001, the resolution the HPA controller compares
targets in (it reads them with Quantity.MilliValue). Fails when the value is missing or the result below 1m.
*/}}
{{- define "gpu-autoscaler.headroom.averageValue" -}}
{{- $a := .Values.headroom.auto -}}
{{- $key := include "gpu-autoscaler.headroom.perReplicaKey" . -}}
{{- $per := get $a $key -}}
{{- if kindIs "invalid" $per -}}
{{- fail (printf "headroom.auto.%s: required with signal %s (the %s one replica stands for at the workload HPA's target)" $key $a.signal (ternary "requests waiting" "requests per second" (eq $a.signal "queue"))) -}}
{{- end -}}
{{- $seconds := int (include "gpu-autoscaler.seconds" $a.provisioningTime) -}}
{{- if le $seconds 0 -}}
{{- fail (printf "headroom.auto.provisioningTime: %q is no time at all; give the expected time to capacity, e.g. 9m" $a.provisioningTime) -}}
{{- end -}}
{{- $milli := int (round (divf (mulf (float64 $per) 1000.0) (float64 $seconds)) 0) -}}
{{- if lt $milli 1 -}}
{{- fail (printf "headroom.auto: %s %v / provisioningTime %s is below 0.001 per second, finer than an HPA target can be; raise %s or shorten provisioningTime" $key $per $a.provisioningTime $key) -}}
{{- end -}}
{{- printf "%dm" $milli -}}
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
