// Alerts. Every SLO alert joins each series against its own objective (exported by the exporter),
// so one file serves a fleet of models with different objectives, and a series without an
// objective raises no SLO alert. severity: critical pages, warning opens a ticket.
local p = import 'lib/promql.libsonnet';

{
  local cfg = $._config,
  local key = cfg.seriesLabels + cfg.fleetLabels,
  local on = 'on (%s)' % p.list(key),
  local m(extra=[]) = p.matchers([cfg.selector] + extra),
  // "target/model/probe" in annotations.
  local series = std.join('/', ['{{ $labels.%s }}' % l for l in cfg.seriesLabels]),
  local instance = '{{ $labels.instance }}',

  local alert(name, expr, forDuration, severity, summary, description, labels={}) = {
    alert: name,
    expr: expr,
    'for': forDuration,
    labels: { severity: severity } + labels,
    annotations: {
      summary: summary,
      description: description,
      runbook_url: cfg.runbookURLPattern % name,
    },
  },

  // `up` of the daemon's job only: never the Probe objects' job, even under a regex selector.
  local up = 'up{%s}' % m(['%s!="%s"' % [cfg.jobLabel, cfg.onDemandJob]]),
  local exporterKey = p.list([cfg.jobLabel, 'instance']),

  local exporter = {
    name: 'llm-probe-exporter-alerts',
    rules: [
      alert('LLMProbeExporterDown', '%s == 0' % up, cfg.exporterDown['for'], 'critical',
            'llm-probe-exporter %s is down: its series are not collected.' % instance,
            'Prometheus has failed to scrape %s (%s {{ $labels.%s }}) for %s: none of the probe series it owns reaches Prometheus.'
            % [instance, cfg.jobLabel, cfg.jobLabel, cfg.exporterDown['for']]),
      // `up == 0` needs a target: a scrape config or ServiceMonitor that matches nothing only
      // shows as the absence of `up`.
      alert('LLMProbeExporterAbsent', 'absent(%s)' % up, cfg.exporterAbsentFor, 'critical',
            'Prometheus scrapes no llm-probe-exporter: no LLM endpoint is being measured.',
            'No scrape target matches %s for %s: Prometheus collects no probe series at all.'
            % [cfg.selector, cfg.exporterAbsentFor]),
      alert('LLMProbeSeriesStale',
            |||
              # Seconds since the last finished probe, counted from the last config load when the series has
              # not run since then (a fresh start or reload is not stale), against %(n)s intervals.
              (
                time()
                - (
                    (
                      llm_probe_last_run_timestamp_seconds{%(m)s}
                      >= on (%(ji)s) group_left ()
                      llm_probe_config_last_reload_success_timestamp_seconds{%(m)s}
                    ) + 0
                    or
                    0 * llm_probe_last_run_timestamp_seconds{%(m)s}
                    + on (%(ji)s) group_left ()
                    llm_probe_config_last_reload_success_timestamp_seconds{%(m)s}
                  )
              )
              > %(n)s * llm_probe_interval_seconds{%(m)s}
            ||| % { m: m(), ji: exporterKey, n: p.num(cfg.seriesStale.intervals) },
            cfg.seriesStale['for'], 'warning',
            'Probe series %s has not finished a probe for %s intervals.' % [series, p.num(cfg.seriesStale.intervals)],
            'No probe of %s finished on %s for {{ $value | humanizeDuration }} (counted from the last config load), more than %s times its interval.'
            % [series, instance, p.num(cfg.seriesStale.intervals)]),
      alert('LLMProbeConfigReloadFailed', 'llm_probe_config_last_reload_successful{%s} == 0' % m(),
            cfg.configReloadFailed['for'], 'warning',
            'llm-probe-exporter %s could not reload its config.' % instance,
            'The last config reload of %s failed (llm_probe_config_last_reload_successful is 0 for %s): it runs the config it loaded before.'
            % [instance, cfg.configReloadFailed['for']]),
      alert('LLMProbeSchedulerLag',
            'instance:llm_probe_scheduler_lag_seconds:p99_rate%s > %s'
            % [cfg.schedulerLag.window, p.num(cfg.schedulerLag.p99Seconds)],
            cfg.schedulerLag['for'], 'warning',
            'llm-probe-exporter %s starts probes late.' % instance,
            'p99 of how late %s started probes over the last %s is {{ $value | humanizeDuration }}, above %ss.'
            % [instance, cfg.schedulerLag.window, p.num(cfg.schedulerLag.p99Seconds)]),
      alert('LLMProbeBudgetExhausted',
            'sum by (%s) (increase(llm_probe_skipped_total{%s}[%s])) > 0'
            % [p.list([cfg.jobLabel, 'instance'] + cfg.fleetLabels), m(['reason="budget"']),
               cfg.budgetExhausted.window],
            '0m', 'warning',
            'llm-probe-exporter %s skips probes: its daily budget is spent.' % instance,
            '%s skipped about {{ $value | printf "%%.0f" }} probes over the last %s because global.budget.max_cost_per_day is spent for the current UTC day.'
            % [instance, cfg.budgetExhausted.window]),
    ],
  },

  local availabilityObjective =
    'target_model_probe_objective:llm_probe_objective_ratio:max{objective="availability"}',
  local availabilityBurn(b) =
    local threshold = '%s (%s * (1 - %s))' % [on, p.num(b.factor), availabilityObjective];
    alert('LLMProbeAvailabilityBudgetBurn',
          |||
            target_model_probe:llm_probe_requests_failed:ratio_rate%s
              > %s
            and
            target_model_probe:llm_probe_requests_failed:ratio_rate%s
              > %s
          ||| % [b.long, threshold, b.short, threshold],
          b['for'], b.severity,
          '%s fails too often: availability error budget burning %sx too fast.' % [series, p.num(b.factor)],
          '{{ $value | humanizePercentage }} of the probes of %s failed over the last %s (and more than the threshold over the last %s): at this rate the series spends %s.'
          % [series, b.long, b.short, b.spends],
          { long: b.long, short: b.short }),

  local latencyBurn(objective, b) =
    local target = cfg.latencyTargets[objective];
    local threshold = '(%s * (1 - %s))' % [p.num(b.factor), p.num(target)];
    local missed(w) =
      'target_model_probe_objective:llm_probe_objective_missed:ratio_rate%s{objective="%s"}' % [w, objective];
    alert('LLMProbeLatencyBudgetBurn',
          |||
            %s > %s
            and
            %s > %s
            and on (%s)
            target_model_probe_objective:llm_probe_objective_seconds:max
          ||| % [missed(b.long), threshold, missed(b.short), threshold, p.list(key + ['objective'])],
          b['for'], b.severity,
          '%s is slow: %s error budget burning %sx too fast.' % [series, objective, p.num(b.factor)],
          '{{ $value | humanizePercentage }} of the successful probes of %s were slower than their %s objective over the last %s (and more than the threshold over the last %s), where at most %s may be: at this rate the series spends %s.'
          % [series, objective, b.long, b.short, p.num(100 * (1 - target)) + '%', b.spends],
          { objective: objective, long: b.long, short: b.short }),

  local latencyHigh(objective) =
    local q = cfg.latencyTargets[objective];
    alert('LLMProbeLatencyHigh',
          |||
            target_model_probe:%s:%s_rate%s
              > %s
            target_model_probe_objective:llm_probe_objective_seconds:max{objective="%s"}
          ||| % [$.latencyObjectives[objective], p.pname(q), cfg.latencyHigh.window, on, objective],
          cfg.latencyHigh['for'], 'warning',
          '%s: %s %s is above its objective.' % [series, p.pname(q), objective],
          '%s %s of %s over %s is {{ $value | humanizeDuration }}, above the series\' objective (llm_probe_objective_seconds{objective="%s"}).'
          % [p.pname(q), objective, series, cfg.latencyHigh.window, objective],
          { objective: objective }),

  local slo = {
    name: 'llm-probe-slo-alerts',
    rules: [availabilityBurn(b) for b in cfg.burnRates]
           + [latencyBurn(o, b) for o in $.latencyObjectiveNames for b in cfg.burnRates]
           + [latencyHigh(o) for o in $.latencyObjectiveNames],
  },

  local d = cfg.drift,
  // Both sides from the raw series: no dependency on another group's evaluation, and no wait
  // until recording rules have run for 30 days.
  local accuracyDrift(o) =
    alert('LLMProbeAccuracyDrift',
          '(\n  %s\n)\n< %s\n(\n  (\n    %s\n  )\n  - %s\n)\n' % [
            p.indent($.accuracy(), 2), on, p.indent($.accuracy(o), 4), p.num(d.accuracyDrop),
          ],
          d['for'], 'warning',
          '%s answers worse than %s ago.' % [series, o],
          'Over the last %s, {{ $value | humanizePercentage }} of the answer checks of %s passed: more than %s points below the same window %s ago.'
          % [d.window, series, p.num(100 * d.accuracyDrop), o],
          { offset: o }),
  local ttftDrift(o) =
    alert('LLMProbeTTFTDrift',
          '(\n  %s\n)\n> %s\n(\n  (\n    %s\n  )\n  * %s\n)\n' % [
            p.indent($.ttftP95(), 2), on, p.indent($.ttftP95(o), 4), p.num(1 + d.ttftRise),
          ],
          d['for'], 'warning',
          '%s answers slower than %s ago.' % [series, o],
          'p95 TTFT of %s over the last %s is {{ $value | humanizeDuration }}, more than %s%% above the same window %s ago.'
          % [series, d.window, p.num(100 * d.ttftRise), o],
          { offset: o }),
  local driftAlerts = {
    name: 'llm-probe-drift-alerts',
    interval: d.interval,
    rules: [accuracyDrift(o) for o in d.offsets] + [ttftDrift(o) for o in d.offsets],
  },

  local sf = cfg.streamStalls,
  local le(x) = if x == std.floor(x) then '%d.0' % x else p.num(x),
  // Gaps longer than gapSeconds per second: the native histogram's share above it, else the
  // classic buckets (count - the bucket at the edge).
  local stalledGaps =
    local nat = 'sum by (%s) (rate(%s))' % [p.list(key), p.range('llm_probe_inter_chunk_seconds', m(), sf.window)];
    '(\n  histogram_count(%s)\n  * histogram_fraction(%s, +Inf, %s)\n)\nor\n(\n  %s\n  -\n  %s\n)' % [
      nat, p.num(sf.gapSeconds), nat,
      p.sumBy(key, 'rate', 'llm_probe_inter_chunk_seconds_count', m(), sf.window),
      p.sumBy(key, 'rate', 'llm_probe_inter_chunk_seconds_bucket', m(['le="%s"' % le(sf.gapSeconds)]), sf.window),
    ],

  local lf = cfg.locationFailure,
  local region = cfg.regionLabel,
  // The same target and model in the same fleet, across locations.
  local byModel = p.list(['target', 'model'] + std.filter(function(l) l != region, cfg.fleetLabels)),
  local locationRatio = 'target_model_%s:llm_probe_requests_failed:ratio_rate%s' % [region, lf.window],

  local probes = {
    name: 'llm-probe-alerts',
    rules: [
      local rl = cfg.rateLimited;
      local limited(w) = 'target_model_probe_result:llm_probe_requests:ratio_rate%s{result="rate_limited"} > %s' % [w, p.num(rl.ratio)];
      alert('LLMProbeRateLimited',
            '%s\nand\n%s\n' % [limited(rl.window), limited(rl.short)],
            rl['for'], 'warning',
            '%s is rate limited (HTTP 429).' % series,
            '{{ $value | humanizePercentage }} of the probes of %s over the last %s were answered 429 (rate limited), and more than %s over the last %s.'
            % [series, rl.window, p.num(100 * rl.ratio) + '%', rl.short]),
      // The class of the latest probes, not history: the exporter counts how many of the
      // latest probes in a row ended with the same result.
      alert('LLMProbeAuthFailing',
            'max by (%s) (llm_probe_consecutive_results{%s}) >= %s'
            % [p.list(key), m(['result="auth"']), p.num(cfg.authFailing.probes)],
            cfg.authFailing['for'], 'critical',
            '{{ $labels.target }} rejects the credentials for {{ $labels.model }} (401/403).',
            'The last {{ $value }} probes of %s in a row were refused with 401 or 403 (result auth).'
            % series),
      alert('LLMProbeServedModelChanged',
            |||
              (
                %s > 0
              )
              * on (%s) group_left (served_model, system_fingerprint)
              topk by (%s) (1, max by (%s) (llm_probe_served_model_info{%s}))
            ||| % [p.sumBy(key, 'increase', 'llm_probe_served_model_changes_total', m(), cfg.servedModelChanged.window),
                   p.list(key), p.list(key), p.list(key + ['served_model', 'system_fingerprint']), m()],
            cfg.servedModelChanged['for'], 'warning',
            'The model answering %s changed.' % series,
            'The model the server reports for %s changed within the last %s; its last answer came from {{ $labels.served_model }} (system_fingerprint "{{ $labels.system_fingerprint }}").'
            % [series, cfg.servedModelChanged.window]),
      alert('LLMProbeStreamStalls',
            '(\n  %s\n)\n/\n(\n  %s\n)\n> %s\n' % [
              p.indent(stalledGaps, 2), p.indent(p.count('llm_probe_ttft_seconds', m(), key, sf.window), 2),
              p.num(sf.ratio),
            ],
            sf['for'], 'warning',
            'Streams of %s stall after their first token.' % series,
            'Over the last %s, the streams of %s paused for longer than %ss between two token-bearing chunks {{ $value | printf "%%.2f" }} times per successful probe (threshold %s).'
            % [sf.window, series, p.num(sf.gapSeconds), p.num(sf.ratio)]),
      alert('LLMProbeLocationFailing',
            |||
              %(r)s > %(t)s
              and on (%(k)s)
              (count by (%(k)s) (%(r)s) >= %(n)s)
              and on (%(k)s)
              (min by (%(k)s) (%(r)s) <= %(t)s)
            ||| % { r: locationRatio, t: p.num(lf.ratio), k: byModel, n: p.num(lf.minLocations) },
            lf['for'], 'warning',
            '{{ $labels.target }}/{{ $labels.model }} fails from %s {{ $labels.%s }} while another %s is fine.' % [region, region, region],
            '{{ $value | humanizePercentage }} of the probes of {{ $labels.target }}/{{ $labels.model }} from %s {{ $labels.%s }} failed over the last %s, while at least one other %s failed at most %s of them.'
            % [region, region, lf.window, region, p.num(100 * lf.ratio) + '%']),
      alert('LLMProbeGlobalFailure',
            |||
              min by (%(k)s) (%(r)s) > %(t)s
              and on (%(k)s)
              count by (%(k)s) (%(r)s) >= %(n)s
            ||| % { r: locationRatio, t: p.num(lf.ratio), k: byModel, n: p.num(lf.minLocations) },
            lf['for'], 'critical',
            '{{ $labels.target }}/{{ $labels.model }} fails in every %s.' % region,
            'In every %s that probes {{ $labels.target }}/{{ $labels.model }} (%s or more), at least {{ $value | humanizePercentage }} of the probes failed over the last %s.'
            % [region, p.num(lf.minLocations), lf.window]),
    ] + [
      alert('LLMProbeCostOverBudget',
            'target_currency:llm_probe_cost:increase1d{currency="%s"} > %s'
            % [currency, p.num(cfg.costBudgetPerDay[currency])],
            '0m', 'warning',
            'Probing {{ $labels.target }} costs more than its daily budget.',
            'Probes against {{ $labels.target }} cost {{ $value | printf "%%.2f" }} %s over the last 24 hours (from the configured prices), above the budget of %s %s per day.'
            % [currency, p.num(cfg.costBudgetPerDay[currency]), currency],
            { currency: currency })
      for currency in std.objectFields(cfg.costBudgetPerDay)
    ],
  },

  prometheusAlerts+:: {
    groups+: [exporter, slo, probes, driftAlerts],
  },
}
