{{/*
One worker role (prefill or decode): its workload, headless Service, PodDisruptionBudget and
PodMonitor. Called with (dict "root" $ "role" "prefill"|"decode" "kind" "StatefulSet"|"Deployment").
*/}}
{{- define "pdserve.worker" -}}
{{- $root := .root }}
{{- $role := .role }}
{{- $v := index $root.Values $role }}
{{- $name := printf "%s-%s" (include "pdserve.fullname" $root) $role }}
{{- $rdma := $root.Values.kvTransfer.rdma }}
{{- $ctx := dict "root" $root "role" $role }}
apiVersion: apps/v1
kind: {{ .kind }}
metadata:
  name: {{ $name }}
  labels:
    {{- include "pdserve.labels" $ctx | nindent 4 }}
spec:
  {{- if not $v.autoscaling.enabled }}
  replicas: {{ $v.replicas }}
  {{- end }}
  {{- if eq .kind "StatefulSet" }}
  serviceName: {{ $name }}
  # Workers are interchangeable: start and stop them in parallel, not one by one.
  podManagementPolicy: Parallel
  updateStrategy:
  {{- else }}
  strategy:
  {{- end }}
    {{- toYaml $v.updateStrategy | nindent 4 }}
  selector:
    matchLabels:
      {{- include "pdserve.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "pdserve.labels" $ctx | nindent 8 }}
      {{- with $v.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- with $root.Values.image.pullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- include "pdserve.podScheduling" (dict "root" $root "role" $role "values" $v) | nindent 6 }}
      securityContext:
        {{- include "pdserve.podSecurityContext" $root | nindent 8 }}
      # Above the drain timeout: running work finishes before the kubelet's SIGKILL.
      terminationGracePeriodSeconds: {{ add $v.drainTimeoutSeconds 15 }}
      {{- include "pdserve.initContainers" $root | nindent 6 }}
      containers:
        - name: {{ $role }}
          image: {{ include "pdserve.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: ["pdserve-{{ $role }}"]
          args:
            - --model={{ include "pdserve.modelDir" $root }}
            - --listen=0.0.0.0:{{ $v.ports.grpc }}
            # Peers reach a worker at its pod IP, which it reports to the router.
            - --advertise_host=$(POD_IP)
            - --worker_id={{ $role }}-$(POD_NAME)
            - --metrics_listen=0.0.0.0:{{ $v.ports.metrics }}
            - --router={{ include "pdserve.registryAddress" $root }}
            - --threads={{ $v.threads }}
            {{- if $root.Values.emulated.enabled }}
            # A GPU profile's timing instead of a forward pass; its cluster sizes the KV pool.
            - --backend=emulated
            - --profile=/etc/pdserve/emulated/profile.json
            {{- else }}
            - --backend={{ $v.backend }}
            {{- end }}
            - --drain_timeout={{ $v.drainTimeoutSeconds }}s
            {{- if $v.roleSwitching }}
            - --role_switching
            {{- end }}
            {{- if and (eq $role "decode") (not $root.Values.emulated.enabled) }}
            - --kv_cache_bytes={{ int64 $v.kvCacheBytes }}
            {{- end }}
            - --ucx_transports={{ $root.Values.kvTransfer.ucx.tls }}
            {{- with $root.Values.kvTransfer.ucx.netDevices }}
            - --ucx_net_devices={{ . }}
            {{- end }}
            {{- include "pdserve.tlsArgs" $root | nindent 12 }}
            {{- with $v.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
            {{- with $v.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - {name: grpc, containerPort: {{ $v.ports.grpc }}, protocol: TCP}
            - {name: metrics, containerPort: {{ $v.ports.metrics }}, protocol: TCP}
          # Startup covers the model load. Ready: model loaded, registered with a router, not
          # draining. Live: the process answers, also while saturated or draining (a restart
          # would lose every stream).
          startupProbe:
            {{- include "pdserve.healthProbe" (dict "root" $root "port" $v.ports.grpc "service" "pdserve.live") | nindent 12 }}
            periodSeconds: {{ $v.probes.startup.periodSeconds }}
            failureThreshold: {{ $v.probes.startup.failureThreshold }}
          readinessProbe:
            {{- include "pdserve.healthProbe" (dict "root" $root "port" $v.ports.grpc "service" "pdserve.ready") | nindent 12 }}
            periodSeconds: {{ $v.probes.readiness.periodSeconds }}
            failureThreshold: {{ $v.probes.readiness.failureThreshold }}
          livenessProbe:
            {{- include "pdserve.healthProbe" (dict "root" $root "port" $v.ports.grpc "service" "pdserve.live") | nindent 12 }}
            periodSeconds: {{ $v.probes.liveness.periodSeconds }}
            timeoutSeconds: {{ $v.probes.liveness.timeoutSeconds }}
            failureThreshold: {{ $v.probes.liveness.failureThreshold }}
          resources:
            {{- $resources := deepCopy $v.resources }}
            {{- $extended := dict }}
            {{- if and (eq $v.backend "cuda") (not $root.Values.emulated.enabled) }}
            {{- $_ := set $extended $root.Values.gpu.resourceName $v.gpus }}
            {{- end }}
            {{- if $rdma.enabled }}
            {{- $_ := set $extended $rdma.resourceName $rdma.count }}
            {{- end }}
            {{- if $extended }}
            {{- /* Extended resources: requests must equal limits. */}}
            {{- $_ := set $resources "requests" (merge (deepCopy ($resources.requests | default dict)) $extended) }}
            {{- $_ := set $resources "limits" (merge (deepCopy ($resources.limits | default dict)) $extended) }}
            {{- end }}
            {{- toYaml $resources | nindent 12 }}
          securityContext:
            {{- include "pdserve.containerSecurityContext" (dict "rdma" $rdma.enabled) | nindent 12 }}
          volumeMounts:
            {{- include "pdserve.volumeMounts" $root | nindent 12 }}
      volumes:
        {{- include "pdserve.volumes" $ctx | nindent 8 }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
---
# Headless: one DNS record per worker pod (the router learns workers from the registry).
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  labels:
    {{- include "pdserve.labels" $ctx | nindent 4 }}
spec:
  clusterIP: None
  selector:
    {{- include "pdserve.selectorLabels" $ctx | nindent 4 }}
  ports:
    - {name: grpc, port: {{ $v.ports.grpc }}, targetPort: grpc, protocol: TCP, appProtocol: grpc}
    - {name: metrics, port: {{ $v.ports.metrics }}, targetPort: metrics, protocol: TCP}
{{- if $v.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  labels:
    {{- include "pdserve.labels" $ctx | nindent 4 }}
spec:
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "pdserve.selectorLabels" $ctx | nindent 6 }}
{{- end }}
{{- if $v.autoscaling.enabled }}
{{- if lt (int $v.autoscaling.maxReplicas) (int $v.autoscaling.minReplicas) }}
{{- fail (printf "%s.autoscaling.maxReplicas: %d is below minReplicas %d" $role (int $v.autoscaling.maxReplicas) (int $v.autoscaling.minReplicas)) }}
{{- end }}
---
# Replicas follow the load; each scale-down drains its pod (the grace period covers it).
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ $name }}
  labels:
    {{- include "pdserve.labels" $ctx | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: {{ .kind }}
    name: {{ $name }}
  minReplicas: {{ $v.autoscaling.minReplicas }}
  maxReplicas: {{ $v.autoscaling.maxReplicas }}
  metrics:
    {{- toYaml $v.autoscaling.metrics | nindent 4 }}
    {{- $miss := $v.autoscaling.ttftSloMiss | default dict }}
    {{- if $miss.enabled }}
    # The release's TTFT objective-miss ratio (deploy/prometheus/adapter-rules.yaml).
    - type: External
      external:
        metric:
          name: pdserve_ttft_slo_miss_ratio
          selector:
            matchLabels:
              namespace: {{ $root.Release.Namespace }}
        target:
          type: Value
          value: {{ $miss.target | quote }}
    {{- end }}
  {{- with $v.autoscaling.behavior }}
  behavior:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}
