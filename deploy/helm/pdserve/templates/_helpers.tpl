{{/* Names are DNS-1123 labels: at most 63 characters (Services), with room for suffixes. */}}
{{- define "pdserve.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pdserve.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one role: stable across upgrades (selectors are immutable). */}}
{{- define "pdserve.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
pdserve.io/role: {{ .role }}
{{- end -}}

{{- define "pdserve.labels" -}}
{{ include "pdserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: pdserve
helm.sh/chart: {{ include "pdserve.chart" .root }}
{{- end -}}

{{/* Labels of objects that belong to no single role. */}}
{{- define "pdserve.commonLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pdserve
helm.sh/chart: {{ include "pdserve.chart" . }}
{{- end -}}

{{- define "pdserve.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "pdserve.modelDir" -}}
/models/{{ .Values.model.name }}
{{- end -}}

{{/* The router's registry: a headless Service that lists not-ready routers too, since a
     router is not ready until a decode worker has registered with it. */}}
{{- define "pdserve.registryAddress" -}}
{{ include "pdserve.fullname" . }}-router-registry:{{ .Values.router.ports.registry }}
{{- end -}}

{{/* A gRPC health probe of `service` on `port`. The kubelet's built-in gRPC probe speaks no
TLS: with tls.enabled the probe is `pdctl health` over TLS, presenting the pod's own
certificate (the listener may require one). */}}
{{- define "pdserve.healthProbe" -}}
{{- if .root.Values.tls.enabled -}}
exec:
  command:
    - pdctl
    - health
    - --address=127.0.0.1:{{ .port }}
    - --service={{ .service }}
    - --health_timeout=4s
    - --tls_cert=/etc/pdserve/tls/tls.crt
    - --tls_key=/etc/pdserve/tls/tls.key
    - --tls_ca=/etc/pdserve/tls/ca.crt
    - --tls_server_name={{ .root.Values.tls.serverName }}
{{- else -}}
grpc: {port: {{ .port }}, service: {{ .service }}}
{{- end }}
{{- end -}}

{{/* The flags of every role for TLS and the registration token. */}}
{{- define "pdserve.tlsArgs" -}}
{{- if .Values.tls.enabled }}
- --tls_cert=/etc/pdserve/tls/tls.crt
- --tls_key=/etc/pdserve/tls/tls.key
- --tls_ca=/etc/pdserve/tls/ca.crt
- --tls_server_name={{ .Values.tls.serverName }}
- --tls_reload_interval={{ .Values.tls.reloadInterval }}
{{- end }}
{{- if .Values.registration.tokenSecret }}
- --registration_token_file=/etc/pdserve/registration/{{ .Values.registration.tokenSecretKey }}
{{- end }}
{{- end -}}

{{/* Volumes every role mounts: the model, /tmp, /dev/shm, the TLS and registration secrets. */}}
{{/* The emulated workers' profile (emulated.profile, or the chart's H100 + Llama 3 8B). */}}
{{- define "pdserve.emulatedProfile" -}}
{{- .Values.emulated.profile | default (.Files.Get "files/h100-llama3-8b.json") }}
{{- end -}}

{{/* The router's cost model when none is given: the emulated profile, else deploy/'s default. */}}
{{- define "pdserve.defaultCostModel" -}}
{{- if .Values.emulated.enabled }}
{{- include "pdserve.emulatedProfile" . }}
{{- else }}
{{- .Files.Get "files/cost_model.json" }}
{{- end }}
{{- end -}}

{{/*
The pod's certificate: the shared Secret; for a worker with tls.workerIdentity, a certificate
of its own from cert-manager's csi-driver naming its worker id (<role>-<pod name>, as its
--worker_id) in a URI SAN, and tls.serverName as its DNS name. Args: root, role.
*/}}
{{- define "pdserve.tlsVolume" -}}
{{- $tls := .root.Values.tls }}
{{- if $tls.enabled }}
{{- $identity := $tls.workerIdentity | default dict }}
{{- if and $identity.enabled (ne .role "router") }}
- name: tls
  csi:
    driver: csi.cert-manager.io
    readOnly: true
    volumeAttributes:
      csi.cert-manager.io/issuer-name: {{ required "tls.workerIdentity.issuer.name is required when tls.workerIdentity.enabled is true" $identity.issuer.name | quote }}
      csi.cert-manager.io/issuer-kind: {{ $identity.issuer.kind | quote }}
      csi.cert-manager.io/issuer-group: {{ $identity.issuer.group | quote }}
      csi.cert-manager.io/dns-names: {{ $tls.serverName | quote }}
      csi.cert-manager.io/uri-sans: {{ printf "%s%s-${POD_NAME}" $identity.uriPrefix .role | quote }}
      csi.cert-manager.io/key-usages: "server auth,client auth"
      csi.cert-manager.io/certificate-file: tls.crt
      csi.cert-manager.io/privatekey-file: tls.key
      csi.cert-manager.io/ca-file: ca.crt
{{- else }}
- name: tls
  secret:
    secretName: {{ required "tls.secretName is required when tls.enabled is true" $tls.secretName }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The pod's volumes. Args: root, role (router, prefill, decode). */}}
{{- define "pdserve.volumes" -}}
{{- $root := .root -}}
- name: model
{{- if $root.Values.model.generate.enabled }}
  emptyDir: {}
{{- else }}
{{- toYaml $root.Values.model.volume | nindent 2 }}
{{- end }}
- name: tmp
  emptyDir: {}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ $root.Values.kvTransfer.shm.sizeLimit }}
{{- include "pdserve.tlsVolume" (dict "root" $root "role" .role) }}
{{- if $root.Values.registration.tokenSecret }}
- name: registration-token
  secret:
    secretName: {{ $root.Values.registration.tokenSecret }}
    items:
      - {key: {{ $root.Values.registration.tokenSecretKey }}, path: {{ $root.Values.registration.tokenSecretKey }}}
{{- end }}
{{- if $root.Values.emulated.enabled }}
- name: emulated-profile
  configMap:
    name: {{ include "pdserve.fullname" $root }}-emulated-profile
{{- end }}
{{- end -}}

{{- define "pdserve.volumeMounts" -}}
- name: model
  mountPath: /models
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: dshm
  mountPath: /dev/shm
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/pdserve/tls
  readOnly: true
{{- end }}
{{- if .Values.registration.tokenSecret }}
- name: registration-token
  mountPath: /etc/pdserve/registration
  readOnly: true
{{- end }}
{{- if .Values.emulated.enabled }}
- name: emulated-profile
  mountPath: /etc/pdserve/emulated
  readOnly: true
{{- end }}
{{- end -}}

{{/* The model generator, when the chart makes the model itself. */}}
{{- define "pdserve.initContainers" -}}
{{- if .Values.model.generate.enabled }}
initContainers:
  - name: make-model
    image: {{ include "pdserve.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["pdserve-make-model"]
    args:
      - --out={{ include "pdserve.modelDir" . }}
      - --preset={{ .Values.model.generate.preset }}
      {{- if .Values.emulated.enabled }}
      # Emulated workers read the config and tokenizer only.
      - --weights=false
      {{- end }}
    securityContext:
      {{- include "pdserve.containerSecurityContext" (dict "rdma" false) | nindent 6 }}
    volumeMounts:
      - name: model
        mountPath: /models
{{- end }}
{{- end -}}

{{- define "pdserve.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* RDMA needs to pin (lock) its registered memory: IPC_LOCK. */}}
{{- define "pdserve.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- if .rdma }}
  add: ["IPC_LOCK"]
{{- end }}
{{- end -}}

{{/* A bucket selector for a duration ("2s", "200ms", "1.5s"): le="0.2", or le=~"2|2\\.0" for
     whole seconds (prometheus-cpp writes "2", Prometheus 3 rewrites classic buckets to "2.0"). */}}
{{- define "pdserve.bucketSelector" -}}
{{- $seconds := 0.0 -}}
{{- if hasSuffix "ms" . -}}
{{- $seconds = divf (trimSuffix "ms" . | float64) 1000 -}}
{{- else -}}
{{- $seconds = trimSuffix "s" . | float64 -}}
{{- end -}}
{{- $text := toString $seconds -}}
{{- if contains "." $text -}}
le="{{ $text }}"
{{- else -}}
le=~"{{ $text }}|{{ $text }}\\.0"
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the pods run as. */}}
{{- define "pdserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "pdserve.fullname" .) }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{/*
Pod-spec fields every role shares: its ServiceAccount (no API token: pdserve calls no
Kubernetes API), priority class and topology spread (a constraint without a labelSelector
spreads the role's own pods). Called with (dict "root" $ "role" ROLE "values" ROLE_VALUES).
*/}}
{{- define "pdserve.podScheduling" -}}
{{- $ctx := dict "root" .root "role" .role }}
serviceAccountName: {{ include "pdserve.serviceAccountName" .root }}
automountServiceAccountToken: false
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  {{- $c := deepCopy . }}
  {{- if not (hasKey $c "labelSelector") }}
  {{- $_ := set $c "labelSelector" (dict "matchLabels" (include "pdserve.selectorLabels" $ctx | fromYaml)) }}
  {{- end }}
  - {{ toYaml $c | indent 4 | trim }}
  {{- end }}
{{- end }}
{{- end -}}
