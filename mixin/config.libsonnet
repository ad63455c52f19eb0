// Parameters of the llm-probe-exporter mixin. Override any of them without forking:
//
//   (import 'llm-probe-exporter/mixin/mixin.libsonnet') + {
//     _config+:: { selector: 'job="llm-probe"', fleetLabels: ['region'] },
//   }
//
// Objectives (TTFT, TPOT and duration thresholds, the availability ratio) are not set here: the
// exporter exports each series' own (`slo:` in its config) as llm_probe_objective_seconds and
// llm_probe_objective_ratio, and every SLO rule joins against them, series by series.
{
  _config+:: {
    // The daemon's own scrape job (its /metrics): every rule, alert and dashboard variable
    // selects exactly this job. `selector` is the whole matcher list (add more, e.g.
    // namespace="monitoring"); keep it an exact job name, never a regex a Probe's job can match.
    jobLabel: 'job',
    daemonJob: 'llm-probe-exporter',
    selector: '%s="%s"' % [self.jobLabel, self.daemonJob],
    // The job of the Probe objects that scrape /probe (on-demand probes, paid requests). The
    // exporter alerts on `up` exclude it even when `selector` is overridden with a regex: a
    // /probe scrape answered 400 or 429 must never page "exporter down".
    onDemandJob: 'llm-probe-on-demand',
    onDemandSelector: '%s="%s"' % [self.jobLabel, self.onDemandJob],
    // What identifies one probe series.
    seriesLabels: ['target', 'model', 'probe'],
    // Labels a workload-shaped probe adds (a context-length ladder's `input_tokens`, a cache
    // pair's `cache`): kept apart by every aggregation, so sizes never add up (absent elsewhere).
    workloadLabels: ['input_tokens', 'cache'],
    // The exporter's global.labels that tell a fleet apart (regions, clusters): every aggregation
    // keeps them and every dashboard has a variable for each, so regions never add up.
    fleetLabels: ['location', 'cluster'],

    // Runbooks are files of this repository, one per alert (docs/runbooks/<AlertName>.md):
    // point the pattern at your copy (or wiki) to change every runbook_url at once.
    repositoryURL: 'https://github.com/llm-probe-exporter/llm-probe-exporter',
    runbookURLPattern: self.repositoryURL + '/blob/main/docs/runbooks/%s.md',  // %s: the alert name

    // Multiwindow, multi-burn-rate alerts on an error budget over `sloPeriod` (SRE workbook,
    // "Alerting on SLOs"): a pair fires when the budget burns faster than `factor` over its long
    // window (enough budget is gone) and over its short window (it is still burning). The pairs
    // of one severity are one alert (`or`), so the fast and the slow pair of one series are one
    // alert and one notification. No `for`: the short window is the filter, and a `for` would
    // start a page after the failures it is about have stopped.
    sloPeriod: '30d',
    // Without a `for`, a burn rate that hovers at a factor (its window sliding over discrete
    // probes) would resolve and fire again, a notification each time: the alert keeps firing
    // this long after its last pair stopped holding (Prometheus >= 2.42). It never delays a start.
    burnKeepFiringFor: '5m',
    burnRates: [
      { long: '1h', short: '5m', factor: 14.4, severity: 'critical' },  // 2% of the budget in 1h
      { long: '6h', short: '30m', factor: 6, severity: 'critical' },  // 5% in 6h
      { long: '1d', short: '2h', factor: 3, severity: 'warning' },  // 10% in 1d
      { long: '3d', short: '6h', factor: 1, severity: 'warning' },  // 10% in 3d
    ],
    // Share of successful probes that must be within their latency objective; also the quantile
    // LLMProbeLatencyHigh compares with the objective.
    latencyTargets: { ttft: 0.95, tpot: 0.95, duration: 0.95 },
    // p95 over `window` and still over `short` (the slowness is still there), for `for`.
    latencyHigh: { window: '30m', short: '5m', 'for': '15m' },
    // Quantiles recorded for every latency histogram.
    quantiles: [0.5, 0.9, 0.95, 0.99],

    // Policies that are the same for the whole fleet (not objectives of a series).
    // Over `window` and still over `short`: a burst that ended does not open a ticket later.
    rateLimited: { ratio: 0.1, window: '15m', short: '5m', 'for': '10m' },
    schedulerLag: { p99Seconds: 1, window: '10m', short: '2m', 'for': '15m' },
    costBudgetPerDay: { USD: 5, CNY: 35 },  // probe spend per target and currency
    // LLMProbeBilledAbovePrice: what the gateway bills for a series' probes (usage.cost, USD)
    // over `window` is above `ratio` times what the price table says they cost, for `for`.
    billedAbovePrice: { ratio: 1.2, window: '1h', 'for': '30m' },
    exporterAbsentFor: '15m',
    exporterDown: { 'for': '5m' },
    seriesStale: { intervals: 3, 'for': '5m' },
    configReloadFailed: { 'for': '5m' },
    budgetExhausted: { window: '15m' },
    // A state, not an event: probing has stopped until someone fixes the file and reloads.
    budgetRecordUnusable: { 'for': '2m' },
    // LLMProbeAuthFailing: the last `probes` probes in a row were answered 401/403
    // (llm_probe_consecutive_results{result="auth"}); one rejected probe that recovers is quiet.
    authFailing: { probes: 2, 'for': '0m' },
    // LLMProbeServedModelChanged: llm_probe_served_model_changes_total rose within `window`:
    // one alert per series and change episode (never a label per served model or fingerprint).
    servedModelChanged: { window: '1h', 'for': '0m' },
    // LLMProbeIdentityChanged: the last `windows` test windows of an identity probe in a row were
    // found different from its reference sample (llm_probe_identity_consecutive_different; by
    // chance about alpha^windows of the windows: benchmarks/README.md#identity-test-calibration).
    identityChanged: { windows: 2, 'for': '0m', severity: 'critical' },
    // LLMProbeStreamStalls: pauses longer than `gapSeconds` between two token-bearing chunks,
    // per successful streamed probe, above `ratio` over `window`. `gapSeconds` must be an edge
    // of llm_probe_inter_chunk_seconds (default edges end at 1; `global.buckets.inter_chunk`).
    streamStalls: { gapSeconds: 1, ratio: 0.5, window: '15m', short: '5m', 'for': '10m' },
    // LLMProbeLocationFailing / LLMProbeGlobalFailure: a target and model failing (failed share
    // of the probes `window` holds above `ratio`) in some locations while others are fine, or in
    // every one of at least `minLocations`. `regionLabel` is the global.labels key naming a
    // location. No `for`: the failed share only rises while probes fail.
    regionLabel: 'location',
    locationFailure: { ratio: 0.5, window: '10m', 'for': '0m', keepFiringFor: '5m', minLocations: 2 },

    // Efficiency and quality layers (token efficiency, cost per success and per correct answer,
    // accuracy, estimated-token share) over this window.
    efficiencyWindow: '1h',
    // Drift: accuracy and TTFT p95 over `window`, now versus `offsets` ago. Offsets need that much
    // retention (Prometheus keeps 15 days by default).
    drift: {
      window: '1d',
      offsets: ['7d', '30d'],
      accuracyDrop: 0.05,  // alert when accuracy is this much lower (absolute)
      ttftRise: 0.5,  // alert when TTFT p95 is this much higher (relative: 0.5 = +50 %)
      'for': '1h',
      interval: '5m',  // evaluation interval of the drift group (day-long windows are costly)
    },

    // Judged quality (llm_probe_judgements_total). LLMProbeQualityDrop: the judged pass rate of a
    // series over `window` (and still over `short`) below its objective (slo: {quality}), with at
    // least `minJudged` verdicts in the window (a page: no `for`); or over `weekWindow` more than `weekDrop` below
    // the same window `offset` ago (with `minJudged` verdicts on both sides), for `for`. LLMProbeJudgeUnreliable:
    // the judge agreed with fewer than `agreement` of at least `minCalibrations` canned answers
    // of known verdict over `window`; it holds the quality alerts of its fleet labels' location
    // (Alertmanager inhibition: deploy/docker-compose/alertmanager.yml). minJudged 60: a series
    // that truly passes 98 % against a 95 % objective falls below it in 3 % of 60-verdict
    // windows (0.3 % at 99 %), and a drop to 85 % is seen in 99 % (benchmarks/README.md); a
    // series with fewer verdicts in 6h (intervals over 6m) needs a longer window.
    quality: { window: '6h', short: '1h', minJudged: 60, weekWindow: '1d', offset: '7d', weekDrop: 0.15, 'for': '30m' },
    judgeUnreliable: { window: '1d', agreement: 0.8, minCalibrations: 10, 'for': '30m' },
    // Workload-shaped probes (issue 39). Prefill throughput and the cached share of input
    // tokens are recorded over `window`.
    workload: { window: '1h' },
    // LLMProbePromptCacheCold: a cache pair's warm probes read less than `minShare` of their
    // input from the cache over `window` (and still over `short`), where within `history` they
    // read at least that much: the cache stopped hitting, a silent price rise.
    promptCacheCold: { minShare: 0.5, window: '1h', short: '15m', history: '7d', 'for': '30m' },
    // LLMProbeModelRetiring: the gateway says a probed model retires within `days` days (or it
    // already has, and is still probed).
    modelRetiring: { days: 14, 'for': '10m' },
    // LLMProbeTTFTAnomaly: p95 TTFT over `window` above `factor` times the median of the same
    // window at the same time of day on the past `days` days (`step` apart: the same hour judged
    // against its own past, so a daily pattern stays quiet), with at least `minDays` of those
    // days on record (a younger series cannot page), and still above it over `short`.
    ttftAnomaly: { factor: 3, window: '1h', short: '5m', days: 7, step: '1d', minDays: 4,
                   'for': '15m', interval: '5m' },
    // LLMProbeErrorRateAnomaly: the failed share of probes over `window` above `factor` times
    // its median at the same time on the past `days` days (`step` apart) and at least
    // `minIncrease` above it (a series that never fails is not paged for one failure), with at
    // least `minProbes` probes in the window and `minDays` of those days on record, and still as
    // high over `short`. A step of 7d judges each hour of the week against the past weeks.
    errorRateAnomaly: { factor: 3, minIncrease: 0.05, minProbes: 10, window: '1h', short: '5m',
                        days: 7, step: '1d', minDays: 4, 'for': '15m', interval: '5m' },

    dashboards: {
      tags: ['llm-probe', 'llm', 'prometheus'],
      refresh: '1m',
      from: 'now-6h',
      currencies: ['USD', 'EUR', 'GBP', 'CNY', 'JPY'],
    },
  },
}
