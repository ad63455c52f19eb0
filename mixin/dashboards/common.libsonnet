// What both dashboards share: selectors, variables, annotations and the definitions that panel
// descriptions quote (the same words as docs/DESIGN.md and docs/metrics.md).
local g = import '../lib/grafana.libsonnet';

{
  local cfg = $._config,
  local job = cfg.jobLabel,

  _dash:: {
    // Matchers of every probe-series query: the job, every fleet label and the series labels.
    sel: std.join(', ', ['%s=~"$%s"' % [l, l] for l in [job] + cfg.fleetLabels + cfg.seriesLabels]),
    // Matchers of the exporter's own series (no probe labels).
    exporterSel: '%s=~"$%s"' % [job, job],
    fleet: cfg.fleetLabels,
    // Appended to legends so regions stay apart: " {{location}} {{cluster}}".
    fleetLegend: std.join('', [' {{%s}}' % l for l in cfg.fleetLabels]),
    currencies: cfg.dashboards.currencies,

    variables(singleSeries=false)::
      local base = 'llm_probe_requests_total';
      local upTo(labels) = std.join(', ', ['%s=~"$%s"' % [l, l] for l in labels]);
      local chain = [job] + cfg.fleetLabels;
      [
        g.datasourceVariable,
        // All jobs that export llm_probe_build_info, never a regex: /probe scrapes (a Probe
        // resource, another job) stay out.
        g.queryVariable(job, 'Job', 'label_values(llm_probe_build_info{%s}, %s)' % [cfg.selector, job],
                        allValue=null),
      ] + [
        g.queryVariable(l, std.asciiUpper(l[0]) + l[1:],
                        'label_values(%s{%s}, %s)' % [base, upTo([job]), l])
        for l in cfg.fleetLabels
      ] + [
        g.queryVariable('target', 'Target', 'label_values(%s{%s}, target)' % [base, upTo(chain)],
                        multi=!singleSeries),
        g.queryVariable('model', 'Model',
                        'label_values(%s{%s}, model)' % [base, upTo(chain + ['target'])],
                        multi=!singleSeries),
        g.queryVariable('probe', 'Probe',
                        'label_values(%s{%s}, probe)' % [base, upTo(chain + ['target', 'model'])]),
      ],

    annotations: [
      g.annotation('Exporter restarts', 'orange',
                   'changes(process_start_time_seconds{%s}[$__rate_interval]) > 0' % self.exporterSel,
                   '{{instance}} restarted'),
      g.annotation('Config reloads', 'blue',
                   'changes(llm_probe_config_last_reload_success_timestamp_seconds{%s}[$__rate_interval]) > 0'
                   % self.exporterSel,
                   '{{instance}} loaded its config'),
    ],

    dashboard(uid, title, description, panels, singleSeries=false)::
      g.dashboard(uid, title, description, panels, self.variables(singleSeries), self.annotations,
                  cfg.dashboards.tags, cfg.dashboards.refresh, cfg.dashboards.from),

    text: {
      ttft: 'TTFT (time to first token) = time from writing the request to the first streamed chunk that carries a generated token, answer or reasoning. Role-only or empty deltas are not tokens.',
      ttfa: 'Time to first answer = time to the first non-reasoning token. It equals TTFT for ordinary models and is later than TTFT for reasoning models that think first.',
      tpot: 'TPOT (time per output token) = (t_last_token − t_first_token) / (N − 1), N = output tokens (server usage, else an offline estimate); only probes with N ≥ 2. Counted by tokens, never as the mean gap between chunks: one chunk may carry many tokens. Decode speed is 1/TPOT.',
      e2e: 'E2E duration = time from writing the request to the end of the stream (TTFT included).',
      tps: 'TPS (output tokens per second as the user experiences it) = N / E2E duration, TTFT included. It is lower than the decode speed 1/TPOT.',
      availability: 'Availability = probes with result=success / all finished probes. Every other result (timeout, connect, tls, auth, not_found, rate_limited, http_4xx, http_5xx, upstream, stream, empty, check_failed, internal) is a failure. Skipped probes (budget, overlap, rate_limited) do not count.',
      quantiles: 'Quantiles come from the native histogram where Prometheus stores one (exponential buckets, a few per cent of error) and from the classic buckets otherwise (an estimate within a bucket); the mean is sum / count.',
      phases: 'Mean seconds per phase of a probe: resolve (DNS), connect (TCP), tls (handshake), wait (request written → response headers), first_token (headers → first token), generate (first → last token). Stacked, the phases add up to about the mean E2E duration.',
      cost: 'Cost = input × price.input + cached_input × price.cached_input + (output + reasoning) × price.output, prices per 1M tokens from the exporter config, per currency. Only series with configured prices have a cost.',
      tokens: 'Tokens are disjoint: input (prompt not served from a cache), cached_input, output (answer and tool calls) and reasoning; their sum is the billed total.',
      objectives: "Each series' objectives come from the exporter's slo: config (llm_probe_objective_seconds, llm_probe_objective_ratio): a reasoning model and a chat model can have different ones. A series without an objective shows nothing here and raises no SLO alert.",
      accuracy: 'Accuracy = passed answer checks / all answer checks (llm_probe_checks_total, series whose probe has expect: or a golden set).',
      judged: 'Judged probes (cases with a reference) are graded by a judge, another configured target and model: pass, fail, or error when the judge failed (not counted here). LLMProbeQualityDrop pages when the pass rate falls below the objective.',
      identity: 'Identity probes (kind: identity) sample short answers to fixed prompts and test each window of them against a reference sample (MMD² over words, permutation p-value): a small p-value means the answers no longer look like the reference distribution. By chance a window is found different at the probe\'s alpha; LLMProbeIdentityChanged waits for two in a row. It says that the distribution changed, not why.',
      server: "The server's own timings where it reports them: llm_probe_server_duration_seconds (Ollama, llama.cpp: prefill; Bedrock latencyMs: total), vLLM's vllm:time_to_first_token_seconds and LiteLLM's litellm_llm_api_time_to_first_token_metric when the same Prometheus scrapes them (matched by model name). Ours − theirs = queueing + network. A server that reports nothing shows no data.",
    },
  },
}
