{{/* Names */}}
{{- define "gpu-autoscaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-autoscaler.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpu-autoscaler.adapter.fullname" -}}
{{- printf "%s-adapter" (include "gpu-autoscaler.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-autoscaler.exporter.fullname" -}}
{{- printf "%s-exporter" (include "gpu-autoscaler.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-autoscaler.adapter.serviceAccountName" -}}
{{- if .Values.adapter.serviceAccount.create -}}
{{- default (include "gpu-autoscaler.adapter.fullname" .) .Values.adapter.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.adapter.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpu-autoscaler.exporter.serviceAccountName" -}}
{{- if .Values.exporter.serviceAccount.create -}}
{{- default (include "gpu-autoscaler.exporter.fullname" .) .Values.exporter.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.exporter.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* "true" when the exporter watches the pods on its node (pod labels or UIDs with -k), else empty. */ -}}
{{- define "gpu-autoscaler.exporter.watchesPods" -}}
{{- $k := .Values.exporter.kubernetes -}}
{{- if and $k.enabled (or $k.enablePodLabels $k.enablePodUid) }}true{{ end -}}
{{- end -}}

{{- /* "true" when the exporter calls the Kubernetes API at all (then it needs its service account token). */ -}}
{{- define "gpu-autoscaler.exporter.usesApi" -}}
{{- if or (include "gpu-autoscaler.exporter.watchesPods" .) .Values.exporter.configMapData }}true{{ end -}}
{{- end -}}

{{- define "gpu-autoscaler.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Labels */}}
{{- define "gpu-autoscaler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gpu-autoscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-autoscaler
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpu-autoscaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-autoscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-autoscaler.adapter.selectorLabels" -}}
{{ include "gpu-autoscaler.selectorLabels" . }}
app.kubernetes.io/component: adapter
{{- end -}}

{{- define "gpu-autoscaler.exporter.selectorLabels" -}}
{{ include "gpu-autoscaler.selectorLabels" . }}
app.kubernetes.io/component: exporter
{{- end -}}

{{- define "gpu-autoscaler.adapter.labels" -}}
{{ include "gpu-autoscaler.labels" . }}
app.kubernetes.io/component: adapter
{{- end -}}

{{- define "gpu-autoscaler.exporter.labels" -}}
{{ include "gpu-autoscaler.labels" . }}
app.kubernetes.io/component: exporter
{{- end -}}

{{/*
The adapter's serving certificate in tls.mode "generated": reused from the Secret when it already exists
(so an upgrade keeps the CA the APIServices trust), else a new CA and a certificate for
<service>.<namespace>.svc signed by it. Computed once per render and shared by every template that needs it.
Returns YAML: {ca, cert, key} as PEM.
*/}}
{{- define "gpu-autoscaler.adapter.generatedTLS" -}}
{{- if not (hasKey .Values "__generatedTLS") -}}
{{- $service := include "gpu-autoscaler.adapter.fullname" . -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (printf "%s-tls" $service) -}}
{{- $tls := dict -}}
{{- if and $secret (index $secret "data") (hasKey $secret.data "ca.crt") (hasKey $secret.data "tls.crt") (hasKey $secret.data "tls.key") -}}
{{- $tls = dict "ca" (index $secret.data "ca.crt" | b64dec) "cert" (index $secret.data "tls.crt" | b64dec) "key" (index $secret.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $host := printf "%s.%s.svc" $service .Release.Namespace -}}
{{- $days := int .Values.adapter.tls.validityDays -}}
{{- $ca := genCA (printf "%s-ca" $service) $days -}}
{{- $cert := genSignedCert $host nil (list $host (printf "%s.cluster.local" $host) (printf "%s.%s" $service .Release.Namespace)) $days $ca -}}
{{- $tls = dict "ca" $ca.Cert "cert" $cert.Cert "key" $cert.Key -}}
{{- end -}}
{{- $_ := set .Values "__generatedTLS" $tls -}}
{{- end -}}
{{- toYaml .Values.__generatedTLS -}}
{{- end -}}

{{/* The Secret name holding the adapter's serving certificate (empty in insecure mode). */}}
{{- define "gpu-autoscaler.adapter.tlsSecretName" -}}
{{- $mode := .Values.adapter.tls.mode -}}
{{- if eq $mode "existingSecret" -}}
{{- .Values.adapter.tls.existingSecret -}}
{{- else if ne $mode "insecure" -}}
{{- printf "%s-tls" (include "gpu-autoscaler.adapter.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The cert-manager Certificate that serves the adapter (named in the inject-ca-from annotation). */}}
{{- define "gpu-autoscaler.adapter.certificateName" -}}
{{- include "gpu-autoscaler.adapter.fullname" . -}}
{{- end -}}

{{/* Rules file contents: your rules first, then the Deployment rule, the built-in GPU presets, the inference-server
presets you named, the gateway's, and the capacity-headroom preset (adapter.rules.capacityPresets, or headroom.auto,
whose HPA reads it). */}}
{{- define "gpu-autoscaler.adapter.rulesFile" -}}
{{- $presets := .Files.Get "files/gpu-presets.yaml" | fromYaml -}}
{{- $deployment := .Files.Get "files/deployment-rules.yaml" | fromYaml -}}
{{- $rules := concat (list) .Values.adapter.rules.custom -}}
{{- $external := concat (list) .Values.adapter.rules.external -}}
{{- if .Values.adapter.rules.deploymentMetrics -}}
{{- $rules = concat $rules (default (list) $deployment.rules) -}}
{{- end -}}
{{- if .Values.adapter.rules.presets -}}
{{- $rules = concat $rules (default (list) $presets.rules) -}}
{{- $external = concat $external (default (list) $presets.externalRules) -}}
{{- end -}}
{{- range (include "gpu-autoscaler.inferencePresets" . | fromYamlArray) -}}
{{- $rules = concat $rules .rules -}}
{{- end -}}
{{- if .Values.adapter.rules.gatewayPresets -}}
{{- $gateway := .Files.Get "files/gateway-presets.yaml" | fromYaml -}}
{{- $rules = concat $rules (default (list) $gateway.rules) -}}
{{- $external = concat $external (default (list) $gateway.externalRules) -}}
{{- end -}}
{{- if include "gpu-autoscaler.capacityPresetsOn" . -}}
{{- $capacity := .Files.Get "files/capacity-presets.yaml" | fromYaml -}}
{{- $rules = concat $rules (default (list) $capacity.rules) -}}
{{- $external = concat $external (default (list) $capacity.externalRules) -}}
{{- end -}}
{{- $doc := dict "rules" (ternary $rules (list) (gt (len $rules) 0)) -}}
{{- if $external -}}
{{- $_ := set $doc "externalRules" $external -}}
{{- end -}}
{{- if and .Values.adapter.rules.presets $presets.resourceRules -}}
{{- $_ := set $doc "resourceRules" $presets.resourceRules -}}
{{- end -}}
{{- if .Values.adapter.apiService.resourceMetrics.enabled -}}
{{- $_ := set $doc "resourceRules" .Values.adapter.rules.resource -}}
{{- end -}}
{{- toYaml $doc -}}
{{- end -}}

{{/*
The inference-server presets named in adapter.rules.inferencePresets (files/inference-presets.yaml, generated from
the adapter's source), in that order, as a YAML list of {rules, recordingRules}; an unknown name fails the render.
*/}}
{{- define "gpu-autoscaler.inferencePresets" -}}
{{- $all := (.Files.Get "files/inference-presets.yaml" | fromYaml).presets -}}
{{- $chosen := list -}}
{{- range .Values.adapter.rules.inferencePresets -}}
{{- if not (hasKey $all .) -}}
{{- fail (printf "adapter.rules.inferencePresets: unknown preset %q (known: %s)" . (keys $all | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $chosen = append $chosen (get $all .) -}}
{{- end -}}
{{- toYaml $chosen -}}
{{- end -}}

{{- /* The adapter pod's terminationGracePeriodSeconds: adapter.terminationGracePeriodSeconds when set, else the
shutdown's delay + drain timeout (+ 2 s, upstream's final close, with sendRetryAfter) + 5 s to exit. A set value that
leaves no time to drain, and a Retry-After window without a delay, fail `helm template` in one line. */ -}}
{{- define "gpu-autoscaler.adapter.terminationGracePeriodSeconds" -}}
{{- $a := .Values.adapter -}}
{{- $s := $a.shutdown -}}
{{- if and $s.sendRetryAfter (eq (int $s.delaySeconds) 0) -}}
{{- fail "adapter.shutdown.sendRetryAfter needs adapter.shutdown.delaySeconds above 0: without a delay, new requests would get 429 while the Service still sends them to the pod" -}}
{{- end -}}
{{- $needed := add (int $s.delaySeconds) (int $s.drainTimeoutSeconds) (ternary 2 0 $s.sendRetryAfter) -}}
{{- if kindIs "invalid" $a.terminationGracePeriodSeconds -}}
{{- add $needed 5 -}}
{{- else if le (int $a.terminationGracePeriodSeconds) (int $needed) -}}
{{- fail (printf "adapter.terminationGracePeriodSeconds=%d leaves no time to drain: adapter.shutdown.delaySeconds (%d) + drainTimeoutSeconds (%d)%s = %d s must be less than it; raise it, lower the delay, or leave it empty (derived)" (int $a.terminationGracePeriodSeconds) (int $s.delaySeconds) (int $s.drainTimeoutSeconds) (ternary " + 2 (sendRetryAfter)" "" $s.sendRetryAfter) (int $needed)) -}}
{{- else -}}
{{- int $a.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{- /* The reserved priority classes the chart's pods use (system-cluster-critical, system-node-critical), as a
list, for the ResourceQuota that admits them outside kube-system. */ -}}
{{- define "gpu-autoscaler.criticalPriorityClasses" -}}
{{- $used := list -}}
{{- if .Values.adapter.enabled }}{{ $used = append $used .Values.adapter.priorityClassName }}{{ end -}}
{{- if .Values.exporter.enabled }}{{ $used = append $used .Values.exporter.priorityClassName }}{{ end -}}
{{- $critical := list -}}
{{- range list "system-cluster-critical" "system-node-critical" -}}
{{- if has . $used }}{{ $critical = append $critical . }}{{ end -}}
{{- end -}}
{{- toYaml $critical -}}
{{- end -}}

{{/*
The APIServices the adapter registers, as a JSON array of [group, version, versionPriority]: apiservice.yaml renders
them, the PrometheusRule's aggregated-API alerts select their names.
*/}}
{{- define "gpu-autoscaler.adapter.apiServices" -}}
{{- $a := .Values.adapter -}}
{{- $versions := list -}}
{{- if $a.enabled -}}
{{- if $a.apiService.customMetrics.enabled -}}
{{- $versions = append $versions (list "custom.metrics.k8s.io" "v1beta2" 200) -}}
{{- $versions = append $versions (list "custom.metrics.k8s.io" "v1beta1" 100) -}}
{{- end -}}
{{- if $a.apiService.externalMetrics.enabled -}}
{{- $versions = append $versions (list "external.metrics.k8s.io" "v1beta1" 100) -}}
{{- end -}}
{{- if $a.apiService.resourceMetrics.enabled -}}
{{- $versions = append $versions (list "metrics.k8s.io" "v1beta1" 100) -}}
{{- end -}}
{{- end -}}
{{- toJson $versions -}}
{{- end -}}
