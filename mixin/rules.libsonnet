// Recording rules. Names follow level:metric:operations; "target_model_probe" series keep exactly
// the series labels and the fleet labels of _config (so the shards of a StatefulSet add up and
// regions never do).
local p = import 'lib/promql.libsonnet';

{
  local cfg = $._config,
  local key = cfg.seriesLabels + cfg.fleetLabels,
  local m(extra=[]) = p.matchers([cfg.selector] + extra),
  local rec(name, expr, labels={}) =
    { record: name, expr: expr } + (if labels == {} then {} else { labels: labels }),

  // The histogram behind each latency objective (llm_probe_objective_seconds{objective}).
  latencyObjectives:: {
    ttft: 'llm_probe_ttft_seconds',
    tpot: 'llm_probe_tpot_seconds',
    duration: 'llm_probe_duration_seconds',
  },
  // Accuracy of golden sets (passed checks / all checks) and TTFT p95 over the drift window,
  // now or `offset` ago.
  accuracy(offset=''):: '%s\n/\n%s' % [
    p.sumBy(key, 'rate', 'llm_probe_checks_total', m(['outcome="pass"']), cfg.drift.window, offset),
    p.sumBy(key, 'rate', 'llm_probe_checks_total', m(), cfg.drift.window, offset),
  ],
  ttftP95(offset=''):: p.quantile(0.95, 'llm_probe_ttft_seconds', m(), key, cfg.drift.window, 'rate', offset),

  // In the order rules and alerts list them.
  latencyObjectiveNames:: ['ttft', 'tpot', 'duration'],
  // Every window a burn-rate alert reads.
  sloWindows:: p.windows(std.flattenArrays([[b.long, b.short] for b in cfg.burnRates])),

  local objectives = {
    name: 'llm-probe-objectives',
    rules: [
      // Each series' own objectives, one series per (series, objective): the right-hand side of
      // every SLO alert.
      rec('target_model_probe_objective:llm_probe_objective_seconds:max',
          'max by (%s) (llm_probe_objective_seconds{%s})' % [p.list(key + ['objective']), m()]),
      rec('target_model_probe_objective:llm_probe_objective_ratio:max',
          'max by (%s) (llm_probe_objective_ratio{%s})' % [p.list(key + ['objective']), m()]),
    ],
  },

  local failedRatio(w) =
    '%s\n/\n%s' % [
      p.sumBy(key, 'rate', 'llm_probe_requests_total', m(['result!="success"']), w),
      p.sumBy(key, 'rate', 'llm_probe_requests_total', m(), w),
    ],
  local availability = {
    name: 'llm-probe-availability',
    rules: [
      rec('target_model_probe:llm_probe_requests:rate5m',
          p.sumBy(key, 'rate', 'llm_probe_requests_total', m(), '5m')),
    ] + [
      // Share of finished probes per result (success, timeout, rate_limited, ...).
      rec('target_model_probe_result:llm_probe_requests:ratio_rate' + w,
          '%s\n/ ignoring (result) group_left ()\n%s' % [
            p.sumBy(key + ['result'], 'rate', 'llm_probe_requests_total', m(), w),
            p.sumBy(key, 'rate', 'llm_probe_requests_total', m(), w),
          ])
      for w in p.windows([cfg.rateLimited.window, cfg.rateLimited.short])
    ] + [
      // Error ratio = 1 - availability, availability = success / all finished probes.
      rec('target_model_probe:llm_probe_requests_failed:ratio_rate' + w, failedRatio(w))
      for w in $.sloWindows
    ] + [
      // The same per target, model and fleet labels (all probes summed): one location failing
      // versus every location (LLMProbeLocationFailing, LLMProbeGlobalFailure).
      local byRegion = ['target', 'model'] + cfg.fleetLabels;
      local w = cfg.locationFailure.window;
      // A location without failures is a 0, not a gap (it is the one that is fine).
      local all = p.sumBy(byRegion, 'rate', 'llm_probe_requests_total', m(), w);
      rec('target_model_%s:llm_probe_requests_failed:ratio_rate%s' % [cfg.regionLabel, w],
          '(\n  %s\n  or\n  0 * %s\n)\n/\n%s' % [
            p.sumBy(byRegion, 'rate', 'llm_probe_requests_total', m(['result!="success"']), w),
            all, all,
          ]),
    ],
  },

  // Share of successful probes above their latency objective: 1 - good / total, where good is
  // llm_probe_objective_met_total (counted by the exporter against the series' own objective)
  // and total the histogram's count.
  local missedRatio(objective, w) =
    '1 - (\n  %s\n  /\n  (\n    %s\n  )\n)' % [
      p.sumBy(key, 'rate', 'llm_probe_objective_met_total', m(['objective="%s"' % objective]), w),
      p.indent(p.count($.latencyObjectives[objective], m(), key, w), 4),
    ],
  local latencySlo = {
    name: 'llm-probe-latency-slo',
    rules: [
      rec('target_model_probe_objective:llm_probe_objective_missed:ratio_rate' + w,
          missedRatio(objective, w), { objective: objective })
      for objective in $.latencyObjectiveNames
      for w in $.sloWindows
    ],
  },

  local latencyFamilies = [
    'llm_probe_ttft_seconds',
    'llm_probe_time_to_first_answer_seconds',
    'llm_probe_tpot_seconds',
    'llm_probe_duration_seconds',
    'llm_probe_output_tokens_per_second',
  ],
  local latency = {
    name: 'llm-probe-latency',
    rules: std.flattenArrays([
      [
        rec('target_model_probe:%s:%s_rate5m' % [family, p.pname(q)],
            p.quantile(q, family, m(), key, '5m'))
        for q in cfg.quantiles
      ] + [
        rec('target_model_probe:%s:mean_rate5m' % family, p.mean(family, m(), key, '5m')),
      ]
      for family in latencyFamilies
    ]) + [
      // The quantile LLMProbeLatencyHigh compares with each objective.
      local q = cfg.latencyTargets[objective];
      local family = $.latencyObjectives[objective];
      rec('target_model_probe:%s:%s_rate%s' % [family, p.pname(q), cfg.latencyHigh.window],
          p.quantile(q, family, m(), key, cfg.latencyHigh.window))
      for objective in $.latencyObjectiveNames
    ],
  },

  local w = cfg.efficiencyWindow,
  local onKey = 'on (%s) group_left ()' % p.list(key),
  local efficiency = {
    name: 'llm-probe-efficiency',
    rules: [
      rec('target_model_probe_type:llm_probe_tokens:rate5m',
          p.sumBy(key + ['type'], 'rate', 'llm_probe_tokens_total', m(), '5m')),
      rec('target_currency:llm_probe_cost:increase1d',
          p.sumBy(['target'] + cfg.fleetLabels + ['currency'], 'increase', 'llm_probe_cost_total', m(), '1d')),
      // Token efficiency: output tokens / all tokens (input, cached_input, output, reasoning).
      rec('target_model_probe:llm_probe_token_efficiency:ratio_rate' + w,
          '%s\n/\n%s' % [
            p.sumBy(key, 'rate', 'llm_probe_tokens_total', m(['type="output"']), w),
            p.sumBy(key, 'rate', 'llm_probe_tokens_total', m(), w),
          ]),
      // Share of output tokens that were estimated because the server sent no usage.
      rec('target_model_probe:llm_probe_estimated_tokens:ratio_rate' + w,
          '%s\n/\n%s' % [
            p.sumBy(key, 'rate', 'llm_probe_estimated_tokens_total', m(), w),
            p.sumBy(key, 'rate', 'llm_probe_tokens_total', m(['type=~"output|reasoning"']), w),
          ]),
      // Accuracy of golden sets: passed answer checks / all answer checks.
      rec('target_model_probe:llm_probe_checks_passed:ratio_rate' + w,
          '%s\n/\n%s' % [
            p.sumBy(key, 'rate', 'llm_probe_checks_total', m(['outcome="pass"']), w),
            p.sumBy(key, 'rate', 'llm_probe_checks_total', m(), w),
          ]),
      rec('target_model_probe_currency:llm_probe_cost_per_success:ratio_rate' + w,
          '%s\n/ %s\n%s' % [
            p.sumBy(key + ['currency'], 'rate', 'llm_probe_cost_total', m(), w),
            onKey,
            p.sumBy(key, 'rate', 'llm_probe_requests_total', m(['result="success"']), w),
          ]),
      // Cost per correct answer: spend / passed answer checks.
      rec('target_model_probe_currency:llm_probe_cost_per_correct_answer:ratio_rate' + w,
          '%s\n/ %s\n%s' % [
            p.sumBy(key + ['currency'], 'rate', 'llm_probe_cost_total', m(), w),
            onKey,
            p.sumBy(key, 'rate', 'llm_probe_checks_total', m(['outcome="pass"']), w),
          ]),
    ],
  },

  local d = cfg.drift,
  // Accuracy and TTFT p95 over a day, to keep and compare over months. LLMProbeAccuracyDrift and
  // LLMProbeTTFTDrift compare the raw series with `offset` instead, so they work as soon as the
  // retention covers the offset, not only after these rules ran that long.
  local drift = {
    name: 'llm-probe-drift',
    interval: d.interval,
    rules: [
      rec('target_model_probe:llm_probe_checks_passed:ratio_rate' + d.window, $.accuracy()),
      rec('target_model_probe:llm_probe_ttft_seconds:p95_rate' + d.window, $.ttftP95()),
    ],
  },

  local exporter = {
    name: 'llm-probe-exporter',
    rules: [
      rec('instance:llm_probe_scheduler_lag_seconds:p99_rate' + cfg.schedulerLag.window,
          p.quantile(0.99, 'llm_probe_scheduler_lag_seconds', m(), [cfg.jobLabel, 'instance'],
                     cfg.schedulerLag.window)),
    ],
  },

  prometheusRules+:: {
    groups+: [objectives, availability, latencySlo, latency, efficiency, drift, exporter],
  },
}
