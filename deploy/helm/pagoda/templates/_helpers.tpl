{{/* Labels on every object; the selector uses the same two. */}}
{{- define "pagoda.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
