{{/* The namespace whose Policies are folded (WATCH_NAMESPACE). */}}
{{- define "policy-watcher.watchNamespace" -}}
{{- .Values.config.watchNamespace | default .Release.Namespace }}
{{- end }}

{{/* The watcher's own environment variables (services/policy-watcher/config.go). */}}
{{- define "policy-watcher.env" -}}
{{- include "policy-watcher.envFromDict" (dict
  "WATCH_NAMESPACE" (include "policy-watcher.watchNamespace" .)
  "CLUSTER_NAME" .Values.config.clusterName
  "POLL_INTERVAL_SEC" .Values.config.pollIntervalSec
  "STABLE_DURATION_SEC" .Values.config.stableDurationSec
  "TARGET_CLAIM_NAME" .Values.config.targetClaimName) }}
{{- end }}

{{/* Nothing to refuse: every value has a working default. */}}
{{- define "policy-watcher.validate" -}}
{{- end }}

{{/* The chart's own volume mounts and volumes, which the skeleton's deployment.yaml includes:
none. */}}
{{- define "policy-watcher.volumeMounts" -}}
{{- end }}

{{- define "policy-watcher.volumes" -}}
{{- end }}
