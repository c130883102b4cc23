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

{{/* Pod scheduling from a component's values: priorityClassName, nodeSelector, affinity,
  tolerations (each left out when empty). Use: {{- with include "crr.scheduling" .Values.x | trim }}. */}}
{{- define "crr.scheduling" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}

{{/* PodDisruptionBudget: (list $ "crr-operator" .Values.operator). One replica at a time may be
  evicted; none rendered for a single replica (minAvailable 1 would block every drain). */}}
{{- define "crr.podDisruptionBudget" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $values := index . 2 -}}
{{- if and $values.podDisruptionBudget.enabled (gt (int $values.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $root.Values.namespace }}
  labels:
    {{- include "crr.labels" $root | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "crr.selector" $name | nindent 6 }}
{{- end }}
{{- end }}
