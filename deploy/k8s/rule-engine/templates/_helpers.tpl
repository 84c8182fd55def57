{{/*
Names and labels shared by every object of the chart (the `helm create` helpers, trimmed).
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "rule-engine.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of the release's objects: fullnameOverride, else the release name when it already
contains the chart name, else "<release>-<chart>". Truncated to 63 characters (DNS label).
*/}}
{{- define "rule-engine.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<chart>-<version>", the helm.sh/chart label value. */}}
{{- define "rule-engine.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The standard app.kubernetes.io labels put on every object. */}}
{{- define "rule-engine.labels" -}}
helm.sh/chart: {{ include "rule-engine.chart" . }}
{{ include "rule-engine.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .Chart.Name }}
app.kubernetes.io/part-of: enforcement
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels that select the release's pods; they never change on upgrade. */}}
{{- define "rule-engine.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rule-engine.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "rule-engine.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rule-engine.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The Secret holding the NATS credentials file: nats.existingSecret, or the one the chart creates
from nats.credentials. Empty when neither is set (the service connects without credentials).
*/}}
{{- define "rule-engine.natsSecretName" -}}
{{- if .Values.nats.existingSecret }}
{{- .Values.nats.existingSecret }}
{{- else if .Values.nats.credentials }}
{{- printf "%s-nats" (include "rule-engine.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The Secret holding the NATS user's password: nats.passwordSecret, or the one the chart creates
from nats.password (the same Secret as for nats.credentials). Empty when neither is set.
*/}}
{{- define "rule-engine.natsPasswordSecretName" -}}
{{- if .Values.nats.passwordSecret }}
{{- .Values.nats.passwordSecret }}
{{- else if .Values.nats.password }}
{{- printf "%s-nats" (include "rule-engine.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The key of the credentials file inside the NATS Secret. */}}
{{- define "rule-engine.natsSecretKey" -}}
{{- if .Values.nats.existingSecret }}{{ .Values.nats.existingSecretKey }}{{ else }}nats.creds{{ end }}
{{- end }}

{{/*
Environment variables every service reads (pkg/service): NATS, the stream's replicas and size
cap, the two listen addresses and the log level. NATS_CREDS points at the mounted credentials file; NATS_USER and NATS_PASSWORD (from a
Secret) are the service's user in the server's authorization configuration.
*/}}
{{- define "rule-engine.commonEnv" -}}
{{- if .Values.nats.url }}
- name: NATS_URL
  value: {{ .Values.nats.url | quote }}
{{- end }}
{{- if include "rule-engine.natsSecretName" . }}
- name: NATS_CREDS
  value: {{ printf "%s/%s" .Values.nats.credentialsMountPath (include "rule-engine.natsSecretKey" .) | quote }}
{{- end }}
{{- $passwordSecret := include "rule-engine.natsPasswordSecretName" . }}
{{- if and .Values.nats.user (not $passwordSecret) }}
{{- fail "nats.user is set: set nats.passwordSecret (an existing Secret) or nats.password as well" }}
{{- end }}
{{- if and $passwordSecret (not .Values.nats.user) }}
{{- fail "nats.password or nats.passwordSecret is set: set nats.user as well" }}
{{- end }}
{{- if and .Values.nats.user (include "rule-engine.natsSecretName" .) }}
{{- fail "nats.user and a NATS credentials file (nats.credentials, nats.existingSecret) are both set: use one" }}
{{- end }}
{{- if .Values.nats.user }}
- name: NATS_USER
  value: {{ .Values.nats.user | quote }}
- name: NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $passwordSecret }}
      key: {{ if .Values.nats.passwordSecret }}{{ .Values.nats.passwordSecretKey }}{{ else }}password{{ end }}
{{- end }}
{{- if .Values.nats.streamReplicas }}
- name: STREAM_REPLICAS
  value: {{ .Values.nats.streamReplicas | quote }}
{{- end }}
{{- if .Values.nats.streamMaxBytes }}
- name: STREAM_MAX_BYTES
  value: {{ .Values.nats.streamMaxBytes | quote }}
{{- end }}
- name: METRICS_ADDR
  value: {{ printf ":%v" .Values.ports.metrics | quote }}
- name: HEALTH_ADDR
  value: {{ printf ":%v" .Values.ports.health | quote }}
{{- if .Values.logLevel }}
- name: LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end }}
{{- end }}

{{/*
Renders a dict of environment variables (name -> value), sorted by name, leaving out the empty
ones so that the service's own default applies.
*/}}
{{- define "rule-engine.envFromDict" -}}
{{- range $name, $value := . }}
{{- if and (not (kindIs "invalid" $value)) (ne (toString $value) "") }}
- name: {{ $name }}
  value: {{ toString $value | quote }}
{{- end }}
{{- end }}
{{- end }}
