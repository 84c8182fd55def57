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
  "SHUTDOWN_TIMEOUT" .Values.config.shutdownTimeout) }}
{{- end }}

{{/* Refuses values the syncer cannot run with. */}}
{{- define "argo-syncer.validate" -}}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail "replicaCount: argo-syncer must run 1 replica (no leader election yet; two could write one cluster's objects at once)" }}
{{- end }}
{{- if not .Values.config.argocdNamespace }}
{{- fail "config.argocdNamespace: must not be empty" }}
{{- end }}
{{- end }}
