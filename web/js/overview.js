// The overview (#/): every queue with its type, paused flags, per-state counts, blocked count,
// oldest pending age, rates and a sparkline of the last minute; sorting by any column and a name
// filter. Built for 1,000 queues and more: the table is virtual — only the rows on screen (and
// a margin) exist, recycled as the page scrolls, between two spacer rows that keep the
// scrollbar true — so a tick costs a sort and a few dozen rows, whatever the number of queues.

import {sparkline} from './charts.js';
import {h, s, setText} from './dom.js';
import {duration, int, rate} from './format.js';

const COLUMNS = [
  {key: 'name', label: 'Queue', text: true},
  {key: 'type', label: 'Type', text: true},
  {key: 'status', label: 'Status', text: true},
  {key: 'waiting', label: 'Waiting'},
  {key: 'invisible', label: 'Invisible'},
  {key: 'pending', label: 'Pending'},
  {key: 'running', label: 'Running'},
  {key: 'completed', label: 'Completed'},
  {key: 'canceled', label: 'Canceled'},
  {key: 'errored', label: 'Errored'},
  {key: 'blocked', label: 'Blocked'},
  {key: 'oldest', label: 'Oldest pending', fmt: (v) => (v ? duration(v) : '—')},
  {key: 'enqueued', label: 'Enq/s', fmt: rate},
  {key: 'dequeued', label: 'Deq/s', fmt: rate},
  {key: 'completed_rate', label: 'Done/s', fmt: rate},
];

function cellValue(q, key) {
  switch (key) {
    case 'name': return q.name;
    case 'type':
      return q.settings.type === 'exclusive' ? `exclusive (${q.settings.exclusivity_key})` : 'simple';
    case 'status': {
      const flags = [];
      if (q.settings.enqueue_paused) flags.push('enqueue paused');
      if (q.settings.dequeue_paused) flags.push('dequeue paused');
      return flags.join(', ') || 'active';
    }
    case 'oldest': return q.oldest;
    case 'enqueued': return q.shown.enqueued;
    case 'dequeued': return q.shown.dequeued;
    case 'completed_rate': return q.shown.completed;
    default: return q.counts[key];
  }
}

const ROW_HEIGHT = 34;  // px: tr.qrow's height in app.css
const MARGIN = 10;      // rows rendered above and below the screen

export class OverviewView {
  constructor(app) {
    this.app = app;
    this.sortKey = 'name';
    this.sortDir = 1;
    this.filter = '';
    this.list = [];   // the sorted, filtered queues
    this.pool = [];   // row elements in use, top to bottom
    this.first = 0;   // index in `list` of pool[0]
    this.scheduled = false;
    this.onScroll = () => this.schedule();
    this.build();
  }

  build() {
    this.filterInput = h('input', {type: 'search', id: 'queue-filter', placeholder: 'Filter by name',
                                   'aria-label': 'Filter queues by name', autocomplete: 'off'});
    this.filterInput.addEventListener('input', () => {
      this.filter = this.filterInput.value.trim().toLowerCase();
      this.update();
    });
    this.summary = h('span', {id: 'overview-summary', class: 'muted'});
    const headRow = h('tr');
    this.headCells = new Map();
    for (const c of COLUMNS) {
      const th = h('th', {class: c.text ? 'text' : 'num', scope: 'col', dataset: {key: c.key}},
                   h('button', {type: 'button', class: 'sort', text: c.label,
                                onclick: () => this.sortBy(c.key)}));
      this.headCells.set(c.key, th);
      headRow.append(th);
    }
    headRow.append(h('th', {class: 'text', text: 'Last minute'}));
    const spacer = () => {
      const td = h('td', {colspan: COLUMNS.length + 1});
      return {tr: h('tr', {class: 'spacer', 'aria-hidden': 'true'}, td), td};
    };
    this.topSpacer = spacer();
    this.bottomSpacer = spacer();
    this.tbody = h('tbody', {id: 'queue-rows'}, this.topSpacer.tr, this.bottomSpacer.tr);
    this.empty = h('p', {class: 'empty', id: 'no-queues', hidden: true,
                         text: 'No queues yet. The first enqueue creates one.'});
    this.el = h('section', {id: 'overview'},
                h('div', {class: 'toolbar'}, h('h1', {text: 'Queues'}), this.filterInput,
                  this.summary),
                h('div', {class: 'table-wrap'},
                  h('table', {class: 'queues', id: 'queues'}, h('thead', null, headRow),
                    this.tbody)),
                this.empty);
    this.markSort();
  }

