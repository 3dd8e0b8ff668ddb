// Charts drawn as SVG by hand: a sparkline for the overview's rows and a line chart with axes for
// the queue page. No library, nothing but this file.

import {s} from './dom.js';
import {clock, int, rate} from './format.js';

// Points of one series scaled into a w×h box (NaN values end a segment: "M" starts a new one).
function path(values, w, h, max, x0 = 0) {
  const n = values.length;
  if (n === 0) return '';
  const dx = n > 1 ? w / (n - 1) : 0;
  let d = '';
  let pen = false;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (Number.isNaN(v)) {
      pen = false;
      continue;
    }
    const x = (x0 + i * dx).toFixed(1);
    const y = (h - (max > 0 ? (v / max) * h : 0)).toFixed(1);
    d += (pen ? 'L' : 'M') + x + ' ' + y;
    pen = true;
  }
  return d;
}

function maxOf(list) {
  let m = 0;
  for (const values of list) for (const v of values) if (v > m) m = v;
  return m;
}

// A small chart of several series in one svg (reused: its paths are updated in place).
export function sparkline(svg, seriesList, w = 120, h = 24) {
  if (!svg.firstChild) {
    svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
    svg.setAttribute('width', w);
    svg.setAttribute('height', h);
    for (let i = 0; i < seriesList.length; i++) svg.append(s('path', {class: 'ser ser' + i}));
  }
  const max = maxOf(seriesList);
  const paths = svg.children;
  for (let i = 0; i < seriesList.length; i++) {
    const d = path(seriesList[i], w, h - 1, max) || 'M0 0';
    if (paths[i].getAttribute('d') !== d) paths[i].setAttribute('d', d);
  }
}

// A line chart with a y axis (0 .. max) and a time axis; `series`: [{label, values}] over the
// common `times`. Redraws the svg's content.
export function lineChart(svg, {times, series, format = int, title}) {
  const W = 560, H = 180, L = 56, R = 8, T = 18, B = 22;
  const w = W - L - R, h = H - T - B;
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', title);
  while (svg.firstChild) svg.firstChild.remove();
  const max = maxOf(series.map((x) => x.values)) || 1;  // an idle chart still has a scale
  const g = s('g', {transform: `translate(${L},${T})`});
  svg.append(s('text', {x: 4, y: 12, class: 'chart-title', text: title}));
  for (const f of [0, 0.5, 1]) {
    const y = (h - f * h).toFixed(1);
    g.append(s('line', {x1: 0, x2: w, y1: y, y2: y, class: 'grid'}));
    g.append(s('text', {x: -6, y: Number(y) + 4, class: 'axis', 'text-anchor': 'end',
                        text: rate(max * f)}));
  }
  const n = times.length;
  if (n > 1) {
    g.append(s('text', {x: 0, y: h + 16, class: 'axis', text: clock(times[0])}));
    g.append(s('text', {x: w, y: h + 16, class: 'axis', 'text-anchor': 'end',
                        text: clock(times[n - 1])}));
  } else {
    g.append(s('text', {x: w / 2, y: h / 2, class: 'axis', 'text-anchor': 'middle',
                        text: 'collecting: one point a second'}));
  }
  series.forEach((x, i) => g.append(s('path', {class: 'ser ser' + i, d: path(x.values, w, h, max)})));
  svg.append(g);
  const legend = s('g', {transform: `translate(${L + 150},12)`, class: 'legend'});
  let x = 0;
  series.forEach((ser, i) => {
    const last = ser.values.length ? ser.values[ser.values.length - 1] : 0;
    const label = `${ser.label} ${Number.isNaN(last) ? '—' : format(last)}`;
    legend.append(s('rect', {x, y: -8, width: 10, height: 3, class: 'swatch ser' + i}));
    legend.append(s('text', {x: x + 13, y: -3, class: 'axis', text: label}));
    x += 18 + label.length * 6.2;
  });
  svg.append(legend);
}
