{{- define "trainyard.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "trainyard.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "trainyard.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trainyard.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{ .Values.database.existingSecret }}
{{- else -}}
{{ include "trainyard.fullname" . }}-database
{{- end -}}
{{- end -}}

{{- define "trainyard.serviceAccount" -}}
{{ .Values.kubernetes.serviceAccountName | default (include "trainyard.fullname" .) }}
{{- end -}}

{{- define "trainyard.agentAccount" -}}
{{ include "trainyard.fullname" . }}-agent
{{- end -}}

{{/* The agents' pods: a name of their own, so the server's Service never selects them. */}}
{{- define "trainyard.agentSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
