{{/* Names are fixed, not release-prefixed: the admission policies and the
README name these accounts, and the cluster-scoped objects allow one
installation per cluster. */}}
{{- define "gpushare.extenderName" -}}gpushare-scheduler-extender{{- end }}
{{- define "gpushare.schedulerName" -}}gpushare-scheduler{{- end }}
{{- define "gpushare.pluginName" -}}gpushare-device-plugin{{- end }}
{{- define "gpushare.mpsDaemonsName" -}}gpushare-mps-daemons{{- end }}
{{- define "gpushare.draDriverName" -}}gpushare-dra-driver{{- end }}
{{- define "gpushare.webhookName" -}}gpushare-scheduler-webhook{{- end }}

{{- define "gpushare.extenderUser" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpushare.extenderName" . }}{{- end }}
{{- define "gpushare.pluginUser" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpushare.pluginName" . }}{{- end }}
{{- define "gpushare.draDriverUser" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpushare.draDriverName" . }}{{- end }}

{{- define "gpushare.labels" -}}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
app.kubernetes.io/part-of: gpushare
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* A pod template's labels: its name (the selector's), the release, and
part-of, which every pod of the chart carries so that one selector finds
them all (kubectl get pods -l app.kubernetes.io/part-of=gpushare).
Arguments: a dict with root and name. */}}
{{- define "gpushare.podLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: gpushare
{{- end }}

{{/* The second scheduler's image. Its tag is scheduler.image.tag, else the
cluster's version (vMAJOR.MINOR.PATCH of .Capabilities.KubeVersion, the API
server Helm talks to; helm template uses --kube-version), so kube-scheduler
never skews against kube-apiserver. Kubernetes' skew policy lets
kube-scheduler be at most one minor version older than kube-apiserver and
never newer: an explicit tag that is a version outside that range fails the
render, naming both versions and the fix. A tag that is not a version (a
private build) is taken as is. */}}
{{- define "gpushare.schedulerImage" -}}
{{- $kv := semver .Capabilities.KubeVersion.Version -}}
{{- $cluster := printf "v%d.%d.%d" $kv.Major $kv.Minor $kv.Patch -}}
{{- $tag := .Values.scheduler.image.tag | default $cluster -}}
{{- if and .Values.scheduler.image.tag (regexMatch "^v?[0-9]+\\.[0-9]+\\.[0-9]+([-+].*)?$" $tag) -}}
{{- $t := semver $tag -}}
{{- $cm := int $kv.Minor -}}{{- $tm := int $t.Minor -}}
{{- if or (ne (int $t.Major) (int $kv.Major)) (gt $tm $cm) (lt $tm (sub $cm 1)) -}}
{{- fail (printf "scheduler.image.tag %s does not fit the cluster's Kubernetes %s: kube-scheduler may be at most one minor version older than kube-apiserver and never newer (https://kubernetes.io/releases/version-skew-policy/); leave scheduler.image.tag empty to run %s, or set a version from v%d.%d to v%d.%d" $tag .Capabilities.KubeVersion.Version $cluster $kv.Major (sub $cm 1) $kv.Major $cm) -}}
{{- end -}}
{{- end -}}
{{ .Values.scheduler.image.repository }}:{{ $tag }}
{{- end }}

{{/* The minor version of the second scheduler's kube-scheduler: that of
scheduler.image.tag when it is a version, else the cluster's (as
gpushare.schedulerImage picks it). Its ClusterRole follows it. */}}
{{- define "gpushare.schedulerMinor" -}}
{{- $tag := .Values.scheduler.image.tag -}}
{{- if and $tag (regexMatch "^v?[0-9]+\\.[0-9]+\\.[0-9]+([-+].*)?$" $tag) -}}
{{- (semver $tag).Minor -}}
{{- else -}}
{{- (semver .Capabilities.KubeVersion.Version).Minor -}}
{{- end -}}
{{- end }}

{{/* An image's name: image.registry (with or without its trailing
slash), the repository and the tag. */}}
{{- define "gpushare.image" -}}
{{- $root := index . 0 }}{{ $img := index . 1 -}}
{{ with $root.Values.image.registry }}{{ trimSuffix "/" . }}/{{ end }}{{ $img.repository }}:{{ $img.tag | default $root.Chart.AppVersion }}
{{- end }}

{{/* The urlPrefix of the operator's kube-scheduler in the extender topology. */}}
{{- define "gpushare.extenderURL" -}}
{{- $host := printf "%s.%s.svc" (include "gpushare.extenderName" .) .Release.Namespace -}}
{{- with .Values.extender.service.clusterIP }}{{ $host = . }}{{ end -}}
https://{{ $host }}:{{ .Values.extender.service.port }}/gpushare-scheduler
{{- end }}

{{/* The extenders stanza of a KubeSchedulerConfiguration. Arguments: a
dict with url, https (bool), and the root context. */}}
{{- define "gpushare.extenderStanza" -}}
{{- $v := .root.Values -}}
extenders:
- urlPrefix: {{ .url }}
  filterVerb: filter
  bindVerb: bind
  # GPU pods' preemption: the extender's (docs/design/preemption.md).
  preemptVerb: preempt
  enableHTTPS: {{ .https }}
  {{- if .https }}
  tlsConfig:
    certFile: /etc/gpushare/scheduler-tls/tls.crt
    keyFile: /etc/gpushare/scheduler-tls/tls.key
    caFile: /etc/gpushare/scheduler-tls/ca.crt
  {{- end }}
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: {{ $v.scheduler.extenderTimeout }}
  managedResources:
  - name: aliyun.com/gpu-mem
    ignoredByScheduler: false
  # Card counts are the extender's to check (config/kube-scheduler-config.yaml).
  - name: aliyun.com/gpu-count
    ignoredByScheduler: true
# Claim pods of the DRA driver marked gpushare.io/dra-claim (the extender's
# --dra-node-choice, on with draDriver.enabled): its node choice only;
# ignorable, no bind (config/kube-scheduler-config.yaml).
- urlPrefix: {{ .url }}
  filterVerb: filter
  enableHTTPS: {{ .https }}
  {{- if .https }}
  tlsConfig:
    certFile: /etc/gpushare/scheduler-tls/tls.crt
    keyFile: /etc/gpushare/scheduler-tls/tls.key
    caFile: /etc/gpushare/scheduler-tls/ca.crt
  {{- end }}
  nodeCacheCapable: true
  ignorable: true
  httpTimeout: 2s
  managedResources:
  - name: gpushare.io/dra-claim
    ignoredByScheduler: true
{{- if .root.Values.extender.scoreCPUPods }}
{{- if ne .root.Values.topology "extender" }}
{{- fail "extender.scoreCPUPods needs topology: extender (in the second-scheduler topology the cluster's own kube-scheduler places the pods that ask no GPU memory, and they never reach the chart's)" }}
{{- end }}
# Opt-in (extender.scoreCPUPods): every pod, GPU or not, through the
# extender's prioritize: config/kube-scheduler-config-score-cpu-pods.yaml.
- urlPrefix: {{ .url }}
  prioritizeVerb: prioritize
  weight: 1
  enableHTTPS: {{ .https }}
  {{- if .https }}
  tlsConfig:
    certFile: /etc/gpushare/scheduler-tls/tls.crt
    keyFile: /etc/gpushare/scheduler-tls/tls.key
    caFile: /etc/gpushare/scheduler-tls/ca.crt
  {{- end }}
  nodeCacheCapable: true
  ignorable: true
  httpTimeout: 2s
{{- end }}
{{- end }}

{{/* The extender's flags common to both topologies. */}}
{{- define "gpushare.extenderArgs" -}}
- --policy={{ .Values.extender.policy }}
- --filter-best={{ .Values.extender.filterBest }}
- --assume-ttl={{ .Values.extender.assumeTTL }}
- --percentage-of-nodes-to-score={{ .Values.scheduler.percentageOfNodesToScore }}
- --kube-api-qps={{ .Values.extender.kubeAPIQPS }}
- --kube-api-burst={{ .Values.extender.kubeAPIBurst }}
{{- if .Values.draDriver.enabled }}
- --dra-node-choice
{{- end }}
- --metrics-listen=:{{ .Values.extender.metricsPort }}
- -v={{ .Values.extender.verbosity }}
{{- with .Values.extender.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The extender container's probes, on the plain metrics listener. */}}
{{- define "gpushare.extenderProbes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 5
  failureThreshold: 3
startupProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 2
  failureThreshold: 30
{{- end }}

{{/* Non-root, read-only, no privileges: the extender's image runs as 65532. */}}
{{- define "gpushare.restrictedSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* cert-manager issuerRef: the operator's, or the chart's CA Issuer. */}}
{{- define "gpushare.issuerRef" -}}
{{- if .Values.tls.certManager.issuerRef -}}
{{ toYaml .Values.tls.certManager.issuerRef }}
{{- else -}}
name: gpushare-ca
kind: Issuer
group: cert-manager.io
{{- end }}
{{- end }}

{{/* The whole KubeSchedulerConfiguration for the operator's kube-scheduler
(extender topology). */}}
{{- define "gpushare.operatorSchedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
  qps: {{ .Values.scheduler.qps }}
  burst: {{ .Values.scheduler.burst }}
leaderElection:
  leaderElect: true
percentageOfNodesToScore: {{ .Values.scheduler.percentageOfNodesToScore }}
{{ include "gpushare.extenderStanza" (dict "root" . "url" (include "gpushare.extenderURL" .) "https" true) }}
{{- end }}

{{/* cert-manager: without an issuerRef, a self-signed Issuer makes the
chart's CA and a CA Issuer signs with it. */}}
{{- define "gpushare.certManagerCA" -}}
{{- if not .Values.tls.certManager.issuerRef }}
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: gpushare-selfsigned
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "gpushare.labels" . | nindent 4 }}
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: gpushare-ca
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "gpushare.labels" . | nindent 4 }}
spec:
  isCA: true
  commonName: gpushare-ca
  secretName: gpushare-ca
  duration: 87600h
  privateKey:
    algorithm: ECDSA
    size: 256
  issuerRef:
    name: gpushare-selfsigned
    kind: Issuer
    group: cert-manager.io
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: gpushare-ca
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "gpushare.labels" . | nindent 4 }}
spec:
  ca:
    secretName: gpushare-ca
{{- end }}
{{- end }}

{{- define "gpushare.schedulerConfigChecksum" -}}
{{- toJson (list .Values.scheduler .Values.extender.port) | sha256sum -}}
{{- end }}

{{/* The Lease of an election, with no holder: no account of ours may create
a Lease (rbac.yaml says why), so the chart does. Arguments: a dict with root
and name. Left out where the Lease exists and is not this release's: the
elector of a release from before the chart made its Leases made it, and
Helm would refuse to take it over; the elector keeps using it. */}}
{{- define "gpushare.lease" -}}
{{- $ns := .root.Release.Namespace -}}
{{- $live := lookup "coordination.k8s.io/v1" "Lease" $ns .name -}}
{{- $owner := list (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $live) (dig "metadata" "annotations" "meta.helm.sh/release-namespace" "" $live) -}}
{{- if or (not $live) (eq (join "/" $owner) (printf "%s/%s" .root.Release.Name $ns)) }}
---
# An election's Lease, created here with no holder: the elector takes it
# with an update, the only write its Role allows.
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: {{ .name }}
  namespace: {{ $ns }}
  labels:
    {{- include "gpushare.labels" .root | nindent 4 }}
{{- end }}
{{- end }}

{{/* kubectl's selection of the device plugin's nodes: -l with its
nodeSelector, or --all without one. */}}
{{- define "gpushare.pluginNodes" -}}
{{- $sel := list }}
{{- range $k, $v := .Values.devicePlugin.nodeSelector }}{{ $sel = append $sel (printf "%s=%s" $k $v) }}{{ end }}
{{- if $sel }}-l {{ join "," $sel }}{{ else }}--all{{ end }}
{{- end }}

{{/* Whether the MPS daemons' DaemonSet runs: the plugin or the DRA driver
may choose mps (devicePlugin.isolation auto or mps). */}}
{{- define "gpushare.mpsDaemons" -}}
{{- if and (or .Values.devicePlugin.enabled .Values.draDriver.enabled) (has .Values.devicePlugin.isolation (list "auto" "mps")) }}true{{ end -}}
{{- end }}
