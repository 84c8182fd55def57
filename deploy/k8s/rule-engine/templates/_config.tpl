{{/* The namespace of the source Secrets (OPERATOR_NAMESPACE). */}}
{{- define "rule-engine.operatorNamespace" -}}
{{- .Values.config.operatorNamespace | default .Release.Namespace }}
{{- end }}

{{/* The engine's own environment variables (services/rule-engine/main.go). */}}
{{- define "rule-engine.env" -}}
{{- include "rule-engine.envFromDict" (dict
  "OPERATOR_NAMESPACE" (include "rule-engine.operatorNamespace" .)
  "WATCH_NAMESPACES" (join "," .Values.config.watchNamespaces)
  "TEMPLATE_HTTP_ALLOW" (join "," .Values.config.templateHTTPAllow)
  "TEMPLATE_HTTP_TIMEOUT" .Values.config.templateHTTPTimeout
  "SOURCE_DEGRADED_TTL" .Values.config.sourceDegradedTTL
  "STATUS_INTERVAL" .Values.config.statusInterval) }}
{{- end }}

{{/* Refuses values the engine cannot run with. */}}
{{- define "rule-engine.validate" -}}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail "replicaCount: rule-engine must run 1 replica (no leader election yet; a second one would publish every intent twice)" }}
{{- end }}
{{- end }}
