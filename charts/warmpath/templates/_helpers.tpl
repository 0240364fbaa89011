{{/* Chart name, truncated to the 63 characters Kubernetes names allow. */}}
{{- define "warmpath.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart, or the release name when it already contains the chart name. */}}
{{- define "warmpath.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every resource; pass a dict with "ctx" (the root) and "component". */}}
{{- define "warmpath.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{ include "warmpath.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: warmpath
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels; pass a dict with "ctx" and "component". */}}
{{- define "warmpath.selectorLabels" -}}
app.kubernetes.io/name: {{ include "warmpath.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A warmpath image reference; pass a dict with "ctx" and "image" (one of .Values.images.*). */}}
{{- define "warmpath.image" -}}
{{- $repo := .image.repository -}}
{{- with .ctx.Values.images.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- printf "%s:%s" $repo (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* Whether to render ServiceMonitors: forced by the value, else when the API is served. */}}
{{- define "warmpath.serviceMonitors" -}}
{{- $v := toString .Values.monitoring.serviceMonitors.enabled -}}
{{- if or (eq $v "true") (and (eq $v "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) -}}
true
{{- end -}}
{{- end -}}

{{- define "warmpath.operator.serviceAccountName" -}}
{{- default (printf "%s-operator" (include "warmpath.fullname" .)) .Values.operator.serviceAccount.name -}}
{{- end -}}

{{- define "warmpath.cacheserver.fullname" -}}
{{- printf "%s-cacheserver" (include "warmpath.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "warmpath.redis.fullname" -}}
{{- printf "%s-redis" (include "warmpath.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The L2 URL an endpoint gets when it names none: the chart's Redis. */}}
{{- define "warmpath.redis.url" -}}
{{- printf "redis://%s.%s.svc:6379" (include "warmpath.redis.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/*
The disk tier's volume size in bytes: the tier's capacity plus a tenth (its
accounting ignores file-system block rounding) plus one largest object (the
temporary file written before an eviction makes room), so the kubelet does not
evict the pod at an emptyDir's sizeLimit, nor a PVC fill, while the tier is
within its bound.
*/}}
{{- define "warmpath.cacheserver.diskVolumeBytes" -}}
{{- $cap := include "warmpath.bytes" .Values.cacheserver.disk.capacity | int64 -}}
{{- add $cap (div $cap 10) 268435456 -}}
{{- end -}}

{{/* A Kubernetes quantity (4Gi, 512Mi, 1G, or plain bytes) as bytes. */}}
{{- define "warmpath.bytes" -}}
{{- $q := toString . -}}
{{- $units := dict "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- $out := "" -}}
{{- range $u, $m := $units -}}
{{- if and (not $out) (hasSuffix $u $q) -}}
{{- $out = mul (int64 (trimSuffix $u $q)) $m | toString -}}
{{- end -}}
{{- end -}}
{{- default (int64 $q | toString) $out -}}
{{- end -}}

{{/*
NetworkPolicy peers for the release's workers: pods carrying the labels the
operator sets on every worker (services/operator/internal/controller/meta.go),
in the release namespace, the namespaces of this chart's endpoints, and the
extra namespaces given. Each namespace is matched by kubernetes.io/metadata.name,
which the API server sets and no tenant can, so a pod elsewhere that copies
the labels is not admitted. Pass a dict with "ctx", "extra" (a list) and,
for the operator's routers instead of its workers, "component" "router".
*/}}
{{- define "warmpath.workerPeers" -}}
{{- $nss := list .ctx.Release.Namespace -}}
{{- range .ctx.Values.endpoints }}
{{- $nss = append $nss (default $.ctx.Release.Namespace .namespace) -}}
{{- end }}
{{- range $ns := concat $nss (default list .extra) | uniq }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ $ns }}
  podSelector:
    matchLabels:
      app.kubernetes.io/name: warmpath
      app.kubernetes.io/component: {{ default "worker" $.component }}
      app.kubernetes.io/managed-by: warmpath-operator
{{- end }}
{{- end -}}

{{/*
Pod scheduling of a workload the chart runs: pull secrets (the chart-wide
imagePullSecrets, then the component's own), priority and runtime class, node
selector, tolerations, affinity and topology spread. A topology spread
constraint without a labelSelector is given the component's selector labels,
as the operator does for its pods: Kubernetes counts only the pods a
constraint selects, so without one it would spread nothing. Pass a dict with
"ctx" (the root), "component" and "values" (the component's values).
*/}}
{{- define "warmpath.podScheduling" -}}
{{- with concat (default list .ctx.Values.imagePullSecrets) (default list .values.imagePullSecrets) | uniq }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
{{- $own := include "warmpath.selectorLabels" (dict "ctx" $.ctx "component" $.component) | fromYaml }}
{{- $spread := list }}
{{- range . }}
{{- $c := deepCopy . }}
{{- if not $c.labelSelector }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $own) }}
{{- end }}
{{- $spread = append $spread $c }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $spread | nindent 2 }}
{{- end }}
{{- end -}}
