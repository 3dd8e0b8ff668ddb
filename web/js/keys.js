// The keys panel of a queue with a flow key (docs/dashboard.md, "Keys"): the top values by
// pending, running or throttled (ListKeys), each with its messages, the limits in effect (an
// overridden one marked), and whether it is held or out of tokens; and, unless the page is
// read-only, a form that sets or resets one value's limits (SetKeyLimits). Keys change with
// every dequeue and no event announces a limit, so the panel asks again every REFRESH_MS
// while the queue page is shown.

import {readOnly} from './confirm.js';
import {clear, h, setText, toast} from './dom.js';
import {int, time} from './format.js';

const REFRESH_MS = 2000;
const LIMIT = 20;
const FIELDS = [['concurrency', 'Concurrency'], ['rate_per_s', 'Rate/s'], ['burst', 'Burst'],
                ['weight', 'Weight']];

export class KeysPanel {
  constructor(app, queue) {
    this.app = app;
    this.queue = queue;
    this.order = 'pending';
    this.timer = 0;
    this.seq = 0;
    this.shown = false;
    this.build();
  }

  build() {
    this.orderSelect = h('select', {id: 'keys-order', 'aria-label': 'Order of the keys'},
                         ['pending', 'running', 'throttled'].map((o) => h('option', {value: o, text: `by ${o}`})));
    this.orderSelect.addEventListener('change', () => {
      this.order = this.orderSelect.value;
      this.load();
    });
    this.intro = h('span', {class: 'muted', id: 'keys-intro'});
    this.tbody = h('tbody', {id: 'key-rows'});
    this.none = h('p', {class: 'empty', id: 'keys-none', hidden: true, text: 'No key has messages or limits of its own.'});
    const head = h('tr', null, h('th', {class: 'text', text: 'Value'}), h('th', {class: 'num', text: 'Pending'}),
                   h('th', {class: 'num', text: 'Running'}),
                   FIELDS.map(([, label]) => h('th', {class: 'num', text: label})),
                   h('th', {class: 'text', text: 'State'}));
    this.form = readOnly() ? null : this.buildForm();
    this.el = h('section', {class: 'panel', id: 'keys-panel', hidden: true},
                h('div', {class: 'toolbar'}, h('h2', {text: 'Keys'}), this.orderSelect),
                h('p', null, this.intro),
                h('div', {class: 'table-wrap'}, h('table', {class: 'keys'}, h('thead', null, head), this.tbody)),
                this.none, this.form);
  }

  buildForm() {
    this.valueInput = h('input', {id: 'key-value', placeholder: 'value', autocomplete: 'off', spellcheck: 'false',
                                  'aria-label': 'Flow-key value'});
    this.inputs = {};
    for (const [k, label] of FIELDS) {
      this.inputs[k] = h('input', {id: 'key-' + k.replace(/_/g, '-'), inputmode: 'decimal', placeholder: label.toLowerCase(),
                                   autocomplete: 'off', 'aria-label': label});
    }
    const form = h('form', {class: 'inline', id: 'key-limits-form'}, this.valueInput,
                   FIELDS.map(([k]) => this.inputs[k]),
                   h('button', {type: 'submit', id: 'key-limits-set', text: 'Set limits'}),
                   h('button', {type: 'button', id: 'key-limits-reset', text: 'Reset to the queue’s',
                                onclick: () => this.set(true)}));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.set(false);
    });
    return h('div', null,
             h('p', {class: 'muted', text: 'A field left empty follows the queue’s setting; the fields given ' +
                     'replace the value’s overrides (docs/semantics.md, “Per-key limits”).'}),
             form);
  }

  // Shown for a queue with a flow key (an exclusive queue's is its exclusivity key).
  setQueue(q) {
    const key = q ? (q.settings.flow_key || (q.settings.type === 'exclusive' ? q.settings.exclusivity_key : '')) : '';
    this.shown = !!key;
    setText(this.intro, key ? `Values of “${key}”: the first ${LIMIT}; an overridden limit is in bold.` : '');
    this.el.hidden = !this.shown;
    if (this.shown) this.start();
    else this.stop();
  }

  start() {
    if (this.timer || !this.shown) return;
    this.load();
    this.timer = setInterval(() => this.load(), REFRESH_MS);
  }

  stop() {
    clearInterval(this.timer);
    this.timer = 0;
  }

  async load() {
    if (!this.app.conn.open) return;
    const seq = ++this.seq;
    try {
      const {result} = await this.app.conn.request('ListKeys', {queue: this.queue, order: this.order, limit: LIMIT});
      if (seq !== this.seq) return;
      this.render(result.keys || []);
    } catch (e) {
      if (seq === this.seq) setText(this.intro, `Could not list the keys: ${e.message}`);
    }
    this.el.dataset.loaded = String(seq);
  }

  render(keys) {
    clear(this.tbody);
    this.none.hidden = keys.length > 0;
    for (const k of keys) {
      const o = k.overrides || {};
      const state = k.held ? 'held' : k.next_token ? `no token until ${time(k.next_token).slice(11, 19)}` : '';
      const valueCell = h('td', {class: 'text'},
                          this.form ? h('button', {type: 'button', class: 'link', text: k.value || '(empty)',
                                                   onclick: () => this.edit(k)})
                            : k.value || '(empty)');
      this.tbody.append(h('tr', {dataset: {value: k.value || ''}}, valueCell,
                          h('td', {class: 'num', text: int(k.pending || 0)}),
                          h('td', {class: 'num', text: int(k.running || 0)}),
                          FIELDS.map(([f]) => h('td', {class: 'num' + (f in o ? ' override' : ''), dataset: {field: f},
                                                       text: limitText(f, k[f])})),
                          h('td', {class: 'text state', text: state})));
    }
  }

  // Fills the form with a value's overrides (empty: following the queue).
  edit(k) {
    this.valueInput.value = k.value || '';
    const o = k.overrides || {};
    for (const [f] of FIELDS) this.inputs[f].value = f in o ? String(o[f]) : '';
  }

  async set(reset) {
    const value = this.valueInput.value;
    const limits = {};
    if (!reset) {
      for (const [f] of FIELDS) {
        const text = this.inputs[f].value.trim();
        if (text === '') continue;
        const n = Number(text);
        if (!Number.isFinite(n) || n < 0) {
          toast(`${f}: “${text}” is not a number`, 'error');
          return;
        }
        limits[f] = n;
      }
    }
    try {
      const {result} = await this.app.conn.request('SetKeyLimits', {queue: this.queue, value, limits});
      this.edit(result.key);
      toast(reset ? `Key “${value}” follows the queue’s limits again.` : `Limits of key “${value}” set.`);
    } catch (e) {
      toast(`Could not set the limits of “${value}”: ${e.message}`, 'error');
    }
    this.load();
  }
}

// A limit as the table shows it: 0 concurrency or rate is no limit.
function limitText(field, v) {
  v = v || 0;
  if ((field === 'concurrency' || field === 'rate_per_s') && v === 0) return '∞';
  return field === 'rate_per_s' ? String(v) : int(v);
}
