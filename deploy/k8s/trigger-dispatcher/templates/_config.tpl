{{/* The dispatcher's own environment variables (services/trigger-dispatcher/config.go). */}}
{{- define "trigger-dispatcher.env" -}}
{{- include "trigger-dispatcher.envFromDict" (dict
  "TRIGGER_DEFAULT_TIMEOUT" .Values.config.defaultTimeout
  "TRIGGER_MAX_TIMEOUT" .Values.config.maxTimeout
  "TRIGGER_MAX_ATTEMPTS" .Values.config.maxAttempts
  "TRIGGER_BACKOFF_BASE" .Values.config.backoffBase
  "TRIGGER_BACKOFF_MAX" .Values.config.backoffMax
  "TRIGGER_BLOCKED_RETRY_INTERVAL" .Values.config.blockedRetryInterval
  "TRIGGER_DENIED_NETWORKS" .Values.config.deniedNetworks
  "TRIGGER_ALLOWED_NETWORKS" .Values.config.allowedNetworks
  "CONSUMER_BACKOFF_BASE" .Values.config.consumerBackoffBase
  "LEADER_ELECTION" (ternary "true" "" .Values.leaderElection.enabled)
  "LEADER_ELECTION_NAMESPACE" (ternary (include "trigger-dispatcher.leaseNamespace" .) "" .Values.leaderElection.enabled)
  "LEADER_ELECTION_LEASE_DURATION" .Values.leaderElection.leaseDuration
  "LEADER_ELECTION_RENEW_DEADLINE" .Values.leaderElection.renewDeadline
  "LEADER_ELECTION_RETRY_PERIOD" .Values.leaderElection.retryPeriod) }}
{{- end }}

{{/* The namespace of the leader election Lease (LEADER_ELECTION_NAMESPACE). */}}
{{- define "trigger-dispatcher.leaseNamespace" -}}
{{- .Values.leaderElection.namespace | default .Release.Namespace }}
{{- end }}

{{/* Refuses values the dispatcher cannot run with. */}}
{{- define "trigger-dispatcher.validate" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount: more than one trigger-dispatcher replica needs leaderElection.enabled=true (without it every replica would call webhooks out of order)" }}
{{- end }}
{{- if and (not .Values.leaderElection.enabled) (ne (toString (dig "type" "" .Values.strategy)) "Recreate") }}
{{- fail "strategy: without leaderElection.enabled use {type: Recreate} (a rolling update would run the old and the new pod side by side)" }}
{{- end }}
{{- end }}

{{/* The chart's own volume mounts and volumes, which the skeleton's deployment.yaml includes:
none. */}}
{{- define "trigger-dispatcher.volumeMounts" -}}
{{- end }}

{{- define "trigger-dispatcher.volumes" -}}
{{- end }}
