// Recording rules. Names follow level:metric:operations; "target_model_probe" series keep exactly
// the series labels and the fleet labels of _config (so the shards of a StatefulSet add up and
// regions never do).
local p = import 'lib/promql.libsonnet';

{
  local cfg = $._config,
  local key = cfg.seriesLabels + cfg.workloadLabels + cfg.fleetLabels,
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
  // Every window whose coverage a rule reads (burn rates, failing locations).
  coverageWindows:: p.windows($.sloWindows + [cfg.locationFailure.window]),

  // The share of window `w` a series' probes cover, at most 1: probes finished or skipped in the
  // window over the probes it holds at the series' interval. An old series covers 1; a series
  // 10 minutes old covers 1/6 of an hour. Failure shares are multiplied by it, so the minutes of
  // a young series count as minutes, never as a whole window (the probes it did not run yet
  // count as good). Skipped ticks count as covered: a probe that overran its interval (overlap)
  // is one failure, not a gap.
  coverage(by, w)::
    local interval = 'max by (%s) (max_over_time(llm_probe_interval_seconds{%s}[%s]))' % [p.list(key), m(), w];
    local ticks = '{__name__=~"llm_probe_requests_total|llm_probe_skipped_total", %s}' % m();
    'clamp_max(\n  %s\n  /\n  (%d * sum by (%s) (1 / %s)),\n  1\n)' % [
      'sum by (%s) (increase(%s[%s]))' % [p.list(by), ticks, w], p.seconds(w), p.list(by), interval,
    ],
  // Recorded burn rates: the failed share of the window (times its coverage) over the share the
  // objective allows. 1 spends the budget of `sloPeriod` in exactly `sloPeriod`.
  availabilityBurn(w):: 'target_model_probe:llm_probe_availability_budget_burn:rate' + w,
  latencyBurn(w):: 'target_model_probe_objective:llm_probe_latency_budget_burn:rate' + w,

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
      rec('target_model_probe:llm_probe_window_coverage:ratio' + w, $.coverage(key, w))
      for w in $.coverageWindows
    ] + [
      rec($.availabilityBurn(w),
          |||
            target_model_probe:llm_probe_requests_failed:ratio_rate%(w)s
            * on (%(k)s)
            target_model_probe:llm_probe_window_coverage:ratio%(w)s
            / on (%(k)s)
            (1 - target_model_probe_objective:llm_probe_objective_ratio:max{objective="availability"})
          ||| % { w: w, k: p.list(key) })
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
      local byRegion = ['target', 'model'] + cfg.fleetLabels;
      local w = cfg.locationFailure.window;
      rec('target_model_%s:llm_probe_window_coverage:ratio%s' % [cfg.regionLabel, w],
          $.coverage(byRegion, w)),
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
    ] + [
      // Only for series with this objective: a series without one has no latency budget.
      rec($.latencyBurn(w),
          |||
            target_model_probe_objective:llm_probe_objective_missed:ratio_rate%(w)s{objective="%(o)s"}
            * on (%(k)s) group_left ()
            target_model_probe:llm_probe_window_coverage:ratio%(w)s
            / (1 - %(t)s)
            and on (%(k)s, objective)
            target_model_probe_objective:llm_probe_objective_seconds:max
          ||| % { w: w, o: objective, k: p.list(key), t: p.num(cfg.latencyTargets[objective]) },
          { objective: objective })
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
      // The quantile LLMProbeLatencyHigh compares with each objective, over its long and short
      // window (unless the 5m quantiles above already hold it).
      local q = cfg.latencyTargets[objective];
      local family = $.latencyObjectives[objective];
      rec('target_model_probe:%s:%s_rate%s' % [family, p.pname(q), w],
          p.quantile(q, family, m(), key, w))
      for objective in $.latencyObjectiveNames
      for w in p.windows([cfg.latencyHigh.window, cfg.latencyHigh.short])
      if !(w == '5m' && std.member(cfg.quantiles, cfg.latencyTargets[objective]))
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
      // What the gateway billed (usage.cost, USD) over what the price table says the same
      // probes cost: 1 when the prices are the gateway's, above when it bills more.
      rec($.billedRatioName,
          '%s
/
%s' % [
            p.sumBy(key, 'rate', 'llm_probe_reported_cost_total', m(['currency="USD"']), cfg.billedAbovePrice.window),
            p.sumBy(key, 'rate', 'llm_probe_cost_total', m(['currency="USD"']), cfg.billedAbovePrice.window),
          ]),
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

  local ww = cfg.workload.window,
  local workload = {
    name: 'llm-probe-workload',
    rules: [
      // Prefill throughput of context-length ladders: input tokens (cached included) read per
      // second of TTFT.
      rec('target_model_probe:llm_probe_prefill_tokens_per_second:ratio_rate' + ww,
          '%s\n/\n%s' % [
            p.sumBy(key, 'rate', 'llm_probe_tokens_total', m(['input_tokens!=""', 'type=~"input|cached_input"']), ww),
            p.histSum('llm_probe_ttft_seconds', m(['input_tokens!=""']), key, ww),
          ]),
      // Money a prompt cache saved per second, per cache pair series and currency: what its
      // probes would have cost without the cache minus what they cost (negative on a cold
      // series, whose writes cost more than input; the pair's sum is what the cache is worth).
      rec('target_model_probe_currency:llm_probe_cache_saved:rate' + ww,
          '%s\n-\n%s' % [
            p.sumBy(key + ['currency'], 'rate', 'llm_probe_cost_without_cache_total', m(), ww),
            p.sumBy(key + ['currency'], 'rate', 'llm_probe_cost_total', m(['cache!=""']), ww),
          ]),
      // The share of input tokens read from a prompt cache, per cache pair series.
      rec('target_model_probe:llm_probe_cached_input:ratio_rate' + ww,
          '%s\n/\n%s' % [
            p.sumBy(key, 'rate', 'llm_probe_tokens_total', m(['cache!=""', 'type="cached_input"']), ww),
            p.sumBy(key, 'rate', 'llm_probe_tokens_total', m(['cache!=""', 'type=~"input|cached_input"']), ww),
          ]),
    ] + [
      rec('target_model_probe:llm_probe_cached_input:ratio_rate' + w,
          '%s\n/\n%s' % [
            p.sumBy(key, 'rate', 'llm_probe_tokens_total', m(['cache="warm"', 'type="cached_input"']), w),
            p.sumBy(key, 'rate', 'llm_probe_tokens_total', m(['cache="warm"', 'type=~"input|cached_input"']), w),
          ])
      for w in [cfg.promptCacheCold.short]
      if w != ww
    ],
  },

  local an = cfg.ttftAnomaly,
  local er = cfg.errorRateAnomaly,
  // p95 TTFT over the anomaly window `offset` ago, from the raw histograms (no wait until a
  // recording rule has run for a week).
  ttftP95Window(offset=''):: p.quantile(0.95, 'llm_probe_ttft_seconds', m(), key, an.window, 'rate', offset),
  // The failed share of probes over `w`, `offset` ago. A series without failures is a 0, not a
  // gap: its quiet days count as days on record.
  failedShare(w, offset='')::
    local all = p.sumBy(key, 'rate', 'llm_probe_requests_total', m(), w, offset);
    '(\n  %s\n  or\n  0 * %s\n)\n/\n%s' % [
      p.sumBy(key, 'rate', 'llm_probe_requests_total', m(['result!="success"']), w, offset), all, all,
    ],
  // `at(offset)` on each of the past `a.days` steps, labelled by the step (to take their median
  // and count them).
  local pastSteps(at, a) =
    local unit = a.step[std.length(a.step) - 1];
    local count = std.parseInt(std.substr(a.step, 0, std.length(a.step) - 1));
    std.join('\nor\n', [
      'label_replace(\n  %s,\n  "days_ago", "%d", "", ""\n)' % [p.indent(at('%d%s' % [d * count, unit]), 2), d]
      for d in std.range(1, a.days)
    ]),
  local medianAndDays(name, past, a) = [
    rec($.sameTime(name, 'median', a),
        'quantile by (%s) (\n  0.5,\n  %s\n)' % [p.list(key), p.indent(past, 2)]),
    rec($.sameTime(name, 'days', a),
        'count by (%s) (\n  %s\n)' % [p.list(key), p.indent(past, 2)]),
  ],
  // The names the anomaly alerts read: `<series>_same_time_median<span>` (the median) and
  // `_days<span>` (how many past steps it had), the span being `days` steps (7d: 7 of 1d).
  sameTime(name, what, a)::
    local unit = a.step[std.length(a.step) - 1];
    local count = std.parseInt(std.substr(a.step, 0, std.length(a.step) - 1));
    '%s_same_time_%s%d%s' % [name, what, a.days * count, unit],
  billedRatioName:: 'target_model_probe:llm_probe_reported_cost:ratio_rate' + cfg.billedAbovePrice.window,
  ttftAnomalyName:: 'target_model_probe:llm_probe_ttft_seconds:p95_rate' + an.window,
  errorAnomalyName:: 'target_model_probe:llm_probe_requests_failed:ratio_rate%s' % er.window,
  local anomaly = {
    name: 'llm-probe-anomaly',
    interval: an.interval,
    rules: [rec($.ttftAnomalyName, $.ttftP95Window())]
           + medianAndDays($.ttftAnomalyName, pastSteps($.ttftP95Window, an), an),
  },
  local errorAnomaly = {
    name: 'llm-probe-error-anomaly',
    interval: er.interval,
    rules: medianAndDays($.errorAnomalyName,
                         pastSteps(function(offset) $.failedShare(er.window, offset), er), er),
  },

  local exporter = {
    name: 'llm-probe-exporter',
    rules: [
      rec('instance:llm_probe_scheduler_lag_seconds:p99_rate' + w,
          p.quantile(0.99, 'llm_probe_scheduler_lag_seconds', m(), [cfg.jobLabel, 'instance'], w))
      for w in p.windows([cfg.schedulerLag.window, cfg.schedulerLag.short])
    ],
  },

  prometheusRules+:: {
    groups+: [objectives, availability, latencySlo, latency, efficiency, drift, exporter, workload,
              anomaly, errorAnomaly],
  },
}
