// The llm-probe-exporter mixin: Prometheus recording rules, alerts and Grafana dashboards from one
// set of parameters (config.libsonnet). `make generate` renders it into deploy/prometheus/*.yml,
// grafana/*.json and the kustomize copies; other setups import it and override `_config`.
(import 'config.libsonnet') +
(import 'rules.libsonnet') +
(import 'alerts.libsonnet') +
(import 'dashboards/dashboards.libsonnet')
