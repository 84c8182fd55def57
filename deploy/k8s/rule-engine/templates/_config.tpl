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
  "TEMPLATE_HTTP_ALLOWED_NETWORKS" (join "," .Values.config.templateHTTPAllowedNetworks)
  "TEMPLATE_HTTP_DENIED_NETWORKS" (join "," .Values.config.templateHTTPDeniedNetworks)
  "SOURCE_DEGRADED_TTL" .Values.config.sourceDegradedTTL
  "MAX_REMOVAL_FRACTION" .Values.config.maxRemovalFraction
  "STATUS_INTERVAL" .Values.config.statusInterval
  "RULE_EVENT_INTERVAL" .Values.config.ruleEventInterval
  "LEADER_ELECTION" (ternary "true" "" .Values.leaderElection.enabled)
  "LEADER_ELECTION_NAMESPACE" (ternary (include "rule-engine.leaseNamespace" .) "" .Values.leaderElection.enabled)
  "LEADER_ELECTION_LEASE_DURATION" .Values.leaderElection.leaseDuration
  "LEADER_ELECTION_RENEW_DEADLINE" .Values.leaderElection.renewDeadline
  "LEADER_ELECTION_RETRY_PERIOD" .Values.leaderElection.retryPeriod) }}
{{- end }}

{{/* The namespace of the leader election Lease (LEADER_ELECTION_NAMESPACE). */}}
{{- define "rule-engine.leaseNamespace" -}}
{{- .Values.leaderElection.namespace | default (include "rule-engine.operatorNamespace" .) }}
{{- end }}

{{/* Refuses values the engine cannot run with. */}}
{{- define "rule-engine.validate" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount: more than one rule-engine replica needs leaderElection.enabled=true (without it every replica would publish every intent)" }}
{{- end }}
{{- if and (not .Values.leaderElection.enabled) (ne (toString (dig "type" "" .Values.strategy)) "Recreate") }}
{{- fail "strategy: without leaderElection.enabled use {type: Recreate} (a rolling update would run the old and the new pod side by side)" }}
{{- end }}
{{- end }}

{{/* The chart's own volume mounts and volumes, which the skeleton's deployment.yaml includes:
none. */}}
{{- define "rule-engine.volumeMounts" -}}
{{- end }}

{{- define "rule-engine.volumes" -}}
{{- end }}
