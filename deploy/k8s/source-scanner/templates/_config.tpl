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
  "LIST_TIMEOUT" .Values.config.listTimeout
  "LEADER_ELECTION" (ternary "true" "" .Values.leaderElection.enabled)
  "LEADER_ELECTION_NAMESPACE" (ternary (include "source-scanner.leaseNamespace" .) "" .Values.leaderElection.enabled)
  "LEADER_ELECTION_LEASE_DURATION" .Values.leaderElection.leaseDuration
  "LEADER_ELECTION_RENEW_DEADLINE" .Values.leaderElection.renewDeadline
  "LEADER_ELECTION_RETRY_PERIOD" .Values.leaderElection.retryPeriod) }}
{{- end }}

{{/* The namespace of the leader election Lease (LEADER_ELECTION_NAMESPACE). */}}
{{- define "source-scanner.leaseNamespace" -}}
{{- .Values.leaderElection.namespace | default (include "source-scanner.operatorNamespace" .) }}
{{- end }}

{{/* Refuses values the scanner cannot run with. */}}
{{- define "source-scanner.validate" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount: more than one source-scanner replica needs leaderElection.enabled=true (without it every replica would scan and publish every change)" }}
{{- end }}
{{- if and (not .Values.leaderElection.enabled) (ne (toString (dig "type" "" .Values.strategy)) "Recreate") }}
{{- fail "strategy: without leaderElection.enabled use {type: Recreate} (a rolling update would run the old and the new pod side by side)" }}
{{- end }}
{{- end }}

{{/* The chart's own volume mounts and volumes, which the skeleton's deployment.yaml includes:
none. */}}
{{- define "source-scanner.volumeMounts" -}}
{{- end }}

{{- define "source-scanner.volumes" -}}
{{- end }}
