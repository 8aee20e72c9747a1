{{/* The chart's name, at most 63 characters. */}}
{{- define "floodgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the prefix of every object's name. */}}
{{- define "floodgate.fullname" -}}
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

{{- define "floodgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels that select the pods; never changed by an upgrade. */}}
{{- define "floodgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floodgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "floodgate.labels" -}}
helm.sh/chart: {{ include "floodgate.chart" . }}
{{ include "floodgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "floodgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "floodgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "floodgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Whether serve runs on Redis: "true" or "". */}}
{{- define "floodgate.redis" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret }}true{{ end }}
{{- end }}

{{- define "floodgate.redisSecret" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "floodgate.fullname" .)) }}
{{- end }}

{{- define "floodgate.redisSecretKey" -}}
{{- if .Values.redis.existingSecret }}{{ .Values.redis.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{/* Whether serve checks bearer tokens: "true" or "". */}}
{{- define "floodgate.auth" -}}
{{- if or (include "floodgate.clientTokensKey" .) (include "floodgate.adminTokensKey" .) }}true{{ end }}
{{- end }}

{{/* The key of the auth Secret that holds client tokens, or "". */}}
{{- define "floodgate.clientTokensKey" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.clientTokensKey }}{{ else if .Values.auth.clientTokens }}client.tokens{{ end }}
{{- end }}

{{/* The key of the auth Secret that holds admin tokens, or "". */}}
{{- define "floodgate.adminTokensKey" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.adminTokensKey }}{{ else if .Values.auth.adminTokens }}admin.tokens{{ end }}
{{- end }}

{{- define "floodgate.authSecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "floodgate.fullname" .)) }}
{{- end }}

{{- define "floodgate.idKeys" -}}
{{- if or .Values.idKeys.existingSecret .Values.idKeys.keys }}true{{ end }}
{{- end }}

{{- define "floodgate.idKeysSecret" -}}
{{- .Values.idKeys.existingSecret | default (printf "%s-id-keys" (include "floodgate.fullname" .)) }}
{{- end }}

{{- define "floodgate.ledger" -}}
{{- if or .Values.ledger.url .Values.ledger.existingSecret }}true{{ end }}
{{- end }}

{{- define "floodgate.ledgerSecret" -}}
{{- .Values.ledger.existingSecret | default (printf "%s-ledger" (include "floodgate.fullname" .)) }}
{{- end }}

{{- define "floodgate.ledgerSecretKey" -}}
{{- if .Values.ledger.existingSecret }}{{ .Values.ledger.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{/* Whether the rules are mounted: "true" or "". */}}
{{- define "floodgate.config" -}}
{{- if or .Values.rules .Values.existingConfigMap }}true{{ end }}
{{- end }}

{{- define "floodgate.configMap" -}}
{{- .Values.existingConfigMap | default (printf "%s-rules" (include "floodgate.fullname" .)) }}
{{- end }}

{{/* The most replicas that may run at once. */}}
{{- define "floodgate.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.maxReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
floodgate.check fails the render on values that each match the schema but
do not go together.
*/}}
{{- define "floodgate.check" -}}
{{- if and (gt (int (include "floodgate.maxReplicas" .)) 1) (not (include "floodgate.redis" .)) }}
{{- fail "floodgate: more than one replica (replicaCount or autoscaling) needs redis.url or redis.existingSecret: on the embedded memory store each replica would count alone" }}
{{- end }}
{{- if and .Values.rules .Values.existingConfigMap }}
{{- fail "floodgate: set rules or existingConfigMap, not both" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "floodgate: autoscaling.minReplicas is above autoscaling.maxReplicas" }}
{{- end }}
{{- end }}
