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
      runbook_url: cfg.runbookURLPattern % std.asciiLower(name),
    },
  },

  local exporter = {
    name: 'llm-probe-exporter-alerts',
    rules: [
      alert('LLMProbeExporterDown', 'up{%s} == 0' % m(), '5m', 'critical',
            'llm-probe-exporter is down: no LLM endpoint is being measured.',
            'Prometheus cannot scrape %s (%s {{ $labels.%s }}) for 5 minutes; every probe series it owns is blind.'
            % [instance, cfg.jobLabel, cfg.jobLabel]),
      // `up == 0` needs a target: a scrape config or ServiceMonitor that matches nothing only
      // shows as the absence of `up`.
      alert('LLMProbeExporterAbsent', 'absent(up{%s})' % m(), cfg.exporterAbsentFor, 'critical',
            'Prometheus scrapes no llm-probe-exporter: no LLM endpoint is being measured.',
            'No scrape target matches %s for %s: the exporter is not deployed, or its scrape config or ServiceMonitor selects nothing.'
            % [cfg.selector, cfg.exporterAbsentFor]),
      alert('LLMProbeSeriesStale',
            |||
              # Seconds since the last finished probe, counted from the last config load when the series has
              # not run since then (a fresh start or reload is not stale), against 3x the configured interval.
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
              > 3 * llm_probe_interval_seconds{%(m)s}
            ||| % { m: m(), ji: p.list([cfg.jobLabel, 'instance']) },
            '5m', 'warning',
            'Probe series %s has not run for 3 intervals.' % series,
            'No probe of %s finished on %s for {{ $value | humanizeDuration }}, more than 3 times its interval: the scheduler is stuck, overloaded (see LLMProbeSchedulerLag) or the series is skipped.'
            % [series, instance]),
      alert('LLMProbeConfigReloadFailed', 'llm_probe_config_last_reload_successful{%s} == 0' % m(),
            '5m', 'warning',
            'llm-probe-exporter could not reload its config.',
            '%s keeps running its previous config because the last reload failed; the log line "config reload failed" names every problem.'
            % instance),
      alert('LLMProbeSchedulerLag',
            'instance:llm_probe_scheduler_lag_seconds:p99_rate%s > %s'
            % [cfg.schedulerLag.window, p.num(cfg.schedulerLag.p99Seconds)],
            cfg.schedulerLag['for'], 'warning',
            'llm-probe-exporter starts probes late.',
            'p99 scheduler lag on %s is {{ $value | humanizeDuration }} over %s: max_concurrency is saturated or the event loop is blocked; measurements may be late.'
            % [instance, cfg.schedulerLag.window]),
      alert('LLMProbeBudgetExhausted',
            'sum by (%s) (increase(llm_probe_skipped_total{%s}[15m])) > 0'
            % [p.list([cfg.jobLabel, 'instance'] + cfg.fleetLabels), m(['reason="budget"'])],
            '0m', 'warning',
            'llm-probe-exporter stopped probing: the daily budget is spent.',
            '%s skipped probes because global.budget.max_cost_per_day is spent; series are not measured until the next UTC day.'
            % instance),
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
          '{{ $value | humanizePercentage }} of the probes of %s failed over the last %s (and the last %s); at this rate the series spends %s. See llm_probe_requests_total by result for the reason.'
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
          '{{ $value | humanizePercentage }} of the successful probes of %s were slower than their %s objective over the last %s (and the last %s), where at most %s may be; at this rate the series spends %s.'
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

  local probes = {
    name: 'llm-probe-alerts',
    rules: [
      alert('LLMProbeRateLimited',
            'target_model_probe_result:llm_probe_requests:ratio_rate%s{result="rate_limited"} > %s'
            % [cfg.rateLimited.window, p.num(cfg.rateLimited.ratio)],
            cfg.rateLimited['for'], 'warning',
            '%s is rate limited (HTTP 429).' % series,
            '{{ $value | humanizePercentage }} of the probes of %s over %s were answered 429; users of this endpoint are likely throttled too. Check llm_probe_ratelimit_remaining_requests / _tokens and the account quota.'
            % [series, cfg.rateLimited.window]),
      // Pages at once: a rejected key (401/403) is never transient; resolves when a probe succeeds.
      alert('LLMProbeAuthFailing',
            |||
              %s > 0
              and %s
              min by (%s) (llm_probe_success{%s}) == 0
            ||| % [p.sumBy(key, 'increase', 'llm_probe_requests_total', m(['result="auth"']), '1h'),
                   on, p.list(key), m()],
            '0m', 'critical',
            '{{ $labels.target }} rejects the API key (401/403).',
            'The last probe of %s failed with an authentication error: the key is missing, revoked, expired or lacks access to this model.'
            % series),
    ] + [
      alert('LLMProbeCostOverBudget',
            'target_currency:llm_probe_cost:increase1d{currency="%s"} > %s'
            % [currency, p.num(cfg.costBudgetPerDay[currency])],
            '0m', 'warning',
            'Probing {{ $labels.target }} costs more than its daily budget.',
            'Probes against {{ $labels.target }} spent {{ $value | printf "%%.2f" }} %s over the last 24 hours, above the budget of %s %s per day.'
            % [currency, p.num(cfg.costBudgetPerDay[currency]), currency],
            { currency: currency })
      for currency in std.objectFields(cfg.costBudgetPerDay)
    ],
  },

  prometheusAlerts+:: {
    groups+: [exporter, slo, probes, driftAlerts],
  },
}
