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
{{- include "argo-syncer.argocdAPIEnv" . }}
{{- end }}

{{/* API mode's variables: ARGO_URL and its options, the credentials from argocdAPI.existingSecret
(either form: the keys are optional, argo-syncer refuses a wrong combination at start). */}}
{{- define "argo-syncer.argocdAPIEnv" -}}
{{- with .Values.argocdAPI }}
{{- if .url }}
{{- include "argo-syncer.envFromDict" (dict
  "ARGO_URL" .url
  "ARGO_INSECURE" (ternary "true" "" (toString .insecure | eq "true"))
  "ARGO_GRPC_WEB" (ternary "true" "" (toString .grpcWeb | eq "true"))
  "ARGO_GRPC_WEB_ROOT_PATH" .grpcWebRootPath
  "ARGO_POLL_INTERVAL" .pollInterval
  "ARGO_SERVER_CRT" (ternary (printf "%s/%s" (include "argo-syncer.serverCrtDir" $) .serverCrtSecretKey) "" (ne .serverCrtSecret "")) ) }}
{{- range list "ARGO_USERNAME" "ARGO_PASSWORD" "ARGO_TOKEN" }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.argocdAPI.existingSecret }}
      key: {{ . }}
      optional: true
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where argocdAPI.serverCrtSecret is mounted. */}}
{{- define "argo-syncer.serverCrtDir" -}}
/etc/argo-syncer/argocd-server-crt
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
{{- if and .Values.argocdAPI.url (not .Values.argocdAPI.existingSecret) }}
{{- fail "argocdAPI.existingSecret: API mode (argocdAPI.url) needs a Secret with ARGO_USERNAME and ARGO_PASSWORD, or ARGO_TOKEN; the password is never a value" }}
{{- end }}
{{- if and .Values.argocdAPI.url (not (regexMatch "^https?://[^/]+" .Values.argocdAPI.url)) }}
{{- fail (printf "argocdAPI.url %q: want http(s)://host[:port][/path]" .Values.argocdAPI.url) }}
{{- end }}
{{- if not .Values.config.argocdNamespace }}
{{- fail "config.argocdNamespace: must not be empty" }}
{{- end }}
{{- end }}

{{/* The chart's own volume mounts and volumes (the skeleton's deployment.yaml includes both):
the Argo CD server certificate in API mode. */}}
{{- define "argo-syncer.volumeMounts" -}}
{{- if and .Values.argocdAPI.url .Values.argocdAPI.serverCrtSecret }}
- name: argocd-server-crt
  mountPath: {{ include "argo-syncer.serverCrtDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "argo-syncer.volumes" -}}
{{- if and .Values.argocdAPI.url .Values.argocdAPI.serverCrtSecret }}
- name: argocd-server-crt
  secret:
    secretName: {{ .Values.argocdAPI.serverCrtSecret }}
    items:
      - key: {{ .Values.argocdAPI.serverCrtSecretKey }}
        path: {{ .Values.argocdAPI.serverCrtSecretKey }}
{{- end }}
{{- end }}
