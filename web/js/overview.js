// The overview (#/): every queue with its type, paused flags, per-state counts, blocked count,
// oldest pending age, rates and a sparkline of the last minute; sorting by any column and a name
// filter. Built for 1,000 queues: rows are kept by queue name and only changed cells are
// written; sparklines are drawn only for rows on screen.

import {sparkline} from './charts.js';
import {h, s, setText} from './dom.js';
import {duration, int, rate} from './format.js';

const COLUMNS = [
  {key: 'name', label: 'Queue', text: true},
  {key: 'type', label: 'Type', text: true},
  {key: 'status', label: 'Status', text: true},
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

export class OverviewView {
  constructor(app) {
    this.app = app;
    this.rows = new Map();  // name -> {tr, cells: [], spark, visible}
    this.sortKey = 'name';
    this.sortDir = 1;
    this.filter = '';
    this.order = [];
    this.observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        const row = e.target.sundialRow;
        if (!row) continue;
        row.visible = e.isIntersecting;
        if (row.visible) this.drawSpark(row);
      }
    });
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
    this.tbody = h('tbody', {id: 'queue-rows'});
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
    this.update();
  }

  unmount() {
    this.el.remove();
  }

  row(q) {
    let row = this.rows.get(q.name);
    if (row) return row;
    const cells = COLUMNS.map((c) => h('td', {class: c.text ? 'text' : 'num', dataset: {key: c.key}}));
    const link = h('a', {href: '#/q/' + encodeURIComponent(q.name), text: q.name});
    cells[0].append(link);
    const spark = s('svg', {class: 'spark', 'aria-hidden': 'true'});
    const tr = h('tr', {dataset: {queue: q.name}}, cells, h('td', {class: 'text'}, spark));
    row = {tr, cells, spark, visible: false, name: q.name};
    tr.sundialRow = row;
    this.rows.set(q.name, row);
    this.observer.observe(tr);
    return row;
  }

  drawSpark(row) {
    const q = this.app.store.queues.get(row.name);
    if (!q) return;
    const st = this.app.store;
    sparkline(row.spark, ['enqueued', 'dequeued', 'completed'].map((k) => st.series(q, k, 60).values));
  }

  update() {
    const store = this.app.store;
    const queues = [...store.queues.values()];
    for (const [name, row] of this.rows) {
      if (!store.queues.has(name)) {
        this.observer.unobserve(row.tr);
        row.tr.remove();
        this.rows.delete(name);
      }
    }
    const key = this.sortKey;
    const dir = this.sortDir;
    queues.sort((a, b) => {
      const x = cellValue(a, key);
      const y = cellValue(b, key);
      const c = typeof x === 'string' ? x.localeCompare(y) : x - y;
      return c !== 0 ? c * dir : a.name.localeCompare(b.name);
    });
    let shown = 0;
    const order = [];
    for (const q of queues) {
      const row = this.row(q);
      const match = !this.filter || q.name.toLowerCase().includes(this.filter);
      row.tr.hidden = !match;
      if (match) shown++;
      order.push(row.tr);
      COLUMNS.forEach((c, i) => {
        if (i === 0) return;
        const v = cellValue(q, c.key);
        setText(row.cells[i], c.text ? v : (c.fmt || int)(v));
      });
      row.tr.classList.toggle('paused', q.settings.enqueue_paused || q.settings.dequeue_paused);
      row.tr.classList.toggle('has-errors', q.counts.errored > 0);
      if (row.visible) this.drawSpark(row);
    }
    if (!sameOrder(this.order, order)) {
      this.tbody.append(...order);  // moves the rows into the new order
      this.order = order;
    }
    this.empty.hidden = queues.length > 0;
    setText(this.summary, `${int(queues.length)} queues · ${int(store.totalMessages())} messages` +
                              (this.filter ? ` · ${int(shown)} shown` : ''));
  }
}

function sameOrder(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

