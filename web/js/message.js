// The message detail (#/q/NAME/m/ID): payload preview as text or hex, metadata, attempts,
// last_error, the lease (token and expiry), version and times, `explain` when it is not
// dequeueable, every transition the page has seen of it, and its own actions.

import {confirmAction, readOnly} from './confirm.js';
import {clear, h, setText, toast} from './dom.js';
import {duration, int, message, time} from './format.js';

const PREVIEW_BYTES = 4096;

const EXPLAIN = {
  dequeueable: () => 'Dequeueable now: the next dequeue in priority order may take it.',
  invisible: (x) => `Invisible until ${time(x.until)} (in ${duration(x.until - Date.now())}).`,
  exclusivity_held: (x) => `Waiting: its exclusivity value “${x.exclusivity_value || ''}” is held by ` +
                           `lease ${x.lease_token || 0} until ${time(x.until)}.`,
  queue_paused: () => 'The queue has dequeue paused.',
  no_match: () => 'No pending or invisible message matches.',
  attempts_spent: (x) => `Errored: all ${x.attempts || 0} attempts spent. Redrive it to try again.`,
  running: (x) => `Running: leased by token ${x.lease_token || 0} until ${time(x.until)}.`,
  terminal: () => 'Finished (completed or canceled): kept until retention removes it.',
  waiting_on_dependencies: (x) => `Waiting on ${x.unfinished || 0} of ${x.dependencies || 0} dependencies` +
      `${(x.waiting_on || []).length ? ': ' + x.waiting_on.join(', ') + ((x.unfinished || 0) > x.waiting_on.length ? ', …' : '') : ''}` +
      '. It becomes pending when the last one completes (see Dependencies below).',
};

// A dependency's key "queue/id" (or a bare id of this queue) as [queue, id].
function splitKey(key, queue) {
  const slash = key.indexOf('/');
  return slash < 0 ? [queue, key] : [key.slice(0, slash), key.slice(slash + 1)];
}

// UTF-8 text, or null for binary; `partial`: the bytes are a prefix (may end mid-character).
function decodeText(bytes, partial) {
  try {
    const text = new TextDecoder('utf-8', {fatal: true}).decode(bytes, {stream: partial});
    // Control characters other than whitespace: show hex instead.
    return /[\u0000-\u0008\u000e-\u001f\u007f]/.test(text) ? null : text;
  } catch (e) {
    return null;
  }
}

function hexDump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = bytes.subarray(i, i + 16);
    const hex = [...row].map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = [...row].map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${i.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join('\n');
}

export class MessageDetail {
  constructor(view, id) {
    this.view = view;
    this.id = id;
    this.msg = null;
    this.mode = null;  // 'text' | 'hex'
    this.seq = 0;
    this.build();
  }

  get conn() {
    return this.view.app.conn;
  }

  build() {
    const q = this.view.name;
    this.stateEl = h('span', {class: 'badge', id: 'detail-state'});
    this.fields = h('dl', {class: 'fields', id: 'detail-fields'});
    this.explainEl = h('p', {class: 'explain', id: 'detail-explain', hidden: true});
    this.errorEl = h('pre', {class: 'last-error', id: 'detail-last-error', hidden: true});
    this.metaBody = h('tbody', {id: 'detail-metadata'});
    this.payloadInfo = h('span', {class: 'muted', id: 'detail-payload-info'});
    this.textBtn = h('button', {type: 'button', id: 'payload-text', text: 'Text', onclick: () => this.setMode('text')});
    this.hexBtn = h('button', {type: 'button', id: 'payload-hex', text: 'Hex', onclick: () => this.setMode('hex')});
    this.payloadEl = h('pre', {class: 'payload', id: 'detail-payload'});
    this.transitions = h('ol', {class: 'feed', id: 'detail-transitions'});
    this.depsTitle = h('h3', {text: 'Dependencies', hidden: true});
    this.deps = h('ul', {class: 'feed', id: 'detail-dependencies', hidden: true});
    this.problem = h('p', {class: 'error', id: 'detail-problem', hidden: true});
    this.actions = null;
    if (!readOnly()) {
      this.cancelBtn = h('button', {type: 'button', id: 'detail-cancel', text: 'Cancel message…',
                                    onclick: () => this.view.cancelSelected([this.id])});
      this.redriveBtn = h('button', {type: 'button', id: 'detail-redrive', text: 'Redrive message…',
                                     onclick: () => this.view.redriveSelected([this.id])});
      this.actions = h('div', {class: 'actions'}, this.cancelBtn, this.redriveBtn);
    }
    this.el = h('article', {id: 'message-detail', dataset: {id: this.id}},
                h('div', {class: 'toolbar'},
                  h('h2', null, 'Message ', h('code', {text: this.id}), ' ', this.stateEl),
                  h('a', {href: '#/q/' + encodeURIComponent(q), class: 'close', text: 'Close ✕'})),
                this.problem, this.explainEl, this.actions, this.fields, this.errorEl,
                this.depsTitle, this.deps,
                h('h3', {text: 'Metadata'}),
                h('table', {class: 'kv'}, h('thead', null, h('tr', null, h('th', {text: 'key'}), h('th', {text: 'value'}))),
                  this.metaBody),
                h('h3', null, 'Payload ', this.payloadInfo, ' ', this.textBtn, this.hexBtn),
                this.payloadEl,
                h('h3', {text: 'Transitions seen since this page opened'}),
                this.transitions);
  }

