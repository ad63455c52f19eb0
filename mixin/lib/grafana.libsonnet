// Grafana dashboard building blocks: one helper per panel kind, the layout and the envelope.
// Every panel reads the `datasource` variable, has a description and a unit.
{
  ds:: { type: 'prometheus', uid: '${datasource}' },

  // One Prometheus query of a panel.
  query(expr, legend='', ref='A', instant=false, format=null)::
    {
      datasource: $.ds,
      editorMode: 'code',
      expr: expr,
      legendFormat: if legend == '' then '__auto' else legend,
      range: !instant,
      refId: ref,
    }
    + (if instant then { instant: true } else {})
    + (if format == null then {} else { format: format }),

  // Queries [expr, legend] with refIds A, B, C, ...
  queries(pairs)::
    [$.query(pairs[i][0], pairs[i][1], std.char(65 + i)) for i in std.range(0, std.length(pairs) - 1)],

  thresholds(steps):: {
    mode: 'absolute',
    steps: [{ color: s[1], value: s[0] } for s in steps],
  },

  fieldConfig(unit, defaults={}, overrides=[]):: {
    defaults: { unit: unit } + defaults,
    overrides: overrides,
  },

  // Value mappings of a 1/0 gauge.
  okMappings(ok='ok', bad='failed'):: [{
    type: 'value',
    options: {
      '0': { color: 'red', index: 1, text: bad },
      '1': { color: 'green', index: 0, text: ok },
    },
  }],

  // Units per currency for series named by (or ending with) their currency.
  currencyOverrides(currencies, suffix=false):: [
    {
      matcher: if suffix then { id: 'byRegexp', options: '.* %s$' % c } else { id: 'byName', options: c },
      properties: [{ id: 'unit', value: 'currency' + c }],
    }
    for c in currencies
  ],

  local panel(kind, title, description, targets, fieldConfig, w, h, options) = {
    datasource: $.ds,
    description: description,
    fieldConfig: fieldConfig,
    gridPos: { h: h, w: w },
    options: options,
    targets: targets,
    title: title,
    type: kind,
  },

  row(title):: { collapsed: false, gridPos: { h: 1, w: 24 }, panels: [], title: title, type: 'row' },

  // Starts a new line of panels (not a panel; the layout drops it).
  newline:: { newline: true },

  // A single value over the selected range (instant query).
  stat(title, description, expr, unit, w=4, defaults={}, overrides=[], legend='')::
    panel('stat', title, description, [$.query(expr, legend, instant=true)],
          $.fieldConfig(unit, defaults, overrides), w, 4, {
            reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
            colorMode: 'value',
            graphMode: 'none',
            textMode: 'auto',
          }),

  // A time series graph of [expr, legend] pairs.
  timeseries(title, description, pairs, unit, w=12, h=8, stack=false, defaults={}, overrides=[])::
    local custom = {
      drawStyle: 'line',
      fillOpacity: if stack then 60 else 10,
      lineWidth: 1,
      showPoints: 'never',
      spanNulls: true,
    } + (if stack then { stacking: { group: 'A', mode: 'normal' } } else {});
    panel('timeseries', title, description, $.queries(pairs),
          $.fieldConfig(unit, { custom: custom } + defaults, overrides), w, h, {
            legend: { calcs: ['mean', 'max'], displayMode: 'table', placement: 'bottom', showLegend: true },
            tooltip: { mode: 'multi', sort: 'desc' },
          }),

  // A heatmap of a histogram (pre-bucketed: native buckets, or classic `le` buckets).
  heatmap(title, description, expr, scheme, w=12, h=8)::
    panel('heatmap', title, description, [$.query(expr, '{{le}}', format='heatmap')],
          $.fieldConfig('s'), w, h, {
            calculate: false,
            yAxis: { unit: 's' },
            cellGap: 1,
            color: { mode: 'scheme', scheme: scheme },
            rowsFrame: { layout: 'auto' },
            tooltip: { show: true },
          }),

  // A table of an instant query; `hide` lists columns to leave out.
  table(title, description, expr, unit='none', w=12, h=8, hide=['Time'], sortBy=[])::
    panel('table', title, description, [$.query(expr, instant=true, format='table')],
          $.fieldConfig(unit), w, h, { showHeader: true } + (if sortBy == [] then {} else { sortBy: sortBy }))
    + { transformations: [{ id: 'organize', options: { excludeByName: { [c]: true for c in hide } } }] },

  // The last value of 1/0 series over time (ok / failed).
  stateTimeline(title, description, expr, legend, w=24, h=8, links=[])::
    panel('state-timeline', title, description, [$.query(expr, legend)],
          $.fieldConfig('none', {
            mappings: $.okMappings(),
            thresholds: $.thresholds([[null, 'red'], [1, 'green']]),
            color: { mode: 'thresholds' },
          } + (if links == [] then {} else { links: links })), w, h, {
            showValue: 'never',
            mergeValues: true,
            rowHeight: 0.8,
            legend: { displayMode: 'list', placement: 'bottom', showLegend: false },
          }),

  // Ids and grid positions, left to right, top to bottom on 24 columns; rows take a line.
  layout(panels)::
    local place(state, p) =
      local isRow = std.objectHas(p, 'type') && p.type == 'row';
      local breakLine = std.objectHas(p, 'newline') || isRow
                        || state.x + (if std.objectHas(p, 'gridPos') then p.gridPos.w else 0) > 24;
      local y = if breakLine then state.y + state.rowH else state.y;
      local x = if breakLine then 0 else state.x;
      local rowH = if breakLine then 0 else state.rowH;
      if std.objectHas(p, 'newline') then state { x: 0, y: y, rowH: 0 }
      else
        local placed = p { id: state.id, gridPos+: { x: x, y: y } };
        state {
          id: state.id + 1,
          out: state.out + [placed],
          // A row header takes its own line.
          x: if isRow then 0 else x + p.gridPos.w,
          y: if isRow then y + 1 else y,
          rowH: if isRow then 0 else std.max(rowH, p.gridPos.h),
        };
    std.foldl(place, panels, { id: 1, x: 0, y: 0, rowH: 0, out: [] }).out,

  // Variables.
  datasourceVariable:: {
    hide: 0,
    includeAll: false,
    label: 'Data source',
    multi: false,
    name: 'datasource',
    query: 'prometheus',
    refresh: 1,
    regex: '',
    type: 'datasource',
  },

  // A label_values variable; multi-select with All unless multi=false. allValue '.*' keeps queries
  // short and matches series without the label.
  queryVariable(name, label, query, multi=true, allValue='.*')::
    {
      datasource: $.ds,
      hide: 0,
      includeAll: multi,
      label: label,
      multi: multi,
      name: name,
      query: query,
      refresh: 2,
      regex: '',
      sort: 1,
      type: 'query',
    }
    + (if multi && allValue != null then { allValue: allValue } else {})
    + (if multi then { current: { selected: true, text: ['All'], value: ['$__all'] } } else {}),

  // The dashboard envelope.
  dashboard(uid, title, description, panels, variables, annotations, tags, refresh, from):: {
    annotations: { list: [{
      builtIn: 1,
      datasource: { type: 'grafana', uid: '-- Grafana --' },
      enable: true,
      hide: true,
      iconColor: 'rgba(0, 211, 255, 1)',
      name: 'Annotations & Alerts',
      type: 'dashboard',
    }] + annotations },
    description: description,
    editable: true,
    fiscalYearStartMonth: 0,
    graphTooltip: 1,
    id: null,
    links: [{
      asDropdown: false,
      icon: 'external link',
      includeVars: true,
      keepTime: true,
      tags: [tags[0]],
      targetBlank: false,
      title: 'LLM probe dashboards',
      tooltip: '',
      type: 'dashboards',
    }],
    panels: $.layout(panels),
    refresh: refresh,
    schemaVersion: 39,
    tags: tags,
    templating: { list: variables },
    time: { from: from, to: 'now' },
    timepicker: {},
    timezone: '',
    title: title,
    uid: uid,
    version: 1,
    weekStart: '',
  },

  // A PromQL annotation.
  annotation(name, color, expr, legend):: {
    datasource: $.ds,
    enable: true,
    iconColor: color,
    name: name,
    target: { expr: expr, refId: std.asciiLower(std.strReplace(name, ' ', '_')), legendFormat: legend },
  },
}
