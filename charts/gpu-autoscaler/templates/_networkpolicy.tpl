{{/* NetworkPolicies (networkPolicy in values.yaml): who may connect to the adapter's and the exporter's ports. */}}

{{- /* "true" when a LabelSelector selects by something; an empty one ({}, or empty matchLabels and
matchExpressions) would select everything, which a source here never means. */ -}}
{{- define "gpu-autoscaler.networkPolicy.selects" -}}
{{- if and . (or .matchLabels .matchExpressions) }}true{{ end -}}
{{- end -}}

{{/*
A source (networkPolicy.apiServer, .prometheus or .keda) as NetworkPolicy peers: an ipBlock per CIDR, then one
peer of its namespaceSelector and podSelector where either selects something. Returns a YAML list; an empty one
means the source names nobody, and the caller leaves its rule out (a rule without peers would admit everyone).
*/}}
{{- define "gpu-autoscaler.networkPolicy.peers" -}}
{{- $peers := list -}}
{{- range .cidrs -}}
{{- $peers = append $peers (dict "ipBlock" (dict "cidr" .)) -}}
{{- end -}}
{{- $pair := dict -}}
{{- if include "gpu-autoscaler.networkPolicy.selects" .namespaceSelector -}}
{{- $_ := set $pair "namespaceSelector" .namespaceSelector -}}
{{- end -}}
{{- if include "gpu-autoscaler.networkPolicy.selects" .podSelector -}}
{{- $_ := set $pair "podSelector" .podSelector -}}
{{- end -}}
{{- if $pair }}{{ $peers = append $peers $pair }}{{ end -}}
{{- toYaml $peers -}}
{{- end -}}

{{- /* The API server's peers; with none, the render fails in one line naming the value to set. */ -}}
{{- define "gpu-autoscaler.networkPolicy.apiServerPeers" -}}
{{- $peers := include "gpu-autoscaler.networkPolicy.peers" .Values.networkPolicy.apiServer -}}
{{- if eq $peers "[]" -}}
{{- fail "networkPolicy.enabled needs networkPolicy.apiServer.cidrs: the addresses the kube-apiserver connects to the adapter from (EKS: the cluster subnets' CIDRs; GKE private clusters: the control plane range; kubeadm: the control-plane nodes), e.g. --set 'networkPolicy.apiServer.cidrs={10.0.0.0/16}'; or its namespaceSelector/podSelector where it reaches pods from pods (docs/install.md \"NetworkPolicy\")" -}}
{{- end -}}
{{- $peers -}}
{{- end -}}

{{- /* "true" when the chart has Prometheus scrape the adapter (its ServiceMonitor, or prometheus.io annotations). */ -}}
{{- define "gpu-autoscaler.adapter.scraped" -}}
{{- $s := .Values.adapter.scrapeAnnotations -}}
{{- if or (include "gpu-autoscaler.renders" (list . "adapter.serviceMonitor.enabled")) $s.service $s.pod }}true{{ end -}}
{{- end -}}

{{- /* A source's peers in words for NOTES.txt, selectors as `kubectl get pods -l` takes them. */ -}}
{{- define "gpu-autoscaler.networkPolicy.describe" -}}
{{- $out := list -}}
{{- range (include "gpu-autoscaler.networkPolicy.peers" . | fromYamlArray) -}}
{{- if .ipBlock -}}
{{- $out = append $out .ipBlock.cidr -}}
{{- else -}}
{{- $pods := "every pod" -}}
{{- if hasKey . "podSelector" }}{{ $pods = printf "pods %s" (include "gpu-autoscaler.labelSelector.string" .podSelector) }}{{ end -}}
{{- $ns := "this release's namespace" -}}
{{- if hasKey . "namespaceSelector" }}{{ $ns = printf "namespaces %s" (include "gpu-autoscaler.labelSelector.string" .namespaceSelector) }}{{ end -}}
{{- $out = append $out (printf "%s in %s" $pods $ns) -}}
{{- end -}}
{{- end -}}
{{- join "; " $out -}}
{{- end -}}

{{- define "gpu-autoscaler.labelSelector.string" -}}
{{- $parts := list -}}
{{- range $key, $value := .matchLabels -}}
{{- $parts = append $parts (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- range .matchExpressions -}}
{{- if eq .operator "In" -}}
{{- $parts = append $parts (printf "%s in (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "NotIn" -}}
{{- $parts = append $parts (printf "%s notin (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "Exists" -}}
{{- $parts = append $parts .key -}}
{{- else -}}
{{- $parts = append $parts (printf "!%s" .key) -}}
{{- end -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}
