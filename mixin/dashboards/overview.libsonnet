// The fleet dashboard: every selected target, model and probe; regions (fleet labels) stay apart.
local g = import '../lib/grafana.libsonnet';
local p = import '../lib/promql.libsonnet';

{
  local cfg = $._config,
  local d = $._dash,
  local T = d.text,
  local s = d.sel,
  local e = d.exporterSel,
  // The exporter's own families that name a target (and model): they follow $target ($model).
  local et = e + ', target=~"$target"',
  local etm = et + ', model=~"$model"',
  local RI = '$__rate_interval',
  local R = '$__range',
  local fleet = d.fleet,
  local fl = d.fleetLegend,
  local key = cfg.seriesLabels + cfg.workloadLabels + fleet,
  local tm = ['target', 'model'] + fleet,
  local tmLegend = '{{target}} / {{model}}' + fl,
  local ms(extra) = std.join(', ', [s] + extra),
  local ratio(a, b) = '%s\n/\n%s' % [a, b],
  local currencyLegend(prefix) = prefix + fl + ' {{currency}}',

  local drilldown = [{
    title: 'Open ${__field.labels.target} / ${__field.labels.model}',
    url: '/d/llm-probe-model/llm-probe-model?${datasource:queryparam}&${%s:queryparam}' % cfg.jobLabel
         + std.join('', ['&${%s:queryparam}' % l for l in fleet])
         + '&var-target=${__field.labels.target}&var-model=${__field.labels.model}&${__url_time_range}',
  }],

  // p50, p90, p95, p99 and the mean of a histogram over the selection, per fleet label values.
  local quantilePanel(title, family, description) =
    g.timeseries(title, description + ' ' + T.quantiles,
                 [[p.quantile(q, family, s, fleet, RI), p.pname(q) + fl] for q in cfg.quantiles]
                 + [[p.mean(family, s, fleet, RI), 'mean' + fl]],
                 's'),

  // Per target and model: a quantile of a latency family and the series' objective beside it.
  local againstObjective(title, family, q, objective, description) =
    g.timeseries(title, description + ' ' + T.quantiles + ' ' + T.objectives,
                 [
                   [p.quantile(q, family, s, tm, RI), tmLegend],
                   ['max by (%s) (llm_probe_objective_seconds{%s})' % [p.list(tm), ms(['objective="%s"' % objective])],
                    'objective ' + tmLegend],
                 ],
                 's'),

  local metShare(objective, family) = [
    ratio(p.sumBy(tm, 'rate', 'llm_probe_objective_met_total', ms(['objective="%s"' % objective]), RI),
          '(\n  %s\n)' % p.indent(p.count(family, s, tm, RI), 2)),
    tmLegend + ' ' + objective,
  ],

  local accuracy(offset) = ratio(
    p.sumBy(tm, 'rate', 'llm_probe_checks_total', ms(['outcome="pass"']), cfg.drift.window, offset),
    p.sumBy(tm, 'rate', 'llm_probe_checks_total', s, cfg.drift.window, offset),
  ),

  local panels = [
    g.row('Overview (selected time range)'),
    g.stat('Availability', T.availability + ' Over the selected time range.',
           ratio(p.sumBy(fleet, 'increase', 'llm_probe_requests_total', ms(['result="success"']), R),
                 p.sumBy(fleet, 'increase', 'llm_probe_requests_total', s, R)),
           'percentunit', legend=std.stripChars(fl, ' '),
           defaults={ decimals: 2, thresholds: g.thresholds([[null, 'red'], [0.95, 'orange'], [0.99, 'green']]) }),
    g.stat('TTFT p95', T.ttft + ' p95 over the selected time range. ' + T.quantiles,
           p.quantile(0.95, 'llm_probe_ttft_seconds', s, fleet, R, 'increase'), 's',
           legend=std.stripChars(fl, ' '),
           defaults={ thresholds: g.thresholds([[null, 'green'], [2, 'orange'], [5, 'red']]) }),
    g.stat('Failing series',
           'Series (target/model/probe) whose last probe failed (llm_probe_success == 0).',
           'sum by (%s) (llm_probe_success{%s} == bool 0)' % [p.list(fleet), s], 'none',
           legend=std.stripChars(fl, ' '),
           defaults={ thresholds: g.thresholds([[null, 'green'], [1, 'red']]) }),
    g.stat('Oldest last probe',
           'Seconds since the least recently finished probe of the selection (llm_probe_last_run_timestamp_seconds). Much more than the probe interval means a series is stuck or skipped (see the LLMProbeSeriesStale alert).',
           'time() - min by (%s) (llm_probe_last_run_timestamp_seconds{%s} > 0)' % [p.list(fleet), s], 's',
           legend=std.stripChars(fl, ' '),
           defaults={ thresholds: g.thresholds([[null, 'green'], [300, 'orange'], [900, 'red']]) }),
    g.stat('Cost per hour', T.cost + ' Average per hour over the selected time range.',
           '%s / ($__range_s / 3600)' % p.sumBy(fleet + ['currency'], 'increase', 'llm_probe_cost_total', s, R),
           'short', legend=currencyLegend(''), defaults={ decimals: 2 },
           overrides=g.currencyOverrides(d.currencies, suffix=true)),
    g.stat('Error budget left (worst series, %s)' % cfg.sloPeriod,
           "The worst series' share of its availability error budget left over the SLO period (the last %s, whatever the selected range: a budget is a period's, and a short range would turn one failure into −5,000 %%): 1 − (failed share ÷ (1 − the series' availability objective)), 0 once spent. " % cfg.sloPeriod + T.objectives,
           |||
             clamp_min(
               min by (%(fleet)s) (
                 1 - (
                   (1 - %(success)s / %(all)s)
                   / on (%(key)s)
                   (1 - max by (%(key)s) (llm_probe_objective_ratio{%(sel)s, objective="availability"}))
                 )
               ),
               0
             )
           ||| % {
             fleet: p.list(fleet),
             key: p.list(key),
             sel: s,
             success: p.sumBy(key, 'increase', 'llm_probe_requests_total', ms(['result="success"']), cfg.sloPeriod),
             all: p.sumBy(key, 'increase', 'llm_probe_requests_total', s, cfg.sloPeriod),
           },
           'percentunit', legend=std.stripChars(fl, ' '),
           defaults={ decimals: 1, thresholds: g.thresholds([[null, 'red'], [0, 'orange'], [0.5, 'green']]) }),

    g.row('Model identity'),
    g.stat('Identity: series found different',
           'Identity series whose latest test window was found different from their reference (llm_probe_identity_consecutive_different ≥ 1); LLMProbeIdentityChanged pages at two in a row. The status page shows each series\' phase, p-value and since when. ' + T.identity,
           'sum by (%s) (llm_probe_identity_consecutive_different{%s} > bool 0)' % [p.list(fleet), s], 'none',
           w=6, legend=std.stripChars(fl, ' '),
           defaults={ thresholds: g.thresholds([[null, 'green'], [1, 'red']]) }),
    g.timeseries('Identity: p-value of the latest test per series',
                 T.identity + ' Log scale: each step is a new window; below the probe\'s alpha the window was found different. Click through to the model dashboard for distance and samples.',
                 [['max by (%s) (llm_probe_identity_pvalue{%s})' % [p.list(key), s], '{{target}} / {{model}} / {{probe}}' + fl]],
                 'none', w=18,
                 defaults={ min: 0.0001, max: 1, custom+: { scaleDistribution: { type: 'log', log: 10 } } }),

    g.row('Status'),
    g.stateTimeline('Last probe result per series',
                    'llm_probe_success: 1 when the last probe of the series succeeded, 0 when it failed. Click a series to open the model dashboard.',
                    'llm_probe_success{%s}' % s, '{{target}} / {{model}} / {{probe}}' + fl, links=drilldown),
    g.timeseries('Availability by target and model', T.availability,
                 [[ratio(p.sumBy(tm, 'rate', 'llm_probe_requests_total', ms(['result="success"']), RI),
                          p.sumBy(tm, 'rate', 'llm_probe_requests_total', s, RI)), tmLegend]],
                 'percentunit', defaults={ min: 0, max: 1 }),
    g.timeseries('Failures by result', 'Failed probes per result in each interval. ' + T.availability,
                 [[p.sumBy(['result'] + fleet, 'increase', 'llm_probe_requests_total', ms(['result!="success"']), RI),
                   '{{result}}' + fl]],
                 'none', stack=true),

    g.row('Objectives'),
    g.timeseries('Share of probes within their latency objective',
                 'Share of successful probes at or below their own TTFT, TPOT and duration objective: llm_probe_objective_met_total (counted by the exporter against the series\' objective, exact) / the histogram\'s count. ' + T.objectives,
                 [metShare(o, $.latencyObjectives[o]) for o in $.latencyObjectiveNames],
                 'percentunit', defaults={ min: 0, max: 1 }),
    g.timeseries('Availability error budget burn rate',
                 "Failed share ÷ (1 − the series' availability objective), per series: 1 spends the 30-day budget in exactly 30 days; the alerts page at 14.4 (1 h) and 6 (6 h). " + T.objectives,
                 [[|||
                     (
                       %s
                       /
                       %s
                     )
                     / on (%s)
                     (1 - max by (%s) (llm_probe_objective_ratio{%s, objective="availability"}))
                   ||| % [
                     p.sumBy(key, 'rate', 'llm_probe_requests_total', ms(['result!="success"']), RI),
                     p.sumBy(key, 'rate', 'llm_probe_requests_total', s, RI),
                     p.list(key), p.list(key), s,
                   ], '{{target}} / {{model}} / {{probe}}' + fl]],
                 'none'),

    g.row('Latency'),
    quantilePanel('TTFT', 'llm_probe_ttft_seconds', T.ttft),
    quantilePanel('Time to first answer', 'llm_probe_time_to_first_answer_seconds', T.ttfa),
    quantilePanel('TPOT', 'llm_probe_tpot_seconds', T.tpot),
    quantilePanel('E2E duration', 'llm_probe_duration_seconds', T.e2e),
    g.heatmap('TTFT heatmap',
              T.ttft + ' Probes per TTFT bucket in each interval, over the whole selection (pick one location to see one region): native buckets where Prometheus stores them, else the classic ones.',
              'sum(increase(llm_probe_ttft_seconds{%s}[%s]))\nor on ()\nsum by (le) (increase(llm_probe_ttft_seconds_bucket{%s}[%s]))'
              % [s, RI, s, RI],
              'Oranges'),
    againstObjective('TTFT p95 by target and model', 'llm_probe_ttft_seconds', 0.95, 'ttft', T.ttft),

    g.row('Throughput'),
    g.timeseries('Output tokens per second (TPS) p50', T.tps + ' ' + T.quantiles,
                 [[p.quantile(0.5, 'llm_probe_output_tokens_per_second', s, tm, RI), tmLegend]], 'suffix: tokens/s'),
    g.timeseries('Output tokens per second (TPS) p10', T.tps + ' p10: the slowest tenth of probes. ' + T.quantiles,
                 [[p.quantile(0.1, 'llm_probe_output_tokens_per_second', s, tm, RI), tmLegend]], 'suffix: tokens/s'),

    g.row('Efficiency and quality'),
    g.timeseries('Token efficiency', 'Output tokens ÷ all tokens (input, cached_input, output, reasoning): how much of what is billed is answer. ' + T.tokens,
                 [[ratio(p.sumBy(tm, 'rate', 'llm_probe_tokens_total', ms(['type="output"']), RI),
                         p.sumBy(tm, 'rate', 'llm_probe_tokens_total', s, RI)), tmLegend]],
                 'percentunit', w=8, defaults={ min: 0, max: 1 }),
    g.timeseries('Accuracy', T.accuracy,
                 [[ratio(p.sumBy(tm, 'rate', 'llm_probe_checks_total', ms(['outcome="pass"']), RI),
                         p.sumBy(tm, 'rate', 'llm_probe_checks_total', s, RI)), tmLegend]],
                 'percentunit', w=8, defaults={ min: 0, max: 1 }),
    g.timeseries('Estimated-token share',
                 'Share of output and reasoning tokens that the exporter estimated because the server sent no usage (llm_probe_estimated_tokens_total); TPOT and TPS of such series rest on the estimate.',
                 [[ratio(p.sumBy(tm, 'rate', 'llm_probe_estimated_tokens_total', s, RI),
                         p.sumBy(tm, 'rate', 'llm_probe_tokens_total', ms(['type=~"output|reasoning"']), RI)), tmLegend]],
                 'percentunit', w=8, defaults={ min: 0, max: 1 }),
    g.timeseries('Cost per successful probe and per correct answer',
                 T.cost + ' Spend ÷ successful probes, and spend ÷ passed answer checks (what one correct answer costs).',
                 [
                   [ratio(p.sumBy(tm + ['currency'], 'rate', 'llm_probe_cost_total', s, RI),
                          'on (%s) group_left ()\n%s' % [p.list(tm), p.sumBy(tm, 'rate', 'llm_probe_requests_total', ms(['result="success"']), RI)]),
                    currencyLegend('{{target}} / {{model}} per success')],
                   [ratio(p.sumBy(tm + ['currency'], 'rate', 'llm_probe_cost_total', s, RI),
                          'on (%s) group_left ()\n%s' % [p.list(tm), p.sumBy(tm, 'rate', 'llm_probe_checks_total', ms(['outcome="pass"']), RI)]),
                    currencyLegend('{{target}} / {{model}} per correct answer')],
                 ],
                 'short', w=24, defaults={ decimals: 6 },
                 overrides=g.currencyOverrides(d.currencies, suffix=true)),
    g.timeseries('Accuracy drift: now vs %s' % std.join(' and ', cfg.drift.offsets),
                 T.accuracy + ' Over the last %s, now and the same window %s ago (LLMProbeAccuracyDrift fires on a drop of more than %s points).'
                 % [cfg.drift.window, std.join(' and ', cfg.drift.offsets), p.num(100 * cfg.drift.accuracyDrop)],
                 [[accuracy(''), tmLegend + ' now']]
                 + [[accuracy(o), tmLegend + ' ' + o + ' ago'] for o in cfg.drift.offsets],
                 'percentunit', defaults={ min: 0, max: 1 }),
    g.timeseries('TTFT p95 drift: now vs %s' % std.join(' and ', cfg.drift.offsets),
                 T.ttft + ' p95 over the last %s, now and the same window %s ago (LLMProbeTTFTDrift fires on a rise of more than %s %%). '
                 % [cfg.drift.window, std.join(' and ', cfg.drift.offsets), p.num(100 * cfg.drift.ttftRise)] + T.quantiles,
                 [[p.quantile(0.95, 'llm_probe_ttft_seconds', s, tm, cfg.drift.window), tmLegend + ' now']]
                 + [[p.quantile(0.95, 'llm_probe_ttft_seconds', s, tm, cfg.drift.window, 'rate', o), tmLegend + ' ' + o + ' ago']
                    for o in cfg.drift.offsets],
                 's'),

    g.row('Tokens and cost'),
    g.timeseries('Tokens by type', 'Tokens per minute by type, stacked. ' + T.tokens + ' From usage when the server reports it, else an offline estimate.',
                 [['%s * 60' % p.sumBy(['type'] + fleet, 'rate', 'llm_probe_tokens_total', s, RI), '{{type}}' + fl]],
                 'suffix: tokens/min', w=8, stack=true),
    g.timeseries('Cost per hour by target', T.cost,
                 [['%s * 3600' % p.sumBy(['target'] + fleet + ['currency'], 'rate', 'llm_probe_cost_total', s, RI),
                   currencyLegend('{{target}}')]],
                 'short', w=8, defaults={ decimals: 2 }, overrides=g.currencyOverrides(d.currencies, suffix=true)),
    g.stat('Projected cost per month', T.cost + ' Spend of the last 24 hours × 30.',
           '%s * 30' % p.sumBy(fleet + ['currency'], 'increase', 'llm_probe_cost_total', s, '1d'),
           'short', w=8, legend=currencyLegend(''), defaults={ decimals: 2 },
           overrides=g.currencyOverrides(d.currencies, suffix=true)),
    g.newline,
    g.timeseries('Rate-limit remaining',
                 "Requests and tokens left in the provider's rate-limit window, from its x-ratelimit-remaining-* headers on the last response. Near zero means users are about to be throttled (429, result=rate_limited).",
                 [
                   ['llm_probe_ratelimit_remaining_requests{%s}' % s, '{{target}} / {{model}} / {{probe}}' + fl + ' requests'],
                   ['llm_probe_ratelimit_remaining_tokens{%s}' % s, '{{target}} / {{model}} / {{probe}}' + fl + ' tokens'],
                 ],
                 'short', w=24),

    g.row('Gateways and prices'),
    g.timeseries('Discovered models',
                 "Each discovering target's gateway list — the figures of `check --discover` and the status page: listed (llm_probe_discovery_listed_models, entries the gateway sent), kept (llm_probe_discovery_kept_models, named in models: or passing include/exclude) and probed (llm_probe_discovery_models, with series; kept − probed were left out by the caps or fit no probe) — and the age of that list (time since llm_probe_discovery_last_success_timestamp_seconds). A list that keeps ageing means refreshes fail: the last good list stays probed.",
                 [
                   ['llm_probe_discovery_listed_models{%s}' % et, '{{target}} listed'],
                   ['llm_probe_discovery_kept_models{%s}' % et, '{{target}} kept'],
                   ['llm_probe_discovery_models{%s}' % et, '{{target}} probed'],
                   ['time() - llm_probe_discovery_last_success_timestamp_seconds{%s}' % et, '{{target}} list age (s)'],
                 ],
                 'none', w=8),
    g.timeseries('Model list refreshes',
                 'Refreshes of each gateway model list per interval by result (llm_probe_discovery_refreshes_total: success, or a probe result such as auth, timeout, http_5xx, stream for a malformed, oversized or too complex list), and the listed names refused per interval by reason (llm_probe_discovery_names_refused_total: invalid, invisible, secret, duplicate, pattern_timeout, daily_limit).',
                 [
                   ['sum by (target, result) (increase(llm_probe_discovery_refreshes_total{%s}[%s]))' % [et, RI], '{{target}} {{result}}'],
                   ['sum by (target, reason) (increase(llm_probe_discovery_names_refused_total{%s}[%s]))' % [et, RI], '{{target}} refused: {{reason}}'],
                 ],
                 'none', w=8),
    g.table('Price sources',
            "Where each probed model's price comes from (llm_probe_price_info): config (targets[].prices), gateway (its own model info), library (genai-prices), or unknown — no cost is counted for those (docs/prices.md).",
            'llm_probe_price_info{%s}' % etm, w=8, hide=['Time', 'Value', '__name__', 'job']),
    g.newline,
    g.timeseries('Refused prices and capped charges',
                 "What a gateway claims about money and is not believed: models whose gateway or library price a sanity bound refused (llm_probe_prices_refused by target and reason: above_ceiling, over 1,000 per 1M tokens; above_library, a gateway's over 10x the library's price), and probes per interval whose claimed usage cost more than the probe's charge ceiling and were charged the ceiling (llm_probe_cost_capped_total). Any capped charge is an upstream over-claim (docs/prices.md).",
                 [
                   ['sum by (%s) (llm_probe_prices_refused{%s})' % [std.join(', ', ['target', 'reason'] + fleet), et], '{{target}} prices refused: {{reason}}' + fl],
                   [p.sumBy(['target'] + fleet, 'increase', 'llm_probe_cost_capped_total', s, RI), '{{target}} charges capped' + fl],
                 ],
                 'none', w=12),
    g.timeseries('Budget by target',
                 "Each target's spend today (UTC) against its share of global.budget (llm_probe_budget_target_spent, llm_probe_budget_target_limit: global.budget.shares, else equal parts). At its share a target's probes are skipped (reason budget) while the others go on.",
                 [
                   ['llm_probe_budget_target_spent{%s}' % et, '{{target}} spent {{currency}}'],
                   ['llm_probe_budget_target_limit{%s}' % et, '{{target}} share {{currency}}'],
                 ],
                 'short', w=12, defaults={ decimals: 2 }, overrides=g.currencyOverrides(d.currencies, suffix=true)),

    g.row('Phases'),
    g.timeseries('Where the time goes (mean per phase)',
                 T.phases + ' With several locations selected, pick one to read a single stack.',
                 [[p.mean('llm_probe_phase_seconds', s, ['phase'] + fleet, RI), '{{phase}}' + fl]],
                 's', w=24, stack=true),

    g.row('Exporter health'),
    g.timeseries('Scrape up', 'up: 1 when Prometheus scraped the exporter (job $%s).' % cfg.jobLabel,
                 [['up{%s}' % e, '{{instance}}']], 'none', w=4, defaults={ min: 0, max: 1 }),
    g.stat('Config loaded',
           'llm_probe_config_last_reload_successful: 1 when the last load or reload of the config file succeeded; after a failed reload the previous config keeps running. With --web.config.file, llm_probe_web_config_last_reload_successful counts too: 0 when the web config (or a TLS file it names) could not be re-read, and the previous one keeps serving.',
           'min(llm_probe_config_last_reload_successful{%s}) * (min(llm_probe_web_config_last_reload_successful{%s}) or vector(1))' % [e, e], 'none',
           defaults={ mappings: g.okMappings('ok', 'reload failed'), thresholds: g.thresholds([[null, 'red'], [1, 'green']]) }),
    g.table('Build info', 'llm_probe_build_info: version and Python of each instance.',
            'llm_probe_build_info{%s}' % e, w=4, hide=['Time', 'Value', '__name__']),
    g.timeseries('Scheduler and event loop lag',
                 'How late probes start compared with their schedule (jitter excluded). It grows when max_concurrency is saturated or the event loop is blocked. Event loop lag: how late the loop that stamps tokens wakes a timer; when it is high, timings may be skewed.',
                 [
                   [p.quantile(0.99, 'llm_probe_scheduler_lag_seconds', e, ['instance'], RI), '{{instance}} scheduler p99'],
                   [p.quantile(0.5, 'llm_probe_scheduler_lag_seconds', e, ['instance'], RI), '{{instance}} scheduler p50'],
                   [p.quantile(0.99, 'llm_probe_event_loop_lag_seconds', e, ['instance'], RI), '{{instance}} event loop p99'],
                 ],
                 's', w=6),
    g.timeseries('Skipped probes and probes in flight',
                 'Probes skipped per interval by reason (budget: daily budget spent; overlap: the previous run of the series had not finished; rate_limited: the provider asked to wait) and probes running now.',
                 [
                   [p.sumBy(['reason'] + fleet, 'increase', 'llm_probe_skipped_total', s, RI), 'skipped: {{reason}}' + fl],
                   ['sum by (instance) (llm_probe_in_flight{%s})' % e, 'in flight: {{instance}}'],
                 ],
                 'none', w=6),
    g.newline,
    g.timeseries('Daily budget',
                 "Spent today (UTC) against global.budget.max_cost_per_day: llm_probe_budget_spent and llm_probe_budget_limit. At the limit the exporter skips probes until the next UTC day (LLMProbeBudgetExhausted).",
                 [
                   ['llm_probe_budget_spent{%s}' % e, '{{instance}} spent {{currency}}'],
                   ['llm_probe_budget_limit{%s}' % e, '{{instance}} limit {{currency}}'],
                 ],
                 'short', w=8, defaults={ decimals: 2 }, overrides=g.currencyOverrides(d.currencies, suffix=true)),
    g.stat('Spend record',
           "llm_probe_budget_record_ok: 1 while the spend record of global.budget is usable; 0 when it cannot be read or its path holds a file that is not the exporter's — then every probe is skipped until it is fixed and the config reloaded (LLMProbeBudgetRecordUnusable). Empty without a budget.",
           'min(llm_probe_budget_record_ok{%s})' % e, 'none',
           defaults={ mappings: g.okMappings('ok', 'unusable: probing stopped'), thresholds: g.thresholds([[null, 'red'], [1, 'green']]) }),
    g.timeseries('Exporter memory and state', "Resident memory of each exporter process (process_resident_memory_bytes) and the bytes of its files in global.state_dir (llm_probe_state_bytes: the spend record and identity references; departed series' references are removed after an hour).",
                 [
                   ['process_resident_memory_bytes{%s}' % e, '{{instance}} memory'],
                   ['llm_probe_state_bytes{%s}' % e, '{{instance}} state dir'],
                 ], 'bytes', w=6),
    g.timeseries('Exporter CPU', 'CPU seconds per second of each exporter process (rate of process_cpu_seconds_total): 1 is one core busy.',
                 [['rate(process_cpu_seconds_total{%s}[%s])' % [e, RI], '{{instance}}']], 'short', w=6),
    g.newline,
    g.timeseries('Exporter port: connections',
                 "Open connections to each exporter's port (llm_probe_http_connections) against its cap (llm_probe_http_connections_limit, kept below the descriptor limit). Near the cap, idle and slow clients are evicted first; see docs/security.md.",
                 [
                   ['llm_probe_http_connections{%s}' % e, '{{instance}} open'],
                   ['llm_probe_http_connections_limit{%s}' % e, '{{instance}} limit'],
                 ],
                 'none', w=12),
    g.timeseries('Exporter port: connections closed',
                 'Connections the port closed per second, by reason: header_timeout (no request head within the limit: slowloris), idle_timeout, evicted (made room at the cap), rejected (at the cap with every connection busy). A steady rate means a client is misbehaving.',
                 [['sum by (instance, reason) (rate(llm_probe_http_connections_closed_total{%s}[%s]))' % [e, RI], '{{instance}} {{reason}}']],
                 'reqps', w=12),
  ],

  grafanaDashboards+:: {
    'llm-probe-overview.json': d.dashboard(
      'llm-probe-overview',
      'LLM probe / Overview',
      'Fleet view of llm-probe-exporter: availability, objectives, TTFT, TPOT, TPS, efficiency and quality, tokens, cost and the health of the exporter for every selected target, model and probe; locations and clusters stay apart.',
      panels,
    ),
  },
}
