{{/* The namespace of the source Secrets and ConfigMaps (OPERATOR_NAMESPACE). */}}
{{- define "source-scanner.operatorNamespace" -}}
{{- .Values.config.operatorNamespace | default .Release.Namespace }}
{{- end }}

{{/* The scanner's own environment variables (services/source-scanner/config.go). */}}
{{- define "source-scanner.env" -}}
{{- include "source-scanner.envFromDict" (dict
  "OPERATOR_NAMESPACE" (include "source-scanner.operatorNamespace" .)
  "SCAN_INTERVAL" .Values.config.scanInterval
  "GONE_GRACE_PERIOD" .Values.config.goneGracePeriod
  "MAX_REMOVAL_FRACTION" .Values.config.maxRemovalFraction
  "LIST_TIMEOUT" .Values.config.listTimeout) }}
{{- end }}

{{/* Refuses values the scanner cannot run with. */}}
{{- define "source-scanner.validate" -}}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail "replicaCount: source-scanner must run 1 replica (no leader election yet; a second one would scan and publish twice)" }}
{{- end }}
{{- end }}
