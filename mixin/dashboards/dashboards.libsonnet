// grafanaDashboards: the fleet overview and the drill-down per target and model.
(import 'common.libsonnet') +
(import 'overview.libsonnet') +
(import 'model.libsonnet')
