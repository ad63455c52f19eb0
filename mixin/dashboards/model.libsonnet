// The drill-down dashboard: one target and model, its probes side by side, and our timings next
// to the server's own.
local g = import '../lib/grafana.libsonnet';
local p = import '../lib/promql.libsonnet';

{
  local cfg = $._config,
  local d = $._dash,
  local T = d.text,
  local s = d.sel,
  local RI = '$__rate_interval',
  local R = '$__range',
  local fleet = d.fleet,
  local fl = d.fleetLegend,
  local byProbe = ['probe'] + fleet,
  local byModel = ['model'] + fleet,
  local probeLegend = '{{probe}}' + fl,
  local ms(extra) = std.join(', ', [s] + extra),
  local ratio(a, b) = '%s\n/\n%s' % [a, b],
  local paren(x) = '(\n  %s\n)' % p.indent(x, 2),
  local onProbe = 'on (%s) group_left ()' % p.list(byProbe),

  local rangeStat(title, family, q, unit, description) =
    g.stat(title, description + ' Over the selected time range. ' + T.quantiles,
           p.quantile(q, family, s, fleet, R, 'increase'), unit, legend=std.stripChars(fl, ' ')),

  // p50 and p95 per probe, with the series' objective where there is one.
  local byProbePanel(title, family, description, objective=null) =
    g.timeseries(title, description + ' p50 and p95 per probe. ' + T.quantiles,
                 [
                   [p.quantile(0.5, family, s, byProbe, RI), probeLegend + ' p50'],
                   [p.quantile(0.95, family, s, byProbe, RI), probeLegend + ' p95'],
                 ] + (if objective == null then [] else [
                   ['max by (%s) (llm_probe_objective_seconds{%s})' % [p.list(byProbe), ms(['objective="%s"' % objective])],
                    probeLegend + ' objective'],
                 ]),
                 's'),

  // The servers' own mean TTFT where the same Prometheus scrapes them, labelled `model` like ours.
  local vllmTTFT =
    'label_replace(\n  %s\n  /\n  %s,\n  "model", "$1", "model_name", "(.*)"\n)' % [
      'sum by (model_name) (rate(vllm:time_to_first_token_seconds_sum{model_name=~"$model"}[%s]))' % RI,
      'sum by (model_name) (rate(vllm:time_to_first_token_seconds_count{model_name=~"$model"}[%s]))' % RI,
    ],
  local litellmTTFT =
    'label_replace(\n  %s\n  /\n  %s,\n  "model", "$1", "requested_model", "(.*)"\n)' % [
      'sum by (requested_model) (rate(litellm_llm_api_time_to_first_token_metric_sum{requested_model=~"$model"}[%s]))' % RI,
      'sum by (requested_model) (rate(litellm_llm_api_time_to_first_token_metric_count{requested_model=~"$model"}[%s]))' % RI,
    ],
  local oursTTFT = p.mean('llm_probe_ttft_seconds', s, byModel, RI),
  local serverPhase(phase) = p.mean('llm_probe_server_duration_seconds', ms(['phase="%s"' % phase]), byModel, RI),
  local minus(a, on, b) = '%s\n- %s\n%s' % [paren(a), on, paren(b)],

  local panels = [
    g.row('$target / $model (selected time range)'),
    g.stat('Availability', T.availability + ' Over the selected time range.',
           ratio(p.sumBy(fleet, 'increase', 'llm_probe_requests_total', ms(['result="success"']), R),
                 p.sumBy(fleet, 'increase', 'llm_probe_requests_total', s, R)),
           'percentunit', legend=std.stripChars(fl, ' '),
           defaults={ decimals: 2, thresholds: g.thresholds([[null, 'red'], [0.95, 'orange'], [0.99, 'green']]) }),
    rangeStat('TTFT p50', 'llm_probe_ttft_seconds', 0.5, 's', T.ttft),
    rangeStat('TTFT p95', 'llm_probe_ttft_seconds', 0.95, 's', T.ttft),
    rangeStat('TPOT p50', 'llm_probe_tpot_seconds', 0.5, 's', T.tpot),
    rangeStat('TPS p50', 'llm_probe_output_tokens_per_second', 0.5, 'suffix: tokens/s', T.tps),
    g.stat('Probes run', 'Finished probes over the selected range (all results), rounded: increase() extrapolates to the range\'s edges, and a count of probes is whole.',
           'round(%s)' % p.sumBy(fleet, 'increase', 'llm_probe_requests_total', s, R), 'none',
           legend=std.stripChars(fl, ' ')),

    g.row('Compare probes (text, long, image, ...)'),
    byProbePanel('TTFT by probe', 'llm_probe_ttft_seconds',
                 T.ttft + " An image probe's TTFT minus a text probe's is the cost of sending the image.", 'ttft'),
    byProbePanel('Time to first answer by probe', 'llm_probe_time_to_first_answer_seconds', T.ttfa),
    byProbePanel('TPOT by probe', 'llm_probe_tpot_seconds', T.tpot, 'tpot'),
    byProbePanel('E2E duration by probe', 'llm_probe_duration_seconds', T.e2e, 'duration'),
    g.timeseries('TPS by probe', T.tps + ' ' + T.quantiles,
                 [
                   [p.quantile(0.5, 'llm_probe_output_tokens_per_second', s, byProbe, RI), probeLegend + ' p50'],
                   [p.quantile(0.1, 'llm_probe_output_tokens_per_second', s, byProbe, RI), probeLegend + ' p10'],
                 ],
                 'suffix: tokens/s'),
    g.timeseries('Output tokens per probe run',
                 'Mean output tokens (N in TPOT and TPS) and reasoning tokens per finished probe. ' + T.tokens,
                 [
                   [ratio(p.sumBy(byProbe, 'rate', 'llm_probe_tokens_total', ms(['type="%s"' % t]), RI),
                          p.sumBy(byProbe, 'rate', 'llm_probe_requests_total', s, RI)), probeLegend + ' ' + t]
                   for t in ['output', 'reasoning']
                 ],
                 'suffix: tokens'),

    g.row("Ours vs the server's own"),
    g.timeseries("TTFT: ours vs the server's", T.server + ' Means (sum / count), so they can be subtracted.',
                 [
                   [oursTTFT, 'ours: TTFT {{model}}' + fl],
                   [serverPhase('prefill'), 'server: prefill {{model}}' + fl],
                   [vllmTTFT, 'vLLM: TTFT {{model}}'],
                   [litellmTTFT, 'LiteLLM: TTFT {{model}}'],
                 ],
                 's'),
    g.timeseries('Queueing + network (ours − theirs)',
                 T.server + " Our mean TTFT minus the server's prefill or TTFT, and our mean E2E duration minus the server's total: the time spent queueing before the server and on the network, per model.",
                 [
                   [minus(oursTTFT, 'on (%s)' % p.list(byModel), serverPhase('prefill')), 'TTFT − server prefill {{model}}' + fl],
                   [minus(oursTTFT, 'on (model) group_left ()', vllmTTFT), 'TTFT − vLLM TTFT {{model}}' + fl],
                   [minus(oursTTFT, 'on (model) group_left ()', litellmTTFT), 'TTFT − LiteLLM TTFT {{model}}' + fl],
                   [minus(p.mean('llm_probe_duration_seconds', s, byModel, RI), 'on (%s)' % p.list(byModel), serverPhase('total')),
                    'E2E − server total {{model}}' + fl],
                 ],
                 's'),

    g.row('Streaming'),
    g.heatmap('Inter-chunk gaps',
              'Every gap between consecutive token-bearing chunks, over all selected probes and locations. Stalls show up as a band of long gaps; a gateway that batches tokens shows fewer, longer gaps (TPOT stays right because it is counted by tokens).',
              'sum(increase(llm_probe_inter_chunk_seconds{%s}[%s]))\nor on ()\nsum by (le) (increase(llm_probe_inter_chunk_seconds_bucket{%s}[%s]))'
              % [s, RI, s, RI],
              'Blues'),
    g.timeseries('Inter-chunk gap quantiles', 'p50 and p99 of the gaps between token-bearing chunks, per probe. ' + T.quantiles,
                 [
                   [p.quantile(0.5, 'llm_probe_inter_chunk_seconds', s, byProbe, RI), probeLegend + ' p50'],
                   [p.quantile(0.99, 'llm_probe_inter_chunk_seconds', s, byProbe, RI), probeLegend + ' p99'],
                 ],
                 's'),
    g.timeseries('Where the time goes (mean per phase)',
                 T.phases + ' With several locations selected, pick one to read a single stack.',
                 [[p.mean('llm_probe_phase_seconds', s, ['phase'] + fleet, RI), '{{phase}}' + fl]],
                 's', w=24, stack=true),

    g.row('Quality and efficiency'),
    g.timeseries('Accuracy by probe', T.accuracy,
                 [[ratio(p.sumBy(byProbe, 'rate', 'llm_probe_checks_total', ms(['outcome="pass"']), RI),
                         p.sumBy(byProbe, 'rate', 'llm_probe_checks_total', s, RI)), probeLegend]],
                 'percentunit', w=8, defaults={ min: 0, max: 1 }),
    g.timeseries('Token efficiency by probe', 'Output tokens ÷ all tokens. ' + T.tokens,
                 [[ratio(p.sumBy(byProbe, 'rate', 'llm_probe_tokens_total', ms(['type="output"']), RI),
                         p.sumBy(byProbe, 'rate', 'llm_probe_tokens_total', s, RI)), probeLegend]],
                 'percentunit', w=8, defaults={ min: 0, max: 1 }),
    g.timeseries('Cost per correct answer by probe', T.cost + ' Spend ÷ passed answer checks.',
                 [[ratio(p.sumBy(byProbe + ['currency'], 'rate', 'llm_probe_cost_total', s, RI),
                         '%s\n%s' % [onProbe, p.sumBy(byProbe, 'rate', 'llm_probe_checks_total', ms(['outcome="pass"']), RI)]),
                   probeLegend + ' {{currency}}']],
                 'short', w=8, defaults={ decimals: 6 }, overrides=g.currencyOverrides(d.currencies, suffix=true)),

    g.table('Served model',
            "What the server says answered each probe's last response: its `model` field (a dated snapshot behind an alias, or what a gateway substituted) and `system_fingerprint` where the API has one. A change opens LLMProbeServedModelChanged.",
            'max by (%s) (llm_probe_served_model_info{%s})' % [p.list(byProbe + ['served_model', 'system_fingerprint']), s],
            w=24, h=5, hide=['Time', 'Value']),

    g.row('Model identity'),
    g.timeseries('Identity: p-value of each test window', T.identity + ' Log scale: each step is a new window.',
                 [['max by (%s) (llm_probe_identity_pvalue{%s})' % [p.list(byProbe), s], probeLegend]],
                 'none', w=8,
                 defaults={ min: 0.0001, max: 1, custom+: { scaleDistribution: { type: 'log', log: 10 } } }),
    g.timeseries('Identity: distance (MMD²)',
                 'The latest test\'s statistic: about 0 for one distribution, larger the more the answers\' words differ position by position from the reference. ' + T.identity,
                 [['max by (%s) (llm_probe_identity_distance{%s})' % [p.list(byProbe), s], probeLegend]],
                 'none', w=8),
    g.table('Identity: windows by verdict',
            'Test windows over the selected range by verdict, and the latest run of different windows (the alert pages at two). ' + T.identity,
            '%s > 0\nor\nmax by (%s) (label_replace(llm_probe_identity_consecutive_different{%s}, "outcome", "in a row now", "", ""))'
            % [p.sumBy(byProbe + ['outcome'], 'increase', 'llm_probe_identity_tests_total', s, R), p.list(byProbe + ['outcome']), s],
            w=4),
    g.table('Identity: answers kept',
            'Answers in the reference sample (baseline; recorded first, or by the probe\'s reference series) and in the window being filled (current).',
            'max by (%s) (llm_probe_identity_samples{%s})' % [p.list(byProbe + ['window']), s], w=4),

    g.row('Failures'),
    g.stateTimeline('Last probe result per probe', 'llm_probe_success per probe: ok when the last probe succeeded.',
                    'llm_probe_success{%s}' % s, probeLegend, h=5),
    g.table('Recent failures by result',
            'Failed probes over the selected range by probe and result. The exporter\'s status page (/) and /api/v1/results show the reason of each recent failure. ' + T.availability,
            '%s > 0' % p.sumBy(byProbe + ['result'], 'increase', 'llm_probe_requests_total', ms(['result!="success"']), R),
            sortBy=[{ desc: true, displayName: 'Value' }]),
    g.timeseries('Failures by result', 'Failed probes per interval by result. ' + T.availability,
                 [[p.sumBy(['result'] + fleet, 'increase', 'llm_probe_requests_total', ms(['result!="success"']), RI),
                   '{{result}}' + fl]],
                 'none', stack=true),
    g.timeseries('Cost per probe run', T.cost + ' Mean cost of one finished probe.',
                 [[ratio(p.sumBy(byProbe + ['currency'], 'rate', 'llm_probe_cost_total', s, RI),
                         '%s\n%s' % [onProbe, p.sumBy(byProbe, 'rate', 'llm_probe_requests_total', s, RI)]),
                   probeLegend + ' {{currency}}']],
                 'short', defaults={ decimals: 6 }, overrides=g.currencyOverrides(d.currencies, suffix=true)),
    g.timeseries('Rate-limit remaining',
                 "Requests and tokens left in the provider's rate-limit window, from its x-ratelimit-remaining-* headers on the last response.",
                 [
                   ['llm_probe_ratelimit_remaining_requests{%s}' % s, probeLegend + ' requests'],
                   ['llm_probe_ratelimit_remaining_tokens{%s}' % s, probeLegend + ' tokens'],
                 ],
                 'short'),
    g.table('Adapted request parameters',
            'Request parameters a server refused and the exporter changed (e.g. max_tokens sent as max_completion_tokens to a reasoning model behind a deployment name); /config says what was changed and why. Values you set are never adapted: those probes fail naming the parameter.',
            'llm_probe_adapted_parameters{%s} == 1' % s),
  ],

  grafanaDashboards+:: {
    'llm-probe-model.json': d.dashboard(
      'llm-probe-model',
      'LLM probe / Target and model',
      "Drill-down for one target and model: probes side by side (text vs image), our TTFT next to the server's own, streaming gaps, phases, quality and cost, recent failures.",
      panels,
      singleSeries=true,
    ),
  },
}
