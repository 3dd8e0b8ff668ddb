// The batch page (#/batches, #/batches/ID): a batch found by its id (GetBatch; the server
// lists no batches), its progress — members completed, canceled, errored and still active, as
// a bar and as counts —, whether it is sealed and done, its callback message (linked once
// enqueued) and, while it is open, the Seal action. A batch changes with its members'
// transitions, which this page does not subscribe to, so it asks again every REFRESH_MS until
// the batch is done.

import {confirmAction, readOnly} from './confirm.js';
import {clear, h, setText, toast} from './dom.js';
import {duration, int, time} from './format.js';

const REFRESH_MS = 1000;
const PARTS = ['completed', 'canceled', 'errored', 'active'];

export class BatchView {
  constructor(app, id) {
    this.app = app;
    this.id = id || '';
    this.batch = null;
    this.shown = '';  // the batch on screen, as JSON
    this.timer = 0;
    this.seq = 0;
    this.build();
  }

  build() {
    this.input = h('input', {id: 'batch-id', placeholder: 'batch id', autocomplete: 'off',
                             spellcheck: 'false', 'aria-label': 'Batch id', value: this.id});
    const form = h('form', {class: 'inline', id: 'batch-form'}, this.input,
                   h('button', {type: 'submit', id: 'batch-go', text: 'Show'}));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const id = this.input.value.trim();
      if (id) location.hash = `#/batches/${encodeURIComponent(id)}`;
    });
    this.error = h('p', {class: 'error', id: 'batch-error', hidden: true});
    this.body = h('div', {id: 'batch-body', hidden: true});
    this.el = h('section', {id: 'batch-view', dataset: {batch: this.id}},
                h('div', {class: 'toolbar'}, h('h1', {text: this.id ? `Batch ${this.id}` : 'Batches'}), form),
                h('p', {class: 'muted', text: 'A batch is done when it is sealed and none of its ' +
                        'members is active; then its callback is enqueued, once ' +
                        '(docs/semantics.md, “Batches”).'}),
                this.error, this.body);
  }

  mount(container) {
    container.append(this.el);
    if (!this.id) return;
    this.load();
    this.timer = setInterval(() => this.load(), REFRESH_MS);
  }

  unmount() {
    clearInterval(this.timer);
    this.el.remove();
  }

  async load() {
    const seq = ++this.seq;
    try {
      const {result} = await this.app.conn.request('GetBatch', {id: this.id});
      if (seq !== this.seq) return;
      this.batch = result.batch || {};
      this.error.hidden = true;
      if (this.batch.done) clearInterval(this.timer);  // nothing changes it any more
    } catch (e) {
      if (seq !== this.seq) return;
      this.batch = null;
      this.error.hidden = false;
      setText(this.error, e.code === 'NOT_FOUND' ?
        `No batch “${this.id}” (never created, or removed when its retention after done ran out).` :
        `Could not read the batch: ${e.message}`);
    }
    this.render();
    this.el.dataset.loaded = String(seq);
    this.app.rendered('batch');
  }

  render() {
    const b = this.batch;
    this.body.hidden = !b;
    if (!b) return;
    // Built again only when the batch changed: the Seal button stays the same element.
    const shown = JSON.stringify(b);
    if (shown === this.shown) return;
    this.shown = shown;
    clear(this.body);
    const members = b.members || 0;
    const state = b.done ? 'done' : b.sealed ? 'sealed' : 'open';
    const bar = h('div', {class: 'progress', id: 'batch-progress', role: 'img',
                          'aria-label': PARTS.map((p) => `${int(b[p])} ${p}`).join(', ')});
    for (const p of PARTS) {
      if (!b[p]) continue;
      const part = h('span', {class: 'part ' + p, dataset: {part: p}});
      part.style.width = `${(100 * b[p] / members).toFixed(2)}%`;  // CSSOM: the CSP allows no style attribute
      bar.append(part);
    }
    const cards = h('div', {class: 'cards', id: 'batch-counts'},
                    ['members', ...PARTS].map((p) =>
                      h('div', {class: 'card plain ' + p},
                        h('span', {class: 'label', text: p}),
                        h('span', {class: 'value', id: 'batch-' + p, text: int(b[p] || 0)}))));
    const row = (k, v) => [h('dt', {text: k}), h('dd', {id: 'batch-field-' + k.replace(/ /g, '-')}, v)];
    const cb = b.callback;
    const callback = !cb ? 'none' : b.done ?
        h('a', {href: `#/q/${encodeURIComponent(cb.queue)}/m/${encodeURIComponent(cb.id)}`,
                id: 'batch-callback-link', text: `${cb.queue}/${cb.id}`}) :
        `${cb.queue}/${cb.id} (enqueued when done)`;
    const fields = h('dl', {class: 'fields'},
                     row('state', h('span', {class: 'badge state-' + (b.done ? 'completed' : 'running'), text: state})),
                     row('created', time(b.created_at)),
                     row('done at', b.done ? time(b.done_at) : '—'),
                     row('kept after done', duration(b.retention_ms)),
                     row('callback', callback));
    const actions = [];
    if (!readOnly() && !b.sealed) {
      actions.push(h('div', {class: 'actions'},
                     h('button', {type: 'button', id: 'batch-seal', text: 'Seal…', onclick: () => this.seal()})));
    }
    this.body.dataset.state = state;
    this.body.append(h('div', {class: 'panel'}, bar, cards, fields), ...actions);
  }

  async seal() {
    const b = this.batch;
    if (!await confirmAction({
      title: `Seal batch ${this.id}?`,
      body: [`No message may join it any more. ${b.active ?
        `It is done when its ${int(b.active)} active members are terminal.` :
        'No member is active: it is done at once and its callback enqueued.'}`],
      button: 'Seal', danger: false})) return;
    try {
      await this.app.conn.request('SealBatch', {id: this.id});
      toast(`Batch ${this.id} sealed`);
    } catch (e) {
      toast(`Seal failed: ${e.message}`, 'error');
    }
    await this.load();
  }
}
