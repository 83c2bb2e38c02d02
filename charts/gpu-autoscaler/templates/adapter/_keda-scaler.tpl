{{/* KEDA's external scaler, served by the adapter pods (adapter.kedaScaler; docs/keda.md). */}}

{{- define "gpu-autoscaler.kedaScaler.fullname" -}}
{{- printf "%s-keda-scaler" (include "gpu-autoscaler.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* Where the client Secret lives: KEDA's namespace when the chart writes the ClusterTriggerAuthentication
(KEDA reads its Secrets there), else the release's. */ -}}
{{- define "gpu-autoscaler.kedaScaler.clientNamespace" -}}
{{- $k := .Values.adapter.kedaScaler -}}
{{- if $k.clusterTriggerAuthentication.enabled -}}{{ $k.clusterTriggerAuthentication.kedaNamespace }}{{- else -}}{{ .Release.Namespace }}{{- end -}}
{{- end -}}

{{/*
tls.mode "generated": one CA that signs the scaler's certificate (the Service's names) and KEDA's client
certificate; the scaler requires client certificates from it and KEDA verifies the scaler against it. Reused from
the two Secrets when both exist (an upgrade keeps what KEDA trusts), else made anew. Computed once per render.
Returns YAML: {ca, cert, key, clientCert, clientKey} as PEM.
*/}}
{{- define "gpu-autoscaler.kedaScaler.generatedTLS" -}}
{{- if not (hasKey .Values "__kedaScalerTLS") -}}
{{- $name := include "gpu-autoscaler.kedaScaler.fullname" . -}}
{{- $server := lookup "v1" "Secret" .Release.Namespace (printf "%s-tls" $name) -}}
{{- $client := lookup "v1" "Secret" (include "gpu-autoscaler.kedaScaler.clientNamespace" .) (printf "%s-client" $name) -}}
{{- $tls := dict -}}
{{- if and $server (index $server "data") $client (index $client "data") (hasKey $server.data "ca.crt") (hasKey $server.data "tls.crt") (hasKey $server.data "tls.key") (hasKey $client.data "tls.crt") (hasKey $client.data "tls.key") -}}
{{- $tls = dict "ca" (index $server.data "ca.crt" | b64dec) "cert" (index $server.data "tls.crt" | b64dec) "key" (index $server.data "tls.key" | b64dec) "clientCert" (index $client.data "tls.crt" | b64dec) "clientKey" (index $client.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $host := printf "%s.%s.svc" $name .Release.Namespace -}}
{{- $days := int .Values.adapter.kedaScaler.tls.validityDays -}}
{{- $ca := genCA (printf "%s-ca" $name) $days -}}
{{- $cert := genSignedCert $host nil (list $host (printf "%s.cluster.local" $host) (printf "%s.%s" $name .Release.Namespace) $name) $days $ca -}}
{{- $keda := genSignedCert "keda-operator" nil nil $days $ca -}}
{{- $tls = dict "ca" $ca.Cert "cert" $cert.Cert "key" $cert.Key "clientCert" $keda.Cert "clientKey" $keda.Key -}}
{{- end -}}
{{- $_ := set .Values "__kedaScalerTLS" $tls -}}
{{- end -}}
{{- toYaml .Values.__kedaScalerTLS -}}
{{- end -}}

{{- /* The adapter container's flags for the scaler (Deployment args). */ -}}
{{- define "gpu-autoscaler.kedaScaler.args" -}}
{{- $k := .Values.adapter.kedaScaler -}}
- --keda-scaler-port={{ $k.containerPort }}
- --keda-scaler-stream-interval={{ $k.streamInterval }}
{{- with $k.limits }}
- --keda-scaler-max-requests-inflight={{ int .maxRequestsInflight }}
- --keda-scaler-max-streams={{ int .maxStreams }}
- --keda-scaler-max-connections={{ int .maxConnections }}
- --keda-scaler-handshake-timeout={{ .handshakeTimeout }}
- --keda-scaler-max-connection-idle={{ .maxConnectionIdle }}
- --keda-scaler-max-connection-age={{ .maxConnectionAge }}
- --keda-scaler-max-connection-age-grace={{ .maxConnectionAgeGrace }}
- --keda-scaler-keepalive-min-time={{ .keepaliveMinTime }}
{{- end }}
{{- if eq $k.tls.mode "insecure" }}
- --keda-scaler-insecure
{{- else }}
- --keda-scaler-tls-cert-file=/var/run/keda-scaler-cert/tls.crt
- --keda-scaler-tls-private-key-file=/var/run/keda-scaler-cert/tls.key
- --keda-scaler-client-ca-file=/var/run/keda-scaler-cert/ca.crt
{{- end }}
{{- end -}}

{{- define "gpu-autoscaler.kedaScaler.port" -}}
- name: keda-grpc
  containerPort: {{ .Values.adapter.kedaScaler.containerPort }}
  protocol: TCP
{{- end -}}

{{- define "gpu-autoscaler.kedaScaler.volumeMount" -}}
{{- if ne .Values.adapter.kedaScaler.tls.mode "insecure" -}}
- name: keda-scaler-cert
  mountPath: /var/run/keda-scaler-cert
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "gpu-autoscaler.kedaScaler.volume" -}}
{{- if ne .Values.adapter.kedaScaler.tls.mode "insecure" -}}
- name: keda-scaler-cert
  secret:
    secretName: {{ include "gpu-autoscaler.kedaScaler.fullname" . }}-tls
{{- end -}}
{{- end -}}
