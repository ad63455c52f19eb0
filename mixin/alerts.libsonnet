// Alerts. Every SLO alert joins each series against its own objective (exported by the exporter),
// so one file serves a fleet of models with different objectives, and a series without an
// objective raises no SLO alert. severity: critical pages, warning opens a ticket.
local p = import 'lib/promql.libsonnet';

{
  local cfg = $._config,
  local key = cfg.seriesLabels + cfg.workloadLabels + cfg.fleetLabels,
  local on = 'on (%s)' % p.list(key),
  local m(extra=[]) = p.matchers([cfg.selector] + extra),
  // "target/model/probe" in annotations.
  local series = std.join('/', ['{{ $labels.%s }}' % l for l in cfg.seriesLabels]),
  local instance = '{{ $labels.instance }}',

  local alert(name, expr, forDuration, severity, summary, description, labels={}, keepFiringFor=null) = {
    alert: name,
    expr: expr,
    'for': forDuration,
    [if keepFiringFor != null then 'keep_firing_for']: keepFiringFor,
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
            'Prometheus has failed to scrape %s (%s {{ $labels.%s }}) for at least %s: none of the probe series it owns reaches Prometheus.'
            % [instance, cfg.jobLabel, cfg.jobLabel, cfg.exporterDown['for']]),
      // `up == 0` needs a target: a scrape config or ServiceMonitor that matches nothing only
      // shows as the absence of `up`.
      alert('LLMProbeExporterAbsent', 'absent(%s)' % up, cfg.exporterAbsentFor, 'critical',
            'Prometheus scrapes no llm-probe-exporter: no LLM endpoint is being measured.',
            'No scrape target matches %s for at least %s: Prometheus collects no probe series at all.'
            % [cfg.selector, cfg.exporterAbsentFor]),
      alert('LLMProbeSeriesStale',
            |||
              # Seconds since the last finished probe, counted from the last config load when the series has
              # not run since then (a fresh start or reload is not stale), against %(n)s intervals. A
              # cache pair's warm half runs only after its cold half worked: the cold one speaks for both.
              (
                time()
                - (
                    (
                      llm_probe_last_run_timestamp_seconds{%(w)s}
                      >= on (%(ji)s) group_left ()
                      llm_probe_config_last_reload_success_timestamp_seconds{%(m)s}
                    ) + 0
                    or
                    0 * llm_probe_last_run_timestamp_seconds{%(w)s}
                    + on (%(ji)s) group_left ()
                    llm_probe_config_last_reload_success_timestamp_seconds{%(m)s}
                  )
              )
              > %(n)s * llm_probe_interval_seconds{%(m)s}
            ||| % { m: m(), w: m(['cache!="warm"']), ji: exporterKey, n: p.num(cfg.seriesStale.intervals) },
            cfg.seriesStale['for'], 'warning',
            'Probe series %s has not finished a probe for %s intervals.' % [series, p.num(cfg.seriesStale.intervals)],
            'No probe of %s finished on %s for {{ $value | humanizeDuration }} (counted from the last config load), more than %s times its interval.'
            % [series, instance, p.num(cfg.seriesStale.intervals)]),
      alert('LLMProbeConfigReloadFailed', 'llm_probe_config_last_reload_successful{%s} == 0' % m(),
            cfg.configReloadFailed['for'], 'warning',
            'llm-probe-exporter %s could not reload its config.' % instance,
            'The last config reload of %s failed (llm_probe_config_last_reload_successful is 0 for at least %s): it runs the config it loaded before.'
            % [instance, cfg.configReloadFailed['for']]),
      local sl = cfg.schedulerLag;
      local lag(w) = 'instance:llm_probe_scheduler_lag_seconds:p99_rate%s > %s' % [w, p.num(sl.p99Seconds)];
      // Over the long window and still over the short one: lag that ended opens no ticket later.
      alert('LLMProbeSchedulerLag',
            '%s\nand on (%s)\n%s\n' % [lag(sl.window), exporterKey, lag(sl.short)],
            sl['for'], 'warning',
            'llm-probe-exporter %s starts probes late.' % instance,
            'p99 of how late %s started probes over the last %s is {{ $value | humanizeDuration }} (and above %ss over the last %s too).'
            % [instance, sl.window, p.num(sl.p99Seconds), sl.short]),
      // An unusable spend record skips probes with reason="budget" too: that has its own page.
      alert('LLMProbeBudgetExhausted',
            'sum by (%s) (increase(llm_probe_skipped_total{%s}[%s])) > 0\nunless on (%s)\nllm_probe_budget_record_ok{%s} == 0\n'
            % [p.list([cfg.jobLabel, 'instance'] + cfg.fleetLabels), m(['reason="budget"']),
               cfg.budgetExhausted.window, exporterKey, m()],
            '0m', 'warning',
            'llm-probe-exporter %s skips probes: its daily budget is spent.' % instance,
            '%s skipped about {{ $value | printf "%%.0f" }} probes over the last %s because global.budget.max_cost_per_day is spent for the current UTC day.'
            % [instance, cfg.budgetExhausted.window]),
      alert('LLMProbeBudgetRecordUnusable', 'llm_probe_budget_record_ok{%s} == 0' % m(),
            cfg.budgetRecordUnusable['for'], 'critical',
            'llm-probe-exporter %s stopped probing: it cannot use its spend record.' % instance,
            "%s has skipped every probe for at least %s: the spend record of global.budget cannot be read, or its path holds a file that is not the exporter's (llm_probe_budget_record_ok is 0). No series of this instance is measured until the record is fixed or removed and the config reloaded."
            % [instance, cfg.budgetRecordUnusable['for']]),
    ],
  },

  // {{ $sel := printf "{target=%q, ...}" $labels.target ... }}: a selector of the alert's own
  // series (and `extra` labels), for the queries its annotations run. A label the series lacks
  // gives l="", which matches its absence.
  local selectorOf(labels, extra=[]) =
    '{{ $sel := printf `{' + std.join(', ', [l + '=%q' for l in labels] + extra) + '}` '
    + std.join(' ', ['$labels.' + l for l in labels]) + ' }}',
  // The first sample of a query (with `$sel` for %s), piped through `format`, or nothing.
  local queried(expr, format) =
    '{{ with printf `' + expr + '` $sel | query }}{{ . | first | value | ' + format + ' }}{{ end }}',
  local period = cfg.sloPeriod,
  local periodName = if std.endsWith(period, 'd') then std.substr(period, 0, std.length(period) - 1) + '-day' else period,
  local x = '{{ $value | humanize }}x',
  // What the burn rate in $value costs: the share of the budget it spends per hour, and how long
  // a whole budget lasts at that rate (arithmetic runs as a query: templates have none).
  local cost =
    'at this rate it spends {{ printf "%f / ' + p.num(p.seconds(period) / 3600) + '" $value | query | first | value | humanizePercentage }}'
    + ' of its ' + periodName + ' error budget per hour, all of it in {{ printf "' + std.toString(p.seconds(period))
    + ' / %f" $value | query | first | value | humanizeDuration }}',
  local severities = std.foldl(function(acc, b) if std.member(acc, b.severity) then acc else acc + [b.severity],
                               cfg.burnRates, []),
  local pairsOf(severity) = [b for b in cfg.burnRates if b.severity == severity],
  // One alert per severity: the pairs of that severity joined with `or`. Its value is the burn
  // rate over the short window of the first pair that holds (how fast the budget burns now); the
  // description names that window and the burn over its long window.
  local burnExpr(metric, sel, pairs) =
    std.join('\nor\n', [
      '(\n  %s%s > %s\n  and\n  %s%s > %s\n)' % [metric(b.short), sel, p.num(b.factor), metric(b.long), sel, p.num(b.factor)]
      for b in pairs
    ]) + '\n',
  local burnWindows(metric, pairs) =
    local one(i) =
      local b = pairs[i];
      local said = b.short + ' (' + queried(metric(b.long) + '%s', 'humanize') + 'x over the last ' + b.long + ')';
      if i == std.length(pairs) - 1 then said
      else
        '{{ if printf `' + metric(b.long) + '%s > ' + p.num(b.factor) + ' and ' + metric(b.short) + '%s > '
        + p.num(b.factor) + '` $sel $sel | query }}' + said + '{{ else }}' + one(i + 1) + '{{ end }}';
    one(0),

  local availabilityBurn(severity) =
    local pairs = pairsOf(severity);
    local metric(w) = $.availabilityBurn(w);
    alert('LLMProbeAvailabilityBudgetBurn', burnExpr(metric, '', pairs), '0m', severity,
          '%s fails too often: its availability error budget burns {{ $value | humanize }}x too fast.' % series,
          selectorOf(key)
          + '%s burns its availability error budget %s as fast as its objective allows over the last ' % [series, x]
          + burnWindows(metric, pairs) + ': ' + cost + '.',
          keepFiringFor=cfg.burnKeepFiringFor),

  local latencyBurn(objective, severity) =
    local pairs = pairsOf(severity);
    local metric(w) = $.latencyBurn(w);
    local sel = '{objective="%s"}' % objective;
    local allowed = p.num(100 * (1 - cfg.latencyTargets[objective])) + '%';
    alert('LLMProbeLatencyBudgetBurn', burnExpr(metric, sel, pairs), '0m', severity,
          '%s is slow: its %s error budget burns {{ $value | humanize }}x too fast.' % [series, objective],
          selectorOf(key, ['objective="%s"' % objective])
          + '%s burns its %s latency error budget %s as fast as its objective allows over the last ' % [series, objective, x]
          + burnWindows(metric, pairs)
          + ', where at most %s of its successful probes may be slower than the objective: ' % allowed + cost + '.',
          { objective: objective }, cfg.burnKeepFiringFor),

  local latencyHigh(objective) =
    local q = cfg.latencyTargets[objective];
    local lh = cfg.latencyHigh;
    local quantile(w) = 'target_model_probe:%s:%s_rate%s' % [$.latencyObjectives[objective], p.pname(q), w];
    local objectiveOf = 'target_model_probe_objective:llm_probe_objective_seconds:max{objective="%s"}' % objective;
    // Over the long window, and still over the short one: slowness that ended opens no ticket
    // later than `short` after it (the `for` alone could open one `window` after).
    alert('LLMProbeLatencyHigh',
          |||
            %(long)s
              > %(on)s
            %(obj)s
            and %(on)s
            %(short)s
              > %(on)s
            %(obj)s
          ||| % { long: quantile(lh.window), short: quantile(lh.short), on: on, obj: objectiveOf },
          lh['for'], 'warning',
          '%s: %s %s is above its objective.' % [series, p.pname(q), objective],
          selectorOf(key, ['objective="%s"' % objective])
          + '%s %s of %s over the last %s is {{ $value | humanizeDuration }} (and above the objective over the last %s too), where the series\' objective is ' % [p.pname(q), objective, series, lh.window, lh.short]
          + queried('target_model_probe_objective:llm_probe_objective_seconds:max%s', 'humanizeDuration')
          + ' (llm_probe_objective_seconds{objective="%s"}).' % objective,
          { objective: objective }),

  local slo = {
    name: 'llm-probe-slo-alerts',
    rules: [availabilityBurn(s) for s in severities]
           + [latencyBurn(o, s) for o in $.latencyObjectiveNames for s in severities]
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
  local stalledGaps(w) =
    local nat = 'sum by (%s) (rate(%s))' % [p.list(key), p.range('llm_probe_inter_chunk_seconds', m(), w)];
    '(\n  histogram_count(%s)\n  * histogram_fraction(%s, +Inf, %s)\n)\nor\n(\n  %s\n  -\n  %s\n)' % [
      nat, p.num(sf.gapSeconds), nat,
      p.sumBy(key, 'rate', 'llm_probe_inter_chunk_seconds_count', m(), w),
      p.sumBy(key, 'rate', 'llm_probe_inter_chunk_seconds_bucket', m(['le="%s"' % le(sf.gapSeconds)]), w),
    ],

  local lf = cfg.locationFailure,
  local region = cfg.regionLabel,
  // The same target and model in the same fleet, across locations.
  local byModel = p.list(['target', 'model'] + std.filter(function(l) l != region, cfg.fleetLabels)),
  local locationRatio = 'target_model_%s:llm_probe_requests_failed:ratio_rate%s' % [region, lf.window],
  // The failed share of the probes the window holds at their interval: a location probing for
  // less time than the window counts the probes it has not run yet as good, so two failures of
  // a new model are not "every probe failed" (a window longer than the history cannot page).
  local locationFailed = '(\n  %s\n  * on (%s)\n  target_model_%s:llm_probe_window_coverage:ratio%s\n)' % [
    locationRatio, p.list(['target', 'model'] + cfg.fleetLabels), region, lf.window,
  ],

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
      // The change counter, not the info series: a server that names another model or
      // fingerprint on every probe is one alert for the whole episode, whose labels never carry
      // a served model (each value would be an alert and a notification of its own).
      local sm = cfg.servedModelChanged;
      local changes = '{{ if eq ($value | printf "%.0f") "1" }}once{{ else }}{{ $value | printf "%.0f" }} times{{ end }}';
      local info = 'llm_probe_served_model_info{' + std.strReplace(m(), '%', '%%') + ', %s}';
      alert('LLMProbeServedModelChanged',
            '%s > 0\n' % p.sumBy(key, 'increase', 'llm_probe_served_model_changes_total', m(), sm.window),
            sm['for'], 'warning',
            'The model answering %s changed.' % series,
            '{{ $sel := printf `' + std.join(', ', [l + '=%q' for l in key]) + '` '
            + std.join(' ', ['$labels.' + l for l in key]) + ' }}'
            + 'The model the server reports for %s changed %s within the last %s' % [series, changes, sm.window]
            + '{{ with printf `' + info + '` $sel | query }}{{ with first . }}; its last answer came from {{ .Labels.served_model }} (system_fingerprint "{{ .Labels.system_fingerprint }}"){{ end }}{{ end }}.'),
      // The exporter counts the run of different test windows itself: a window takes a
      // series' `samples` × its interval (hours, differing per series), so no range could.
      local ic = cfg.identityChanged;
      local pvalue = 'llm_probe_identity_pvalue{' + std.strReplace(m(), '%', '%%') + ', %s}';
      alert('LLMProbeIdentityChanged',
            'max by (%s) (llm_probe_identity_consecutive_different{%s}) >= %s'
            % [p.list(key), m(), p.num(ic.windows)],
            ic['for'], ic.severity,
            'The answers of %s no longer match its reference sample.' % series,
            '{{ $sel := printf `' + std.join(', ', [l + '=%q' for l in key]) + '` '
            + std.join(' ', ['$labels.' + l for l in key]) + ' }}'
            + 'The last {{ $value }} test windows of %s in a row found its sampled answers different from its reference sample' % series
            + '{{ with printf `' + pvalue + '` $sel | query }}{{ with first . }} (latest p-value {{ .Value | printf "%.4f" }}){{ end }}{{ end }}'
            + ': the distribution of its answers changed since the reference was recorded. This does not say why (another or quantised model, a changed prompt template or sampler, a fallback).'),
      local stalls(w) = '(\n  %s\n)\n/\n(\n  %s\n)\n> %s' % [
        p.indent(stalledGaps(w), 2), p.indent(p.count('llm_probe_ttft_seconds', m(), key, w), 2), p.num(sf.ratio),
      ];
      // Over the long window and still over the short one: stalls that ended open no ticket later.
      alert('LLMProbeStreamStalls',
            '(\n  %s\n)\nand on (%s)\n(\n  %s\n)\n' % [p.indent(stalls(sf.window), 2), p.list(key), p.indent(stalls(sf.short), 2)],
            sf['for'], 'warning',
            'Streams of %s stall after their first token.' % series,
            'Over the last %s, the streams of %s paused for longer than %ss between two token-bearing chunks {{ $value | printf "%%.2f" }} times per successful probe (and more than %s times over the last %s).'
            % [sf.window, series, p.num(sf.gapSeconds), p.num(sf.ratio), sf.short]),
      alert('LLMProbeLocationFailing',
            |||
              %(f)s > %(t)s
              and on (%(k)s)
              (count by (%(k)s) (%(r)s) >= %(n)s)
              and on (%(k)s)
              (min by (%(k)s) (%(r)s) <= %(t)s)
            ||| % { f: locationFailed, r: locationRatio, t: p.num(lf.ratio), k: byModel, n: p.num(lf.minLocations) },
            lf['for'], 'warning',
            '{{ $labels.target }}/{{ $labels.model }} fails from %s {{ $labels.%s }} while another %s is fine.' % [region, region, region],
            '{{ $value | humanizePercentage }} of the probes the last %s holds for {{ $labels.target }}/{{ $labels.model }} from %s {{ $labels.%s }} failed, while at least one other %s failed at most %s of its probes.'
            % [lf.window, region, region, region, p.num(100 * lf.ratio) + '%'], keepFiringFor=lf.keepFiringFor),
      alert('LLMProbeGlobalFailure',
            |||
              min by (%(k)s) %(f)s > %(t)s
              and on (%(k)s)
              count by (%(k)s) (%(r)s) >= %(n)s
            ||| % { f: locationFailed, r: locationRatio, t: p.num(lf.ratio), k: byModel, n: p.num(lf.minLocations) },
            lf['for'], 'critical',
            '{{ $labels.target }}/{{ $labels.model }} fails in every %s.' % region,
            'In every %s that probes {{ $labels.target }}/{{ $labels.model }} (%s or more), at least {{ $value | humanizePercentage }} of the probes the last %s holds failed.'
            % [region, p.num(lf.minLocations), lf.window], keepFiringFor=lf.keepFiringFor),
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
    ] + [
      alert('LLMProbeBilledAbovePrice',
            '%s > %s' % [$.billedRatioName, p.num(cfg.billedAbovePrice.ratio)],
            cfg.billedAbovePrice['for'], 'warning',
            'The gateway bills more for %s than the price table says.' % series,
            'Over the last %s the gateway {{ $labels.target }} billed {{ if gt $value 1e300 }}the probes of %s, which the price table says are free{{ else }}{{ $value | printf "%%.2f" }} times what the price table says the probes of %s cost{{ end }} (usage.cost against llm_probe_cost_total, USD): the prices the exporter uses are stale or the gateway adds a margin, so the cost figures and the daily budget count too little.'
            % [cfg.billedAbovePrice.window, series, series]),
    ],
  },

  local qa = cfg.quality,
  local judged(w, verdicts, offset='') =
    p.sumBy(key, 'increase', 'llm_probe_judgements_total', m(['verdict=~"%s"' % verdicts]), w, offset),
  local passRate(w, offset='') =
    '(\n  %s\n  /\n  %s\n)' % [p.indent(judged(w, 'pass', offset), 2), p.indent(judged(w, 'pass|fail', offset), 2)],
  local quality = 'max by (%s) (llm_probe_objective_ratio{%s})' % [p.list(key), m(['objective="quality"'])],
  local ju = cfg.judgeUnreliable,
  local calibrations(outcomes) =
    'sum by (%s) (increase(llm_probe_judge_calibration_total{%s}[%s]))'
    % [p.list(['target', 'model'] + cfg.fleetLabels), m(['outcome=~"%s"' % outcomes]), ju.window],
  local qualityAlerts = {
    name: 'llm-probe-quality-alerts',
    rules: [
      // Below the series' own objective over the window and still over the short one, on enough
      // verdicts: a bad hour that ended does not page later, a handful of verdicts never pages.
      alert('LLMProbeQualityDrop',
            '%s\n< %s group_left ()\n%s\nand %s\n%s\n< %s group_left ()\n%s\nand %s\n(%s) >= %s\n' % [
              passRate(qa.window), on, quality, on, passRate(qa.short), on, quality, on,
              judged(qa.window, 'pass|fail'), p.num(qa.minJudged),
            ],
            // No `for`: the short window is the filter (a wait would start the page after the
            // drop it is about), as for the burn-rate pages.
            '0m', 'critical',
            'Judged answers of %s pass less often than its quality objective.' % series,
            'Over the last %s, the judge passed {{ $value | humanizePercentage }} of the answers of %s (at least %s verdicts, and below the objective over the last %s too): below its quality objective (llm_probe_objective_ratio{objective="quality"}). The model stays available; what it says got worse.'
            % [qa.window, series, p.num(qa.minJudged), qa.short],
            { against: 'objective' }),
      // Well below its own pass rate a week ago: for series without an objective too. Both sides
      // need `minJudged` verdicts, so a series younger than the offset cannot page.
      alert('LLMProbeQualityDrop',
            '%s\n< %s\n(%s - %s)\nand %s\n(%s) >= %s\nand %s\n(%s) >= %s\n' % [
              passRate(qa.weekWindow), on, passRate(qa.weekWindow, qa.offset), p.num(qa.weekDrop),
              on, judged(qa.weekWindow, 'pass|fail'), p.num(qa.minJudged),
              on, judged(qa.weekWindow, 'pass|fail', qa.offset), p.num(qa.minJudged),
            ],
            qa['for'], 'warning',
            'Judged answers of %s pass less often than %s ago.' % [series, qa.offset],
            'Over the last %s, the judge passed {{ $value | humanizePercentage }} of the answers of %s: more than %s points below the same window %s ago.'
            % [qa.weekWindow, series, p.num(100 * qa.weekDrop), qa.offset],
            { against: 'last_week' }),
      alert('LLMProbeJudgeUnreliable',
            '(\n  %s\n  /\n  %s\n)\n< %s\nand\n%s >= %s\n' % [
              p.indent(calibrations('agree'), 2), p.indent(calibrations('agree|disagree'), 2),
              p.num(ju.agreement), calibrations('agree|disagree'), p.num(ju.minCalibrations),
            ],
            ju['for'], 'warning',
            'The judge {{ $labels.target }}/{{ $labels.model }} disagrees with known verdicts.',
            'Over the last %s, the judge {{ $labels.target }}/{{ $labels.model }} agreed with {{ $value | humanizePercentage }} of the canned answers of known verdict it graded (at least %s): its verdicts on real answers are not to be trusted, and the quality alerts of its location are held.'
            % [ju.window, p.num(ju.minCalibrations)]),
    ],
  },
  local pc = cfg.promptCacheCold,
  local mr = cfg.modelRetiring,
  local an = cfg.ttftAnomaly,
  local shareOf(w) = 'target_model_probe:llm_probe_cached_input:ratio_rate%s{cache="warm"}' % w,
  local p95Now = $.ttftAnomalyName,
  local median = $.sameTime($.ttftAnomalyName, 'median', an),
  local days = $.sameTime($.ttftAnomalyName, 'days', an),
  local er = cfg.errorRateAnomaly,
  local errorMedian = $.sameTime($.errorAnomalyName, 'median', er),
  local errorDays = $.sameTime($.errorAnomalyName, 'days', er),
  // What the failed share must exceed: `factor` times its median, and the median plus
  // `minIncrease`, whichever is higher.
  local errorLimit = '(\n  %(f)s * %(med)s > %(on)s %(med)s + %(d)s\n  or\n  %(med)s + %(d)s\n)' % {
    f: p.num(er.factor), med: errorMedian, on: on, d: p.num(er.minIncrease) },
  local workloadAlerts = {
    name: 'llm-probe-workload-alerts',
    rules: [
      // It hit before (within `history`), it does not now: a provider that never caches is
      // not paged about every hour.
      alert('LLMProbePromptCacheCold',
            |||
              %(now)s < %(min)s
              and on (%(k)s)
              %(short)s < %(min)s
              and on (%(k)s)
              max_over_time(%(now)s[%(h)s]) >= %(min)s
            ||| % { now: shareOf(pc.window), short: shareOf(pc.short), min: p.num(pc.minShare),
                    k: p.list(key), h: pc.history },
            pc['for'], 'warning',
            'The prompt cache of %s stopped hitting.' % series,
            'Over the last %s only {{ $value | humanizePercentage }} of the input tokens of the warm probes of %s were read from the prompt cache (at least %s within the last %s): every cached prefix is now billed, and read, at the uncached price.'
            % [pc.window, series, p.num(100 * pc.minShare) + '%', pc.history]),
      alert('LLMProbeModelRetiring',
            '(
  llm_probe_model_deprecation_timestamp_seconds{%s} - time()
) < %d
'
            % [m(), mr.days * 86400],
            mr['for'], 'warning',
            '{{ $labels.target }}/{{ $labels.model }} retires within %d days.' % mr.days,
            'The gateway {{ $labels.target }} says {{ $labels.model }} retires {{ if gt $value 0.0 }}in {{ $value | humanizeDuration }}{{ else }}already ({{ $value | humanizeDuration }} ago, negative){{ end }} (llm_probe_model_deprecation_timestamp_seconds): its probes, and the traffic they stand for, will fail from then on unless moved to a successor.'),
      alert('LLMProbeTTFTAnomaly',
            |||
              %(now)s
              > %(on)s
              (%(f)s * %(med)s)
              and %(on)s
              %(days)s >= %(n)s
              and %(on)s
              (
                %(short)s
              )
              > %(on)s
              (%(f)s * %(med)s)
            ||| % { now: p95Now, med: median, days: days, on: on, f: p.num(an.factor), n: p.num(an.minDays),
                    short: p.indent(p.quantile(0.95, 'llm_probe_ttft_seconds', m(), key, an.short), 4) },
            an['for'], 'warning',
            '%s is unusually slow for this time of day.' % series,
            selectorOf(key)
            + 'p95 TTFT of %s over the last %s is {{ $value | humanizeDuration }}, more than %sx its median at the same time on the past %d days (%s apart: ' % [series, an.window, p.num(an.factor), an.days, an.step]
            + queried(median + '%s', 'humanizeDuration')
            + ') and still as high over the last %s: slower than its own daily pattern explains.' % an.short),
      alert('LLMProbeErrorRateAnomaly',
            |||
              %(now)s
              > %(on)s
              %(limit)s
              and %(on)s
              %(short)s
              > %(on)s
              %(limit)s
              and %(on)s
              %(days)s >= %(n)s
              and %(on)s
              %(probes)s >= %(minProbes)s
            ||| % { now: $.failedShare(er.window), short: $.failedShare(er.short),
                    limit: errorLimit, days: errorDays, on: on, n: p.num(er.minDays),
                    probes: p.sumBy(key, 'increase', 'llm_probe_requests_total', m(), er.window),
                    minProbes: p.num(er.minProbes) },
            er['for'], 'warning',
            '%s fails unusually often for this time of day.' % series,
            selectorOf(key)
            + '{{ $value | humanizePercentage }} of the probes of %s failed over the last %s, more than %sx their median share at the same time on the past %d days (%s apart: ' % [series, er.window, p.num(er.factor), er.days, er.step]
            + queried(errorMedian + '%s', 'humanizePercentage')
            + ') and at least %s percentage points above it, and as many over the last %s: more failures than its own daily pattern explains.'
            % [p.num(er.minIncrease * 100), er.short]),
    ],
  },

  prometheusAlerts+:: {
    groups+: [exporter, slo, probes, driftAlerts, qualityAlerts, workloadAlerts],
  },
}
