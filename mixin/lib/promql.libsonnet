// PromQL building blocks shared by rules, alerts and dashboards. Every histogram query prefers the
// native histogram where Prometheus stores one and falls back to the classic `_bucket`, `_sum` and
// `_count` series, series by series (`or` matches on the remaining labels), so a fleet in the
// middle of a migration shows both.
{
  // 'a, b, c'
  list(labels):: std.join(', ', labels),

  // Matchers joined by commas, empty ones dropped.
  matchers(parts):: std.join(', ', std.filter(function(p) p != '', parts)),

  // String building uses `+`, not `%`: C++ jsonnet formats in jsonnet code, slowly.

  // A number as PromQL reads it (the same text in every jsonnet implementation).
  num(x):: '%g' % x,

  // p95 for 0.95: the name of a quantile in recording rules and legends.
  pname(q):: 'p' + std.strReplace('%g' % (q * 100), '.', '_'),

  // name{matchers}[window] offset o
  range(name, m, w, offset='')::
    name + '{' + m + '}[' + w + ']' + (if offset == '' then '' else ' offset ' + offset),

  // fn(name{matchers}[window]); with `instead`, series by series: name where a series has it,
  // else instead (`unless ignoring (le)`: never the buckets of both for one series).
  apply(fn, name, m, w, offset='', instead=null)::
    local first = fn + '(' + self.range(name, m, w, offset) + ')';
    if instead == null then first
    else '(\n  ' + first + '\n  or\n  (' + fn + '(' + self.range(instead, m, w, offset) + ')'
         + ' unless ignoring (le) ' + first + ')\n)',

  // Families a series may lack, and what stands in for them there: time to first answer is
  // served only for series that reason (global.metrics.time_to_first_answer: auto); for the
  // others it is their TTFT (the first token is the first answer).
  insteadOf:: { llm_probe_time_to_first_answer_seconds: 'llm_probe_ttft_seconds' },
  instead(family):: if std.objectHas(self.insteadOf, family) then self.insteadOf[family] else null,

  // A sample name of a family, or null for none (for `instead`).
  suffixed(family, suffix):: if family == null then null else family + suffix,

  // sum by (labels) (fn(name{matchers}[window]))
  sumBy(by, fn, name, m, w, offset='', instead=null)::
    'sum by (' + self.list(by) + ') (' + self.apply(fn, name, m, w, offset, instead) + ')',

  // A quantile of a histogram family per `by` group (`instead`: see apply).
  quantile(q, family, m, by, w, fn='rate', offset='', instead=self.instead(family))::
    local head = 'histogram_quantile(' + self.num(q) + ', ';
    head + self.sumBy(by, fn, family, m, w, offset, instead) + ')\nor\n'
    + head + self.sumBy(by + ['le'], fn, family + '_bucket', m, w, offset,
                        self.suffixed(instead, '_bucket')) + ')',

  // Observations per second (fn=rate) or per window (fn=increase) of a histogram family.
  count(family, m, by, w, fn='rate')::
    'sum by (' + self.list(by) + ') (histogram_count(' + fn + '(' + self.range(family, m, w) + ')))'
    + '\nor\n' + self.sumBy(by, fn, family + '_count', m, w),

  // The mean observation of a histogram family: sum / count (`instead`: see apply).
  mean(family, m, by, w, instead=self.instead(family))::
    local nat(f) = 'sum by (' + self.list(by) + ') (' + f + '(' + self.apply('rate', family, m, w, '', instead) + '))';
    '(\n  ' + nat('histogram_sum') + '\n  /\n  ' + nat('histogram_count') + '\n)\nor\n(\n  '
    + self.sumBy(by, 'rate', family + '_sum', m, w, '', self.suffixed(instead, '_sum')) + '\n  /\n  '
    + self.sumBy(by, 'rate', family + '_count', m, w, '', self.suffixed(instead, '_count')) + '\n)',

  // Seconds observed per second (fn=rate) by a histogram family: its sum, native or classic.
  histSum(family, m, by, w, fn='rate')::
    '(\n  sum by (' + self.list(by) + ') (histogram_sum(' + fn + '(' + self.range(family, m, w) + ')))'
    + '\n  or\n  ' + self.sumBy(by, fn, family + '_sum', m, w) + '\n)',

  // Indent every line after the first by n spaces (to nest a multi-line expression).
  indent(text, n)::
    std.join('\n' + std.repeat(' ', n), std.split(text, '\n')),

  // Seconds in a duration such as 30m or 3d (to order windows).
  seconds(d)::
    local units = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
    std.parseInt(std.substr(d, 0, std.length(d) - 1)) * units[d[std.length(d) - 1]],

  // Distinct durations, shortest first.
  windows(list)::
    std.sort(std.set(list), function(d) self.seconds(d)),
}
