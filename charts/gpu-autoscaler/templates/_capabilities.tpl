{{/*
Optional objects: kinds a cluster may not serve (the Prometheus Operator's ServiceMonitor and PrometheusRule,
Karpenter's NodePool and EC2NodeClass). Their switch is "auto" (render when the cluster serves the kind), true
(always) or false (never). Creating a kind the cluster does not serve fails the whole install, so "auto" is what
lets the default install succeed on a cluster without those CRDs.
*/}}

{{/*
"true" when the cluster serves a kind, from Helm's capabilities; called with (list $ "group/version" "Kind").
helm install/upgrade list every "group/version" and every "group/version/Kind" the cluster serves. helm template
lists only what --api-versions names: a bare "group/version" counts too, unless some kind of that group/version is
named, for then only the named kinds count (a cluster can carry some of an operator's CRDs and not others).
*/}}
{{- define "gpu-autoscaler.servesKind" -}}
{{- $versions := (index . 0).Capabilities.APIVersions -}}
{{- $gv := index . 1 -}}
{{- if $versions.Has (printf "%s/%s" $gv (index . 2)) -}}
true
{{- else if $versions.Has $gv -}}
{{- $kinds := 0 -}}
{{- range $versions -}}
{{- if hasPrefix (printf "%s/" $gv) . }}{{ $kinds = add1 $kinds }}{{ end -}}
{{- end -}}
{{- if eq $kinds 0 }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* An optional object's switch, resolved: (list $ switch "group/version" "Kind") -> "true" or empty. */}}
{{- define "gpu-autoscaler.wanted" -}}
{{- $switch := index . 1 -}}
{{- if eq (toString $switch) "auto" -}}
{{- include "gpu-autoscaler.servesKind" (list (index . 0) (index . 2) (index . 3)) -}}
{{- else if $switch -}}
true
{{- end -}}
{{- end -}}

{{/*
The CapacityBuffer API version to write: autoscaling.x-k8s.io/v1beta1 where the cluster serves it (Cluster
Autoscaler 1.35+ serves it beside the deprecated v1alpha1; Karpenter 1.14 serves only v1beta1), else v1alpha1
where that is served (Cluster Autoscaler 1.34); v1beta1 when neither is (then the object is not rendered).
*/}}
{{- define "gpu-autoscaler.capacityBufferApi" -}}
{{- if include "gpu-autoscaler.servesKind" (list . "autoscaling.x-k8s.io/v1beta1" "CapacityBuffer") -}}
autoscaling.x-k8s.io/v1beta1
{{- else if include "gpu-autoscaler.servesKind" (list . "autoscaling.x-k8s.io/v1alpha1" "CapacityBuffer") -}}
autoscaling.x-k8s.io/v1alpha1
{{- else -}}
autoscaling.x-k8s.io/v1beta1
{{- end -}}
{{- end -}}

{{/*
Every optional object, one row each: what it is, its switch (dotted path and value), its kind's API and whether
it is wanted at all (its component is on). The templates and NOTES.txt both read this table, so what NOTES.txt
says was left out is what was left out. Returns a YAML list.
*/}}
{{- define "gpu-autoscaler.optionalObjects" -}}
{{- $v := .Values -}}
{{- $rule := $v.prometheusRule -}}
{{- $rows := list
  (dict "object" "ServiceMonitor for the exporter" "switch" "exporter.serviceMonitor.enabled"
        "value" $v.exporter.serviceMonitor.enabled "api" "monitoring.coreos.com/v1" "kind" "ServiceMonitor"
        "component" $v.exporter.enabled "monitoring" true)
  (dict "object" "ServiceMonitor for the adapter" "switch" "adapter.serviceMonitor.enabled"
        "value" $v.adapter.serviceMonitor.enabled "api" "monitoring.coreos.com/v1" "kind" "ServiceMonitor"
        "component" $v.adapter.enabled "monitoring" true)
  (dict "object" "PrometheusRule (recording rules and alerts)" "switch" "prometheusRule.enabled"
        "value" $rule.enabled "api" "monitoring.coreos.com/v1" "kind" "PrometheusRule"
        "component" (or $rule.recordingRules $rule.alerts) "monitoring" true)
  (dict "object" "Karpenter NodePool" "switch" "karpenter.nodePool.enabled"
        "value" $v.karpenter.nodePool.enabled "api" "karpenter.sh/v1" "kind" "NodePool"
        "component" true "monitoring" false)
  (dict "object" "Karpenter EC2NodeClass" "switch" "karpenter.ec2NodeClass.enabled"
        "value" $v.karpenter.ec2NodeClass.enabled "api" "karpenter.k8s.aws/v1" "kind" "EC2NodeClass"
        "component" true "monitoring" false)
  (dict "object" "CapacityBuffer (GPU headroom)" "switch" "headroom.capacityBuffer.enabled"
        "value" $v.headroom.capacityBuffer.enabled "api" (include "gpu-autoscaler.capacityBufferApi" $)
        "shown" "autoscaling.x-k8s.io/v1beta1 or v1alpha1" "kind" "CapacityBuffer"
        "component" true "monitoring" false)
-}}
{{- $out := list -}}
{{- range $rows -}}
{{- $wanted := and .component (include "gpu-autoscaler.wanted" (list $ .value .api .kind)) -}}
{{- $out = append $out (merge (dict "rendered" (ternary true false (not (not $wanted))) "auto" (eq (toString .value) "auto")) .) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* "true" when the optional object behind this switch (its dotted path) is rendered, else empty. */}}
{{- define "gpu-autoscaler.renders" -}}
{{- $switch := index . 1 -}}
{{- range (include "gpu-autoscaler.optionalObjects" (index . 0) | fromYamlArray) -}}
{{- if and (eq .switch $switch) .rendered }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/*
prometheus.io/* annotations for Prometheus servers that find targets by annotation (see exporter.scrapeAnnotations
in values.yaml): (list port scheme) -> a YAML map. The port is the container's: such jobs put it on the pod's IP.
*/}}
{{- define "gpu-autoscaler.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ index . 0 | toString | quote }}
prometheus.io/path: /metrics
{{- if eq (index . 1) "https" }}
prometheus.io/scheme: https
{{- end }}
{{- end -}}