  sortBy(key) {
    if (this.sortKey === key) this.sortDir = -this.sortDir;
    else {
      this.sortKey = key;
      this.sortDir = COLUMNS.find((c) => c.key === key).text ? 1 : -1;
    }
    this.markSort();
    this.update();
  }

  markSort() {
    for (const [key, th] of this.headCells) {
      if (key === this.sortKey) th.setAttribute('aria-sort', this.sortDir > 0 ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    }
  }

  mount(container) {
    container.append(this.el);
    window.addEventListener('scroll', this.onScroll, {passive: true});
    window.addEventListener('resize', this.onScroll, {passive: true});
    this.update();
  }

  unmount() {
    window.removeEventListener('scroll', this.onScroll);
    window.removeEventListener('resize', this.onScroll);
    this.el.remove();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.renderWindow();
    });
  }

  newRow() {
    const cells = COLUMNS.map((c) => h('td', {class: c.text ? 'text' : 'num', dataset: {key: c.key}}));
    const link = h('a');
    cells[0].append(link);
    const spark = s('svg', {class: 'spark', 'aria-hidden': 'true'});
    const tr = h('tr', {class: 'qrow'}, cells, h('td', {class: 'text'}, spark));
    return {tr, cells, link, spark, name: null};
  }

  fill(row, q) {
    if (row.name !== q.name) {
      row.name = q.name;
      row.tr.dataset.queue = q.name;
      row.link.href = '#/q/' + encodeURIComponent(q.name);
      row.link.textContent = q.name;
    }
    COLUMNS.forEach((c, i) => {
      if (i === 0) return;
      const v = cellValue(q, c.key);
      setText(row.cells[i], c.text ? v : (c.fmt || int)(v));
    });
    row.tr.classList.toggle('paused', q.settings.enqueue_paused || q.settings.dequeue_paused);
    row.tr.classList.toggle('has-errors', q.counts.errored > 0);
    const st = this.app.store;
    sparkline(row.spark, ['enqueued', 'dequeued', 'completed'].map((k) => st.series(q, k, 60).values));
  }

  // The rows between the top of the screen and its bottom, with a margin each side.
  renderWindow() {
    const n = this.list.length;
    const top = this.tbody.getBoundingClientRect().top;  // the top spacer's top
    const above = Math.max(0, -top);
    let first = Math.max(0, Math.floor(above / ROW_HEIGHT) - MARGIN);
    const count = Math.ceil(window.innerHeight / ROW_HEIGHT) + 2 * MARGIN;
    first = Math.min(first, Math.max(0, n - count));
    const last = Math.min(n, first + count);
    while (this.pool.length > last - first) this.pool.pop().tr.remove();
    while (this.pool.length < last - first) {
      const row = this.newRow();
      this.pool.push(row);
      this.tbody.insertBefore(row.tr, this.bottomSpacer.tr);
    }
    this.first = first;
    for (let i = first; i < last; i++) this.fill(this.pool[i - first], this.list[i]);
    this.topSpacer.td.style.height = first * ROW_HEIGHT + 'px';
    this.bottomSpacer.td.style.height = (n - last) * ROW_HEIGHT + 'px';
  }

  update() {
    const store = this.app.store;
    const queues = [...store.queues.values()];
    const key = this.sortKey;
    const dir = this.sortDir;
    const shown = this.filter ? queues.filter((q) => q.name.toLowerCase().includes(this.filter))
                              : queues;
    shown.sort((a, b) => {
      const x = cellValue(a, key);
      const y = cellValue(b, key);
      const c = typeof x === 'string' ? (x < y ? -1 : x > y ? 1 : 0) : x - y;
      return c !== 0 ? c * dir : (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    });
    this.list = shown;
    this.renderWindow();
    this.empty.hidden = queues.length > 0;
    setText(this.summary, `${int(queues.length)} queues · ${int(store.totalMessages())} messages` +
                              (this.filter ? ` · ${int(shown.length)} shown` : ''));
  }
}
