{{/*
The templates of this chart use a deliberate subset of Helm's template language, so that
tests/deploy/helm_render.py (a small renderer of that subset) can render them where no helm
binary can be installed, and compare the result with deploy/*.yaml:
  {{ .Values.a.b }}  {{ .Release.Name }}  {{ .Release.Namespace }}  {{ .Release.Service }}
  {{ .Chart.Name }}  {{ .Chart.Version }}  {{ .Chart.AppVersion }}  {{ .Files.Get "path" }}
  {{- if X }} / {{- else }} / {{- end }}   {{- define "name" }} ... {{- end }}
  pipelines of: include "name" .   toYaml X   nindent N   indent N   quote   default X
  lookup "v1" "Kind" NAMESPACE NAME (empty, as in helm template)   randAlphaNum N   b64enc
Keep to it (no range, with, printf, tpl, lookup, ...) or teach the renderer first.
*/}}

{{/* Labels that select the scheduler's pods. */}}
{{- define "gpufleet.selectorLabels" -}}
app.kubernetes.io/name: gpufleet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end }}

{{/* Labels of every object of the release. */}}
{{- define "gpufleet.labels" -}}
{{ include "gpufleet.selectorLabels" . }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The namespace of the leader-election Lease. */}}
{{- define "gpufleet.leaseNamespace" -}}
{{ .Values.leaderElection.leaseNamespace | default .Release.Namespace }}
{{- end }}

{{/* Labels that select the node agent's pods. */}}
{{- define "gpufleet.agentSelectorLabels" -}}
app.kubernetes.io/name: gpufleet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/* Labels of every object of the node agent. */}}
{{- define "gpufleet.agentLabels" -}}
{{ include "gpufleet.agentSelectorLabels" . }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of the binding key's Secret and the binding annotations' admission policy. */}}
{{- define "gpufleet.bindingLabels" -}}
app.kubernetes.io/name: gpufleet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: binding-key
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
