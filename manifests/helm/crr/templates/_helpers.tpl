{{/* The namespace of every namespaced object: the release's (helm install -n NAMESPACE). The
  old `namespace` value, when still set, must name the same one. */}}
{{- define "crr.namespace" -}}
{{- if and .Values.namespace (ne .Values.namespace .Release.Namespace) -}}
{{- fail (printf "the value namespace=%s differs from the release's namespace %s: crr installs into the release's namespace (helm install -n %s ...); drop the value" .Values.namespace .Release.Namespace .Values.namespace) -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end }}

{{/* The labels of every object: Helm's and Kubernetes' recommended ones. A component's objects
  add app.kubernetes.io/component (crr.componentLabels). */}}
{{- define "crr.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: crr
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* (list $ "operator"): the labels, the component, and the selector of crr-<component>. */}}
{{- define "crr.componentLabels" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{ include "crr.labels" $root }}
app.kubernetes.io/component: {{ $component }}
{{ include "crr.selector" (printf "crr-%s" $component) }}
{{- end }}

{{/* (list $ "operator"): a component's pod template labels and annotations, with the chart's
  podLabels and podAnnotations. */}}
{{- define "crr.podMetadata" -}}
{{- $root := index . 0 -}}
labels:
  {{- include "crr.componentLabels" . | nindent 2 }}
  {{- with $root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $root.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* imagePullSecrets, when any: part of every pod's spec. */}}
{{- define "crr.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}

{{- define "crr.selector" -}}
app.kubernetes.io/name: {{ . }}
{{- end }}

{{/* image: (list $ "operator") */}}
{{- define "crr.image" -}}
{{- $root := index . 0 -}}
{{- $image := index $root.Values.images (index . 1) -}}
{{ $image.repository }}:{{ $image.tag | default $root.Chart.AppVersion }}{{ with $image.digest }}@{{ . }}{{ end }}
{{- end }}

{{- define "crr.restrictedContainer" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end }}

{{/* Pod scheduling from a component's values: priorityClassName, nodeSelector, affinity,
  tolerations, topologySpreadConstraints (each left out when empty). Use: {{- with include "crr.scheduling" .Values.x | trim }}. */}}
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
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
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
  namespace: {{ include "crr.namespace" $root }}
  labels:
    {{- include "crr.labels" $root | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "crr.selector" $name | nindent 6 }}
{{- end }}
{{- end }}
