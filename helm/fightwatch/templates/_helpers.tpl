{{/* Names, labels and small computed values shared by every template. */}}

{{- define "fightwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fightwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fightwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fightwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fightwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fightwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fightwatch
{{- end }}

{{- define "fightwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fightwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "fightwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The serving port's name and scheme: https, or http with insecureHTTP (development only). */}}
{{- define "fightwatch.scheme" -}}
{{- if .Values.insecureHTTP }}http{{ else }}https{{ end }}
{{- end }}

{{/* Where the pod finds the serving certificate (tls.source other than selfSigned). */}}
{{- define "fightwatch.tls.mountPath" -}}
/etc/fightwatch/tls
{{- end }}

{{/*
The kubernetes.io/tls Secret served from: "" when fightwatch serves a self-signed certificate (tls.source
selfSigned) or plain HTTP (insecureHTTP). Fails on an unknown source or a source missing its settings.
*/}}
{{- define "fightwatch.tls.secretName" -}}
{{- if not .Values.insecureHTTP }}
{{- $source := .Values.tls.source }}
{{- if or (eq $source "helm") (eq $source "certManager") }}
{{- printf "%s-tls" (include "fightwatch.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else if eq $source "secret" }}
{{- required "tls.source=secret needs tls.secret.name: an existing kubernetes.io/tls Secret (tls.crt, tls.key and ca.crt) in the release namespace" .Values.tls.secret.name }}
{{- else if ne $source "selfSigned" }}
{{- fail (printf "tls.source must be helm, certManager, secret or selfSigned, not %q" $source) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The names the serving certificate is for (helm and certManager sources): the Service's, as a JSON list. */}}
{{- define "fightwatch.tls.dnsNames" -}}
{{- $fullname := include "fightwatch.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $names := list $fullname (printf "%s.%s" $fullname $ns) (printf "%s.%s.svc" $fullname $ns) (printf "%s.%s.svc.cluster.local" $fullname $ns) }}
{{- concat $names .Values.tls.extraDnsNames | uniq | toJson }}
{{- end }}

{{/* The pod template shared by the Deployment and, with sharding, the StatefulSet. */}}
{{- define "fightwatch.podTemplate" -}}
metadata:
  labels:
    {{- include "fightwatch.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # Roll the pods when the configuration changes.
    checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "fightwatch.serviceAccountName" . }}
  automountServiceAccountToken: true
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: fightwatch
      image: {{ include "fightwatch.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - --config=/etc/fightwatch/config.yaml
        - --listen=:{{ .Values.service.port }}
        - --log-level={{ .Values.logLevel }}
        {{- if .Values.sharding.enabled }}
        - --shard=$(POD_NAME)
        - --total-shards={{ .Values.sharding.shards }}
        {{- end }}
        {{- with .Values.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      env:
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: {{ include "fightwatch.scheme" . }}
          containerPort: {{ .Values.service.port }}
          protocol: TCP
        {{- if .Values.auditWebhook.enabled }}
        - name: audit
          containerPort: {{ .Values.auditWebhook.port }}
          protocol: TCP
        {{- end }}
      # /healthz and /readyz answer without authentication (their status; details need `get` on the path). The
      # kubelet does not verify the serving certificate.
      startupProbe:
        httpGet:
          path: /healthz
          port: {{ include "fightwatch.scheme" . }}
          scheme: {{ include "fightwatch.scheme" . | upper }}
        periodSeconds: 5
        failureThreshold: 24
      livenessProbe:
        httpGet:
          path: /healthz
          port: {{ include "fightwatch.scheme" . }}
          scheme: {{ include "fightwatch.scheme" . | upper }}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 6
      readinessProbe:
        httpGet:
          path: /readyz
          port: {{ include "fightwatch.scheme" . }}
          scheme: {{ include "fightwatch.scheme" . | upper }}
        periodSeconds: 10
        timeoutSeconds: 5
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/fightwatch
          readOnly: true
        - name: tmp
          mountPath: /tmp
        {{- if include "fightwatch.tls.secretName" . }}
        # The Secret's directory, not subPath files: a renewed certificate reaches the running pod (and fightwatch
        # re-reads it when it changes).
        - name: tls
          mountPath: {{ include "fightwatch.tls.mountPath" . }}
          readOnly: true
        {{- end }}
        {{- if .Values.auditWebhook.enabled }}
        - name: audit-tls
          mountPath: /etc/fightwatch/audit-tls
          readOnly: true
        {{- if .Values.auditWebhook.clientCASecret }}
        - name: audit-ca
          mountPath: /etc/fightwatch/audit-ca
          readOnly: true
        {{- end }}
        {{- if .Values.auditWebhook.tokenSecret }}
        - name: audit-token
          mountPath: /etc/fightwatch/audit-token
          readOnly: true
        {{- end }}
        {{- end }}
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "fightwatch.fullname" . }}
    - name: tmp
      emptyDir:
        sizeLimit: 64Mi
    {{- with include "fightwatch.tls.secretName" . }}
    - name: tls
      secret:
        secretName: {{ . }}
    {{- end }}
    {{- if .Values.auditWebhook.enabled }}
    - name: audit-tls
      secret:
        secretName: {{ .Values.auditWebhook.tlsSecret }}
    {{- with .Values.auditWebhook.clientCASecret }}
    - name: audit-ca
      secret:
        secretName: {{ . }}
    {{- end }}
    {{- with .Values.auditWebhook.tokenSecret }}
    - name: audit-token
      secret:
        secretName: {{ . }}
    {{- end }}
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* Several pods of one shard all deliver unless they elect a leader. */}}
{{- define "fightwatch.checkReplicas" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: without a leader every replica would deliver each finding" }}
{{- end }}
{{- end }}
