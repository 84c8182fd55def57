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
  "CONSUMER_BACKOFF_BASE" .Values.config.consumerBackoffBase) }}
{{- end }}

{{/* Refuses values the dispatcher cannot run with (none of its values can be wrong today). */}}
{{- define "trigger-dispatcher.validate" -}}
{{- end }}
