// The message detail (#/q/NAME/m/ID): payload preview as text or hex, metadata, attempts,
// last_error, the lease (token and expiry), version and times, `explain` when it is not
// dequeueable, its result, its durable history (the History op: a timeline with the time spent
// between entries), its dependencies and dependents as a small graph with their states, and its
// own actions.

import {confirmAction, readOnly} from './confirm.js';
import {clear, h, setText, toast} from './dom.js';
import {duration, int, message, time} from './format.js';

const PREVIEW_BYTES = 4096;
const HISTORY_POLL_MS = 3000;  // notes change the history without a transition event
const TERMINAL = new Set(['completed', 'canceled']);

const EXPLAIN = {
  dequeueable: () => 'Dequeueable now: the next dequeue in priority order may take it.',
  invisible: (x) => `Invisible until ${time(x.until)} (in ${duration(x.until - Date.now())}).`,
  exclusivity_held: (x) => `Waiting: its exclusivity value “${x.exclusivity_value || ''}” is held by ` +
                           `lease ${x.lease_token || 0} until ${time(x.until)}.`,
  key_concurrency: (x) => `Waiting: key “${x.exclusivity_value || ''}” ${x.key_running || 0}/` +
                          `${x.key_concurrency || 0} running; the first lease (${x.lease_token || 0}) ends ` +
                          `${time(x.until)}.`,
  queue_paused: () => 'The queue has dequeue paused.',
  no_match: () => 'No pending or invisible message matches.',
  attempts_spent: (x) => `Errored: all ${x.attempts || 0} attempts spent. Redrive it to try again.`,
  running: (x) => `Running: leased by token ${x.lease_token || 0} until ${time(x.until)}.`,
  terminal: () => 'Finished (completed or canceled): kept until retention removes it.',
  key_rate: (x) => `Waiting: its flow-key value “${x.exclusivity_value || ''}” has no token ` +
                   `(key_rate_per_s); its next token comes ${time(x.until)}.`,
  queue_rate: (x) => `Waiting: the queue has no token (rate_per_s); its next token comes ${time(x.until)}.`,
  fair_share: (x) => `Waiting its turn: fair share serves the flow-key values in turn, and ` +
                     `“${x.exclusivity_value || ''}” has it now.`,
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
    this.historySeq = 0;
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
    this.resultTitle = h('h3', {text: 'Result', hidden: true});
    this.resultEl = h('pre', {class: 'payload', id: 'detail-result', hidden: true});
    this.historySummary = h('p', {class: 'muted', id: 'detail-history-summary'});
    this.historyBody = h('tbody', {id: 'detail-history'});
    this.historyRows = [];
    // Dependencies (left) → this message → its waiting dependents (right).
    this.depsTitle = h('h3', {text: 'Dependencies and dependents', hidden: true});
    this.deps = h('div', {class: 'flow-col', id: 'detail-dependencies'});
    this.dependents = h('div', {class: 'flow-col', id: 'detail-dependents'});
    this.selfNode = h('span', {class: 'flow-node self', id: 'detail-graph-self'});
    this.graph = h('div', {class: 'flow-graph', id: 'detail-graph', hidden: true},
                   this.deps, h('div', {class: 'flow-arrow', text: '→'}),
                   h('div', {class: 'flow-col'}, this.selfNode),
                   this.dependentsArrow = h('div', {class: 'flow-arrow', text: '→'}), this.dependents);
    this.graphNote = h('p', {class: 'muted', id: 'detail-graph-note', hidden: true});
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
                this.resultTitle, this.resultEl,
                this.depsTitle, this.graph, this.graphNote,
                h('h3', {text: 'Metadata'}),
                h('table', {class: 'kv'}, h('thead', null, h('tr', null, h('th', {text: 'key'}), h('th', {text: 'value'}))),
                  this.metaBody),
                h('h3', null, 'Payload ', this.payloadInfo, ' ', this.textBtn, this.hexBtn),
                this.payloadEl,
                h('h3', {text: 'History'}), this.historySummary,
                h('table', {class: 'history'},
                  h('thead', null, h('tr', null, ...['time', 'event', 'from → to', 'attempt', 'by', 'text', 'then']
                      .map((t) => h('th', {text: t})))),
                  this.historyBody));
    this.poll = setInterval(() => {
      if (this.msg && !TERMINAL.has(this.msg.state) && this.conn.open) this.refreshHistory();
    }, HISTORY_POLL_MS);
  }

  close() {
    clearInterval(this.poll);
    this.el.remove();
  }

  async refreshHistory() {
    const seq = ++this.historySeq;
    try {
      const {result} = await this.conn.request('History', {queue: this.view.name, id: this.id});
      if (seq !== this.historySeq) return;
      this.renderHistory(result.entries || [], result.dropped || 0);
    } catch (e) {
      // A lost connection keeps what is on screen (the page refreshes when it is back).
      if (seq !== this.historySeq || e.code !== 'NOT_FOUND') return;
      this.renderHistory([], 0, 'none (the message is gone)');
    }
  }

  async refresh() {
    const seq = ++this.seq;
    const conn = this.conn;
    const history = this.refreshHistory();
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
    await history;
    this.el.dataset.loaded = String(seq);
  }

  onTransition() {
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
        ...(m.expires_at ? row('expires at', time(m.expires_at), 'detail-expires-at') : []),
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
    this.renderResult();
    this.renderGraph(explain);
    this.renderPayload();
  }

  renderResult() {
    const bytes = Uint8Array.from(this.msg.result);
    this.resultTitle.hidden = this.resultEl.hidden = bytes.length === 0;
    if (!bytes.length) return;
    const shown = bytes.subarray(0, PREVIEW_BYTES);
    const text = decodeText(shown, shown.length < bytes.length);
    this.resultEl.dataset.mode = text !== null ? 'text' : 'hex';
    setText(this.resultEl, text !== null ? text : hexDump(shown));
  }

  // A node of the graph: the message's key, its state as a badge, a link to its page.
  node(key, state, title) {
    const [queue, id] = splitKey(key, this.view.name);
    return h('a', {class: 'flow-node state-' + state, href: `#/q/${encodeURIComponent(queue)}/m/${encodeURIComponent(id)}`,
                   dataset: {key, state}, title: title || null},
             h('span', {class: 'flow-key', text: key}), h('span', {class: 'badge state-' + state, text: state}));
  }

  // Its dependencies (from the dependency_results of a get: each one's state; one that retention or a
  // purge removed says so) and its dependents (Explain's `dependents`: the ones still waiting
  // on it), each a node linked to its own page.
  renderGraph(explain) {
    const deps = this.msg.dependency_results;
    const dependents = (explain && explain.dependents) || [];
    const more = ((explain && explain.waiting_dependents) || 0) - dependents.length;
    const shown = deps.length > 0 || dependents.length > 0;
    this.depsTitle.hidden = this.graph.hidden = !shown;
    this.graphNote.hidden = dependents.length === 0;
    clear(this.deps);
    clear(this.dependents);
    if (!shown) return;
    for (const d of deps) {
      const state = d.error ? 'removed' : d.state;
      this.deps.append(this.node(d.id, state, d.last_error));
    }
    if (!deps.length) this.deps.append(h('span', {class: 'muted', text: 'no dependencies'}));
    clear(this.selfNode);
    this.selfNode.className = 'flow-node self state-' + this.msg.state;
    this.selfNode.dataset.state = this.msg.state;
    this.selfNode.append(h('span', {class: 'flow-key', text: this.id}),
                         h('span', {class: 'badge state-' + this.msg.state, text: this.msg.state}));
    // Without any waiting dependent (or from a server that does not list them) only the
    // dependencies are drawn.
    this.dependents.hidden = this.dependentsArrow.hidden = dependents.length === 0;
    // Listed only while they wait on it: each one's state is `waiting`.
    for (const key of dependents) this.dependents.append(this.node(key, 'waiting'));
    if (more > 0) this.dependents.append(h('span', {class: 'muted', text: `… ${int(more)} more`}));
    setText(this.graphNote, 'Dependents are the messages still waiting on this one; once it is finished ' +
        'they are released (or failed by their policy) and no longer listed here.');
  }

  // The timeline: one row per entry, updated in place; `then` is the time spent in the entry's
  // `to` state until the next entry (until now for the last one, unless the message is finished).
  renderHistory(entries, dropped, problem) {
    const rows = [];
    entries.forEach((e, i) => {
      rows.push({entry: e, next: entries[i + 1] || null});
      if (i === 0 && dropped) rows.push({dropped});
    });
    if (problem) rows.push({problem});
    else if (!entries.length) rows.push({problem: 'none'});
    while (this.historyRows.length > rows.length) this.historyRows.pop().remove();
    rows.forEach((r, i) => {
      let tr = this.historyRows[i];
      if (!tr) {
        tr = h('tr', null, ...Array.from({length: 7}, () => h('td')));
        this.historyRows.push(tr);
        this.historyBody.append(tr);
      }
      this.fillHistoryRow(tr, r);
    });
    this.historySummary.hidden = !entries.length;
    setText(this.historySummary, entries.length ? this.historyTotals(entries, dropped) : '');
  }

  fillHistoryRow(tr, r) {
    const cells = tr.children;
    const set = (i, text) => setText(cells[i], text);
    if (!r.entry) {
      tr.className = r.dropped ? 'dropped' : 'muted';
      tr.dataset.event = r.dropped ? 'dropped' : '';
      set(0, r.dropped ? `… ${int(r.dropped)} earlier entries dropped` : r.problem);
      for (let i = 1; i < 7; i++) set(i, '');
      return;
    }
    const e = r.entry;
    tr.className = 'event-' + e.event;
    tr.dataset.event = e.event;
    set(0, time(e.time));
    set(1, e.event);
    set(2, `${e.from || 'invisible'} → ${e.to || 'invisible'}`);
    set(3, e.attempt ? String(e.attempt) : '');
    set(4, e.worker_id ? `${e.actor || ''} ${e.worker_id}` : (e.actor || ''));
    set(5, e.event === 'leased' ? '' : (e.text || ''));
    const to = e.to || 'invisible';
    if (r.next) set(6, `${to} ${duration(r.next.time - e.time)}`);
    else if (!TERMINAL.has(to) && to !== 'errored') {
      set(6, `${to} ${duration(Date.now() - e.time)} so far`);
    } else set(6, '');
  }

  // Time spent in each state, running per attempt (across dropped entries nothing is counted).
  historyTotals(entries, dropped) {
    const spent = new Map();
    for (let i = 0; i + 1 < entries.length; i++) {
      if (i === 0 && dropped) continue;
      const e = entries[i];
      const to = e.to || 'invisible';
      const key = to === 'running' ? `running (attempt ${e.attempt || 0})` : to;
      spent.set(key, (spent.get(key) || 0) + (entries[i + 1].time - e.time));
    }
    const parts = [...spent].map(([k, ms]) => `${k} ${duration(ms)}`);
    const total = entries[entries.length - 1].time - entries[0].time;
    return `${int(entries.length)} entries over ${duration(total)}` + (parts.length ? ': ' + parts.join(' · ') : '');
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
}
