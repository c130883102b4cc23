{{- define "crr.labels" -}}
app.kubernetes.io/part-of: crr
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "crr.selector" -}}
app.kubernetes.io/name: {{ . }}
{{- end }}

{{/* image: (list $ "operator") */}}
{{- define "crr.image" -}}
{{- $root := index . 0 -}}
{{- $image := index $root.Values.images (index . 1) -}}
{{ $image.repository }}:{{ $image.tag | default $root.Chart.AppVersion }}
{{- end }}

{{- define "crr.restrictedContainer" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end }}