  close() {
    this.el.remove();
  }

  async refresh() {
    const seq = ++this.seq;
    const conn = this.conn;
    try {
      const [got, explained] = await Promise.all([
        conn.request('Get', {queue: this.view.name, id: this.id, include_dependency_results: true}),
        conn.request('Explain', {queue: this.view.name, id: this.id}).catch(() => null),
      ]);
      if (seq !== this.seq) return;
      this.msg = message(got.result.message);
      this.problem.hidden = true;
      this.render(explained ? explained.result : null);
    } catch (e) {
      if (seq !== this.seq) return;
      this.problem.hidden = false;
      setText(this.problem, e.code === 'NOT_FOUND' ?
          `No message “${this.id}” in ${this.view.name} (never enqueued, or removed by retention).` :
          e.message);
      this.fields.hidden = true;
    }
    this.renderTransitions();
    this.el.dataset.loaded = String(seq);
  }

  onTransition() {
    this.renderTransitions();
    this.refresh();
  }

  render(explain) {
    const m = this.msg;
    this.fields.hidden = false;
    setText(this.stateEl, m.state);
    this.stateEl.className = 'badge state-' + m.state;
    clear(this.fields);
    const row = (k, v, id) => [h('dt', {text: k}), h('dd', {text: v, id})];
    this.fields.append(
        ...row('state', m.state, 'detail-field-state'),
        ...row('priority', String(m.priority)),
        ...row('attempts', `${m.attempts} of ${m.max_attempts}`, 'detail-attempts'),
        ...row('version', String(m.version), 'detail-version'),
        ...row('enqueued at', time(m.enqueued_at)),
        ...row('updated at', time(m.updated_at)),
        ...(m.state === 'invisible' ? row('visible at', time(m.visible_at)) : []),
        ...(m.state === 'running' ? [...row('lease token', String(m.lease_token), 'detail-lease-token'),
                                     ...row('lease expires at', `${time(m.lease_expires_at)} (in ${duration(m.lease_expires_at - Date.now())})`)] : []),
        ...(m.state !== 'running' && m.lease_token ? row('last lease token', String(m.lease_token)) : []));
    this.errorEl.hidden = !m.last_error;
    setText(this.errorEl, m.last_error ? 'last error: ' + m.last_error : '');
    const reason = explain ? (explain.reason || 'dequeueable') : null;
    this.explainEl.hidden = !reason || reason === 'dequeueable';
    if (reason) setText(this.explainEl, (EXPLAIN[reason] || (() => reason))(explain));
    this.explainEl.dataset.reason = reason || '';
    clear(this.metaBody);
    for (const p of m.metadata) {
      // A batch's callback names its batch: a link to the batch page.
      const value = p.key === 'x-batch-id' ?
          h('a', {href: `#/batches/${encodeURIComponent(p.value)}`, class: 'batch-link', text: p.value}) : p.value;
      this.metaBody.append(h('tr', null, h('td', {text: p.key}), h('td', null, value)));
    }
    if (!m.metadata.length) this.metaBody.append(h('tr', null, h('td', {colspan: 2, class: 'muted', text: 'none'})));
    if (this.actions) {
      this.cancelBtn.disabled = !['waiting', 'invisible', 'pending', 'running'].includes(m.state);
      this.redriveBtn.disabled = m.state !== 'errored';
    }
    this.renderDependencies();
    this.renderPayload();
  }

  // Each dependency with its state, linked to its own page; one that retention or a purge
  // removed says so.
  renderDependencies() {
    const deps = this.msg.dependency_results;
    this.depsTitle.hidden = this.deps.hidden = deps.length === 0;
    clear(this.deps);
    for (const d of deps) {
      const [queue, id] = splitKey(d.id, this.view.name);
      const state = d.error ? 'removed' : d.state;
      this.deps.append(h('li', {dataset: {key: d.id, state}},
                         h('a', {href: `#/q/${encodeURIComponent(queue)}/m/${encodeURIComponent(id)}`, text: d.id}),
                         ' ', h('span', {class: 'badge state-' + state, text: state}),
                         d.last_error ? h('span', {class: 'muted', text: ' ' + d.last_error}) : ''));
    }
  }

  setMode(mode) {
    this.mode = mode;
    this.renderPayload();
  }

  renderPayload() {
    const bytes = Uint8Array.from(this.msg.payload);
    const shown = bytes.subarray(0, PREVIEW_BYTES);
    const text = decodeText(shown, shown.length < bytes.length);
    const mode = this.mode || (text !== null ? 'text' : 'hex');
    this.textBtn.disabled = text === null || mode === 'text';
    this.hexBtn.disabled = mode === 'hex';
    setText(this.payloadInfo, `(${int(bytes.length)} bytes${bytes.length > PREVIEW_BYTES ?
        `, the first ${int(PREVIEW_BYTES)} shown` : ''})`);
    this.payloadEl.dataset.mode = mode;
    setText(this.payloadEl, mode === 'text' && text !== null ? text : hexDump(shown));
  }

  renderTransitions() {
    clear(this.transitions);
    const seen = this.view.transitionsOf(this.id);
    if (!seen.length) {
      this.transitions.append(h('li', {class: 'muted', text: 'none yet'}));
      return;
    }
    for (const e of seen) {
      this.transitions.append(h('li', null, h('span', {class: 'muted', text: time(e.time)}),
                                ` ${e.from} → ${e.to} (${e.cause}) · version ${e.version}`));
    }
  }
}
