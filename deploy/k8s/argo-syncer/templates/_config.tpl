{{/* The namespace of the source Secrets (OPERATOR_NAMESPACE). */}}
{{- define "argo-syncer.operatorNamespace" -}}
{{- .Values.config.operatorNamespace | default .Release.Namespace }}
{{- end }}

{{/* The syncer's own environment variables (services/argo-syncer/config.go). */}}
{{- define "argo-syncer.env" -}}
{{- include "argo-syncer.envFromDict" (dict
  "OPERATOR_NAMESPACE" (include "argo-syncer.operatorNamespace" .)
  "ARGOCD_NAMESPACE" .Values.config.argocdNamespace
  "SYNC_CONCURRENCY" .Values.config.syncConcurrency
  "KUBE_QPS" .Values.config.kubeQPS
  "KUBE_BURST" .Values.config.kubeBurst
  "PROJECT_SOURCE_REPOS" .Values.config.projectSourceRepos
  "PROJECT_CLUSTER_RESOURCES" .Values.config.projectClusterResources
  "SOURCE_SECRET_TTL" .Values.config.sourceSecretTTL
  "RESYNC_INTERVAL" .Values.config.resyncInterval
  "SHUTDOWN_TIMEOUT" .Values.config.shutdownTimeout
  "LEADER_ELECTION" (ternary "true" "" .Values.leaderElection.enabled)
  "LEADER_ELECTION_NAMESPACE" (ternary (include "argo-syncer.leaseNamespace" .) "" .Values.leaderElection.enabled)
  "LEADER_ELECTION_LEASE_DURATION" .Values.leaderElection.leaseDuration
  "LEADER_ELECTION_RENEW_DEADLINE" .Values.leaderElection.renewDeadline
  "LEADER_ELECTION_RETRY_PERIOD" .Values.leaderElection.retryPeriod) }}
{{- end }}

{{/* The namespace of the leader election Lease (LEADER_ELECTION_NAMESPACE). */}}
{{- define "argo-syncer.leaseNamespace" -}}
{{- .Values.leaderElection.namespace | default (include "argo-syncer.operatorNamespace" .) }}
{{- end }}

{{/* Refuses values the syncer cannot run with. */}}
{{- define "argo-syncer.validate" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount: more than one argo-syncer replica needs leaderElection.enabled=true (without it every replica would write one cluster's objects at once)" }}
{{- end }}
{{- if and (not .Values.leaderElection.enabled) (ne (toString (dig "type" "" .Values.strategy)) "Recreate") }}
{{- fail "strategy: without leaderElection.enabled use {type: Recreate} (a rolling update would run the old and the new pod side by side)" }}
{{- end }}
{{- if not .Values.config.argocdNamespace }}
{{- fail "config.argocdNamespace: must not be empty" }}
{{- end }}
{{- end }}
