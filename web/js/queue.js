// The queue page (#/q/NAME, #/q/NAME/m/ID): depth and rate charts over the last 15 minutes
// (from the page's ticks), the counts, the message browser (by state, metadata filter, search by
// id, cursor paging in priority order, selection), a sampled feed of live transitions, the
// message detail, and the actions, each behind a confirmation that names what it touches.

import {lineChart} from './charts.js';
import {confirmAction, readOnly} from './confirm.js';
import {KeysPanel} from './keys.js';
import {clear, h, s, setText, toast} from './dom.js';
import {duration, filterText, int, message, parseFilter, rate, STATES, time, total} from './format.js';
import {MessageDetail} from './message.js';
import {DEPTH_SERIES, RATE_SERIES} from './store.js';

export const EVENTS_PER_SEC = 100;  // the live feed's sample (Subscribe.max_events_per_sec)
const EVENT_LOG = 2000;            // transitions kept for the live feed
const FEED_ROWS = 40;
const DEFAULT_PAGE = 100;

export class QueueView {
  constructor(app, name) {
    this.app = app;
    this.name = name;
    this.state = 'pending';
    this.filter = [];
    this.filterCounts = null;  // Count{filter} while a filter is set
    this.pageSize = DEFAULT_PAGE;
    this.cursors = [''];       // cursor of each page so far; the last is the current page's
    this.nextCursor = '';
    this.rows = [];
    this.selected = new Set();
    this.events = [];          // the sampled feed and the watched ids' events, oldest first
    this.feedDirty = false;
    this.watched = new Set();  // ids subscribed to exactly (Subscribe{ids})
    this.detail = null;
    this.loadSeq = 0;
    this.onEvent = (e) => this.handleEvent(e.detail);
    this.onOpen = () => this.resume();
    this.onTick = () => this.tick();
    this.build();
  }

  get q() {
    return this.app.store.queues.get(this.name);
  }

  // ---- Layout ---------------------------------------------------------------------------

  build() {
    this.title = h('h1', {id: 'queue-title'}, this.name);
    this.badges = h('span', {class: 'badges', id: 'queue-badges'});
    this.settingsLine = h('p', {class: 'muted settings', id: 'queue-settings'});
    this.missing = h('p', {class: 'empty', id: 'queue-missing', hidden: true},
                     `Queue “${this.name}” does not exist (any more). `,
                     h('a', {href: '#/', text: 'Back to the queues'}));
    this.cards = h('div', {class: 'cards', id: 'queue-counts'});
    this.cardValues = {};
    for (const st of [...STATES, 'blocked']) {
      const v = h('span', {class: 'value', id: 'count-' + st, text: '0'});
      this.cardValues[st] = v;
      this.cards.append(h('button', {type: 'button', class: 'card ' + st, dataset: {state: st},
                                     disabled: st === 'blocked',
                                     onclick: () => st !== 'blocked' && this.setState(st)},
                          h('span', {class: 'label', text: st}), v));
    }
    this.oldest = h('span', {class: 'value', id: 'queue-oldest', text: '—'});
    this.cards.append(h('div', {class: 'card plain'}, h('span', {class: 'label', text: 'oldest pending'}),
                        this.oldest));
    this.depthChart = s('svg', {class: 'chart', id: 'depth-chart'});
    this.rateChart = s('svg', {class: 'chart', id: 'rate-chart'});

    this.actions = readOnly() ? null : this.buildActions();
    this.keys = new KeysPanel(this.app, this.name);
    this.browser = this.buildBrowser();
    this.feed = h('ol', {class: 'feed', id: 'event-feed'});
    this.detailBox = h('section', {class: 'detail', id: 'detail-box', hidden: true});

    this.el = h('section', {id: 'queue-view', dataset: {queue: this.name}},
                h('div', {class: 'toolbar'}, this.title, this.badges,
                  h('a', {href: `#/schedules/${encodeURIComponent(this.name)}`, id: 'queue-schedules-link',
                          text: 'Schedules'})),
                this.settingsLine, this.missing, this.actions, this.cards,
                h('div', {class: 'charts'}, this.depthChart, this.rateChart),
                this.detailBox,
                this.keys.el,
                this.browser,
                h('section', {class: 'panel'},
                  h('h2', {text: 'Live transitions'}),
                  h('p', {class: 'muted', text: `A sample: the server sends this page at most ` +
                          `${EVENTS_PER_SEC} transitions a second of this queue; the counts and ` +
                          `rates above are exact.`}),
                  this.feed));
  }

  buildActions() {
    const b = (id, text, onclick, cls = '') => h('button', {type: 'button', id, class: cls, text, onclick});
    this.pauseEnqueueBtn = b('act-pause-enqueue', 'Pause enqueue', () => this.togglePause('enqueue'));
    this.pauseDequeueBtn = b('act-pause-dequeue', 'Pause dequeue', () => this.togglePause('dequeue'));
    this.redriveAllBtn = b('act-redrive-all', 'Redrive all errored', () => this.redriveAll());
    return h('div', {class: 'actions', id: 'queue-actions'},
             this.pauseEnqueueBtn, this.pauseDequeueBtn, this.redriveAllBtn,
             b('act-purge', 'Purge…', () => this.purge(), 'danger-outline'),
             b('act-delete', 'Delete queue…', () => this.deleteQueue(), 'danger-outline'));
  }

  buildBrowser() {
    this.tabs = h('div', {class: 'tabs', id: 'state-tabs', role: 'tablist'});
    this.tabCounts = {};
    for (const st of STATES) {
      const c = h('span', {class: 'tab-count'});
      this.tabCounts[st] = c;
      this.tabs.append(h('button', {type: 'button', role: 'tab', dataset: {state: st},
                                    onclick: () => this.setState(st)}, st, ' ', c));
    }
    this.filterInput = h('input', {id: 'filter-input', placeholder: 'metadata: key=value … (up to 4)',
                                   autocomplete: 'off', spellcheck: 'false',
                                   'aria-label': 'Metadata filter'});
    this.filterNote = h('span', {class: 'muted', id: 'filter-note'});
    const filterForm = h('form', {class: 'inline', id: 'filter-form'}, this.filterInput,
                         h('button', {type: 'submit', id: 'filter-apply', text: 'Filter'}),
                         h('button', {type: 'button', id: 'filter-clear', text: 'Clear',
                                      onclick: () => this.setFilter('')}));
    filterForm.addEventListener('submit', (e) => {
      e.preventDefault();
      this.setFilter(this.filterInput.value);
    });
    this.idInput = h('input', {id: 'id-search', placeholder: 'message id', autocomplete: 'off',
                               spellcheck: 'false', 'aria-label': 'Find a message by id'});
    const idForm = h('form', {class: 'inline', id: 'id-form'}, this.idInput,
                     h('button', {type: 'submit', id: 'id-search-go', text: 'Find'}));
    idForm.addEventListener('submit', (e) => {
      e.preventDefault();
      const id = this.idInput.value.trim();
      if (id) location.hash = `#/q/${encodeURIComponent(this.name)}/m/${encodeURIComponent(id)}`;
    });
    this.pageSizeSelect = h('select', {id: 'page-size', 'aria-label': 'Messages per page'},
                            [50, 100, 500, 1000].map((n) => h('option', {value: n, text: `${n} a page`,
                                                                         selected: n === DEFAULT_PAGE})));
    this.pageSizeSelect.addEventListener('change', () => {
      this.pageSize = Number(this.pageSizeSelect.value);
      this.firstPage();
    });
    this.selectAll = h('input', {type: 'checkbox', id: 'select-page', 'aria-label': 'Select this page'});
    this.selectAll.addEventListener('change', () => {
      for (const r of this.rows) {
        if (this.selectAll.checked) this.selected.add(r.id);
        else this.selected.delete(r.id);
      }
      this.renderRows();
    });
    this.tbody = h('tbody', {id: 'browse-rows'});
    this.dueHeader = h('th', {class: 'num', text: 'Due'});
    this.pageInfo = h('span', {id: 'page-info', class: 'muted'});
    this.prevBtn = h('button', {type: 'button', id: 'page-prev', text: '← Previous',
                                onclick: () => this.prevPage()});
    this.nextBtn = h('button', {type: 'button', id: 'page-next', text: 'Next →',
                                onclick: () => this.nextPage()});
    this.firstBtn = h('button', {type: 'button', id: 'page-first', text: 'First',
                                 onclick: () => this.firstPage()});
    this.browseError = h('p', {class: 'error', id: 'browse-error', hidden: true});
    this.bulk = null;
    if (!readOnly()) {
      const b = (id, text, onclick) => h('button', {type: 'button', id, text, onclick});
      this.cancelSelectedBtn = b('act-cancel-selected', 'Cancel selected', () => this.cancelSelected());
      this.redriveSelectedBtn = b('act-redrive-selected', 'Redrive selected', () => this.redriveSelected());
      this.cancelFilterBtn = b('act-cancel-filter', 'Cancel matching…', () => this.cancelByFilter());
      this.redriveFilterBtn = b('act-redrive-filter', 'Redrive matching…', () => this.redriveByFilter());
      this.bulk = h('div', {class: 'actions bulk', id: 'bulk-actions'}, this.cancelSelectedBtn,
                    this.redriveSelectedBtn, this.cancelFilterBtn, this.redriveFilterBtn);
    }
    return h('section', {class: 'panel', id: 'browser'},
             h('h2', {text: 'Messages'}),
             this.tabs,
             h('div', {class: 'toolbar'}, filterForm, this.filterNote, idForm, this.pageSizeSelect),
             this.bulk,
             this.browseError,
             h('div', {class: 'table-wrap'},
               h('table', {class: 'messages', id: 'browse-table'},
                 h('thead', null, h('tr', null,
                   h('th', null, this.selectAll), h('th', {class: 'text', text: 'Id'}),
                   h('th', {class: 'num', text: 'Priority'}), h('th', {class: 'num', text: 'Attempts'}),
                   h('th', {class: 'num', text: 'Version'}), h('th', {class: 'num', text: 'Enqueued'}),
                   h('th', {class: 'num', text: 'Updated'}), this.dueHeader)),
                 this.tbody)),
             h('div', {class: 'pager'}, this.firstBtn, this.prevBtn, this.pageInfo, this.nextBtn));
  }

  // ---- Life cycle -------------------------------------------------------------------------

  mount(container, messageId) {
    container.append(this.el);
    const conn = this.app.conn;
    conn.addEventListener('MessageEvent', this.onEvent);
    conn.addEventListener('open', this.onOpen);
    this.app.store.addEventListener('tick', this.onTick);
    this.showDetail(messageId);
    this.render();
    this.resume();
  }

  unmount() {
    const conn = this.app.conn;
    conn.removeEventListener('MessageEvent', this.onEvent);
    conn.removeEventListener('open', this.onOpen);
    this.app.store.removeEventListener('tick', this.onTick);
    this.keys.stop();
    if (conn.open) conn.request('Unsubscribe', {queue: this.name}).catch(() => {});
    this.el.remove();
  }

  // After mounting and after every reconnect: subscribe and load.
  async resume() {
    if (!this.app.conn.open) return;
    const conn = this.app.conn;
    const subscriptions = [conn.request('Subscribe', {queue: this.name, max_events_per_sec: EVENTS_PER_SEC})];
    if (this.watched.size) {
      subscriptions.push(conn.request('Subscribe', {queue: this.name, ids: [...this.watched]}));
    }
    const loaded = Promise.all([this.refreshQueue(), this.load()]);
    try {
      await Promise.all(subscriptions);
    } catch (e) {
      toast(`Live transitions unavailable: ${e.message}`, 'error');
    }
    await loaded;
    if (this.detail) this.detail.refresh();
    this.app.rendered('queue');
  }

  async refreshQueue() {
    try {
      const {result} = await this.app.conn.request('GetQueue', {name: this.name});
      this.app.store.applyQueue(result.queue);
      this.missing.hidden = true;
    } catch (e) {
      if (e.code === 'NOT_FOUND') this.missing.hidden = false;
    }
    this.render();
  }

  tick() {
    this.render();
    if (this.feedDirty) this.renderFeed();
  }

  showDetail(id) {
    if (this.detail && this.detail.id === id) return;
    if (this.detail) {
      this.detail.close();
      this.detail = null;
    }
    clear(this.detailBox);
    this.detailBox.hidden = !id;
    if (!id) return;
    this.detail = new MessageDetail(this, id);
    this.detailBox.append(this.detail.el);
    this.watch(id);
    this.detail.refresh();
    this.detailBox.scrollIntoView({block: 'nearest'});
  }

  // Every transition of this message from now on (the live feed is only a sample).
  watch(id) {
    if (this.watched.has(id)) return;
    this.watched.add(id);
    if (this.app.conn.open) {
      this.app.conn.request('Subscribe', {queue: this.name, ids: [id]}).catch(() => {});
    }
  }

  handleEvent(ev) {
    if (ev.queue !== this.name && !this.watched.has(ev.id)) return;
    const e = {id: ev.id || '', from: ev.from || 'invisible', to: ev.to || 'invisible',
               version: ev.version || 0, time: ev.time || 0, cause: ev.cause || '', queue: ev.queue};
    this.events.push(e);
    if (this.events.length > EVENT_LOG) this.events.splice(0, this.events.length - EVENT_LOG);
    this.feedDirty = true;
    if (this.detail && this.detail.id === e.id) this.detail.onTransition(e);
    const row = this.rowEls && this.rowEls.get(e.id);
    if (row && e.to !== this.state) {
      row.classList.add('moved');
      row.title = `now ${e.to} (${e.cause})`;
      setText(row.querySelector('.moved-note'), `→ ${e.to}`);
    }
  }

  // ---- Rendering -----------------------------------------------------------------------------

  render() {
    const q = this.q;
    if (!q) return;
    clear(this.badges);
    this.badges.append(h('span', {class: 'badge', text: q.settings.type === 'exclusive' ?
                                        `exclusive on ${q.settings.exclusivity_key}` : 'simple'}));
    if (q.settings.enqueue_paused) this.badges.append(h('span', {class: 'badge warn', text: 'enqueue paused'}));
    if (q.settings.dequeue_paused) this.badges.append(h('span', {class: 'badge warn', text: 'dequeue paused'}));
    const st = q.settings;
    this.keys.setQueue(q);
    setText(this.settingsLine, `lease ${duration(st.lease_ms)} · max attempts ${st.max_attempts} · ` +
        `backoff ${duration(st.retry_backoff_ms)}–${duration(st.retry_backoff_max_ms)} · ` +
        `retention ${duration(st.retention_ms)} · ` +
        (st.dead_letter_queue ? `dead-letter queue ${st.dead_letter_queue} · ` : '') +
        (st.max_depth ? `max depth ${int(st.max_depth)} · ` : '') +
        (st.flow_key ? `flow key ${st.flow_key}: ` + (st.key_concurrency ?
            `${int(st.key_concurrency)} running per value · ` : 'no limit · ') : '') +
        (st.rate_per_s ? `rate ${st.rate_per_s}/s, burst ${int(st.burst)} · ` : '') +
        (st.key_rate_per_s ? `key rate ${st.key_rate_per_s}/s, burst ${int(st.key_burst)} per value · ` : '') +
        (st.fairness === 'weighted' ? 'fair share by weight' +
            (st.overdue_first_ms ? `, overdue by ${duration(st.overdue_first_ms)} first` : '') + ' · ' : '') +
        `memory ${int(q.memory)} B`);
    for (const k of [...STATES, 'blocked']) setText(this.cardValues[k], int(q.counts[k]));
    setText(this.oldest, q.oldest ? duration(q.oldest) : '—');
    const counts = this.filterCounts || q.counts;
    for (const k of STATES) setText(this.tabCounts[k], int(counts[k]));
    for (const tab of this.tabs.children) {
      tab.setAttribute('aria-selected', String(tab.dataset.state === this.state));
    }
    if (this.actions) {
      setText(this.pauseEnqueueBtn, st.enqueue_paused ? 'Resume enqueue' : 'Pause enqueue');
      setText(this.pauseDequeueBtn, st.dequeue_paused ? 'Resume dequeue' : 'Pause dequeue');
      setText(this.redriveAllBtn, `Redrive all errored (${int(q.counts.errored)})`);
      this.redriveAllBtn.disabled = q.counts.errored === 0;
    }
    if (this.bulk) {
      const n = this.selected.size;
      const cancelable = ['invisible', 'pending', 'running'].includes(this.state);
      setText(this.cancelSelectedBtn, `Cancel selected (${n})`);
      setText(this.redriveSelectedBtn, `Redrive selected (${n})`);
      this.cancelSelectedBtn.disabled = n === 0 || !cancelable;
      this.redriveSelectedBtn.disabled = n === 0 || this.state !== 'errored';
      this.cancelFilterBtn.disabled = this.filter.length === 0;
      this.redriveFilterBtn.disabled = this.filter.length === 0;
    }
    this.renderPager();
    this.renderCharts();
  }

  renderCharts() {
    const q = this.q;
    if (!q) return;
    const store = this.app.store;
    const depth = DEPTH_SERIES.map((k) => ({label: k, values: store.series(q, k).values}));
    const times = store.series(q, 'pending').times;
    lineChart(this.depthChart, {times, series: depth, title: 'Depth by state'});
    const rates = RATE_SERIES.map((k) => ({label: k + '/s', values: store.series(q, k).values}));
    lineChart(this.rateChart, {times, series: rates, format: rate, title: 'Transitions per second'});
  }

  renderPager() {
    const counts = this.filterCounts || (this.q ? this.q.counts : null);
    const n = counts ? counts[this.state] : 0;
    const page = this.cursors.length;
    const pages = Math.max(1, Math.ceil(n / this.pageSize));
    const first = (page - 1) * this.pageSize + 1;
    setText(this.pageInfo, this.rows.length ?
        `${int(first)}–${int(first + this.rows.length - 1)} of ${int(n)} ${this.state} · page ${page} of ${int(pages)}` :
        `no ${this.state} messages${this.filter.length ? ' match' : ''}`);
    this.prevBtn.disabled = page <= 1;
    this.firstBtn.disabled = page <= 1;
    this.nextBtn.disabled = !this.nextCursor;
    this.dueHeader.textContent = this.state === 'invisible' ? 'Visible at' :
                                 this.state === 'running' ? 'Lease expires' : 'Due';
  }

  renderRows() {
    clear(this.tbody);
    this.rowEls = new Map();
    for (const r of this.rows) {
      const box = h('input', {type: 'checkbox', 'aria-label': `Select ${r.id}`,
                              checked: this.selected.has(r.id)});
      box.addEventListener('change', () => {
        if (box.checked) this.selected.add(r.id);
        else this.selected.delete(r.id);
        this.render();
      });
      const due = r.state === 'invisible' ? time(r.visible_at) :
                  r.state === 'running' ? time(r.lease_expires_at) : '—';
      const tr = h('tr', {dataset: {id: r.id}},
                   h('td', null, box),
                   h('td', {class: 'text id'},
                     h('a', {href: `#/q/${encodeURIComponent(this.name)}/m/${encodeURIComponent(r.id)}`,
                             text: r.id}),
                     h('span', {class: 'moved-note'})),
                   h('td', {class: 'num', text: String(r.priority)}),
                   h('td', {class: 'num', text: int(r.attempts)}),
                   h('td', {class: 'num', text: int(r.version)}),
                   h('td', {class: 'num', text: time(r.enqueued_at)}),
                   h('td', {class: 'num', text: time(r.updated_at)}),
                   h('td', {class: 'num', text: due}));
      this.rowEls.set(r.id, tr);
      this.tbody.append(tr);
    }
    this.selectAll.checked = this.rows.length > 0 && this.rows.every((r) => this.selected.has(r.id));
    this.render();
  }

  renderFeed() {
    this.feedDirty = false;
    clear(this.feed);
    const recent = this.events.filter((e) => e.queue === this.name).slice(-FEED_ROWS).reverse();
    for (const e of recent) {
      this.feed.append(h('li', null, h('span', {class: 'muted', text: time(e.time)}), ' ',
                         h('a', {href: `#/q/${encodeURIComponent(this.name)}/m/${encodeURIComponent(e.id)}`,
                                 text: e.id}),
                         ` ${e.from} → ${e.to} (${e.cause})`));
    }
  }

  // ---- Browsing -------------------------------------------------------------------------------

  setState(st) {
    if (this.state === st) return;
    this.state = st;
    this.selected.clear();
    this.firstPage();
  }

  async setFilter(text) {
    let pairs;
    try {
      pairs = parseFilter(text);
    } catch (e) {
      setText(this.filterNote, e.message);
      return;
    }
    this.filterInput.value = filterText(pairs);
    this.filter = pairs;
    this.selected.clear();
    setText(this.filterNote, '');
    await this.countFilter();
    this.firstPage();
  }

  async countFilter() {
    if (!this.filter.length) {
      this.filterCounts = null;
      return;
    }
    try {
      const {result} = await this.app.conn.request('Count', {queue: this.name, filter: this.filter});
      const c = result.counts || {};
      this.filterCounts = Object.fromEntries([...STATES, 'blocked'].map((k) => [k, c[k] || 0]));
      setText(this.filterNote, `${int(total(this.filterCounts))} messages match`);
    } catch (e) {
      this.filterCounts = null;
      setText(this.filterNote, e.message);
    }
  }

  firstPage() {
    this.cursors = [''];
    return this.load();
  }

  nextPage() {
    if (!this.nextCursor) return;
    this.cursors.push(this.nextCursor);
    return this.load();
  }

  prevPage() {
    if (this.cursors.length <= 1) return;
    this.cursors.pop();
    return this.load();
  }

  async load() {
    const seq = ++this.loadSeq;
    const op = {queue: this.name, state: this.state, limit: this.pageSize,
                cursor: this.cursors[this.cursors.length - 1]};
    if (this.filter.length) op.filter = this.filter;
    try {
      const {result} = await this.app.conn.request('Browse', op);
      if (seq !== this.loadSeq) return;
      this.rows = (result.messages || []).map(message);
      this.nextCursor = result.next_cursor || '';
      this.browseError.hidden = true;
    } catch (e) {
      if (seq !== this.loadSeq) return;
      this.rows = [];
      this.nextCursor = '';
      this.browseError.hidden = false;
      setText(this.browseError, e.code === 'NOT_FOUND' ? 'This queue does not exist.' : e.message);
    }
    this.renderRows();
    this.el.dataset.loaded = String(seq);
  }

  // ---- Actions --------------------------------------------------------------------------------

  async run(label, opType, op, describe) {
    try {
      const {result} = await this.app.conn.request(opType, op);
      toast(describe(result));
    } catch (e) {
      toast(`${label} failed: ${e.message}`, 'error');
    }
    this.selected.clear();
    await Promise.all([this.refreshQueue(), this.filter.length ? this.countFilter() : null]);
    await this.load();
  }

  async togglePause(which) {
    const q = this.q;
    if (!q) return;
    const key = which + '_paused';
    const pausing = !q.settings[key];
    const body = which === 'enqueue' ?
        [pausing ? `Producers will get FAILED_PRECONDITION from every enqueue into “${this.name}”.`
                 : `Enqueues into “${this.name}” will be accepted again.`] :
        [pausing ? `Workers will get nothing from “${this.name}”: its ${int(q.counts.pending)} pending messages wait.`
                 : `Workers will dequeue from “${this.name}” again: ${int(q.counts.pending)} pending messages.`];
    const verb = `${pausing ? 'Pause' : 'Resume'} ${which}`;
    if (!await confirmAction({title: `${verb} on ${this.name}?`, body, button: verb, danger: pausing})) return;
    await this.run(verb, 'UpdateQueue', {name: this.name, update: {[key]: pausing}},
                   () => `${which[0].toUpperCase() + which.slice(1)} ${pausing ? 'paused' : 'resumed'} on ${this.name}`);
  }

  async freshCounts() {
    await this.refreshQueue();
    return this.q ? this.q.counts : null;
  }

  async redriveAll() {
    const c = await this.freshCounts();
    if (!c) return;
    if (!await confirmAction({
      title: `Redrive every errored message of ${this.name}?`,
      body: [`${int(c.errored)} errored messages will move back to pending with their attempts reset to 0.`],
      button: `Redrive ${int(c.errored)} messages`, danger: false})) return;
    await this.run('Redrive', 'Redrive', {queue: this.name, all: true},
                   (r) => `Redriven ${int(r.count || 0)} messages of ${this.name}`);
  }

  async purge() {
    const c = await this.freshCounts();
    if (!c) return;
    const boxes = STATES.map((st) => h('input', {type: 'checkbox', value: st, id: 'purge-' + st,
                                                 checked: ['completed', 'canceled'].includes(st)}));
    const sum = h('p', {class: 'confirm-line', id: 'purge-sum'});
    const update = () => {
      const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
      setText(sum, `${int(chosen.reduce((t, st) => t + c[st], 0))} messages will be removed for good ` +
                   `(${chosen.join(', ') || 'no state chosen'}).`);
      document.getElementById('confirm-ok').disabled = chosen.length === 0;
    };
    boxes.forEach((b) => b.addEventListener('change', update));
    const extra = h('div', {class: 'purge-states'},
                    boxes.map((b, i) => h('label', null, b, ` ${STATES[i]} (${int(c[STATES[i]])})`)), sum);
    const confirmed = confirmAction({title: `Purge messages of ${this.name}?`,
                                     body: ['Choose the states to purge. Running messages lose their lease.'],
                                     button: 'Purge', extra});
    update();
    if (!await confirmed) return;
    const states = boxes.filter((b) => b.checked).map((b) => b.value);
    await this.run('Purge', 'PurgeQueue', {name: this.name, states},
                   (r) => `Purged ${int(r.count || 0)} messages (${states.join(', ')}) of ${this.name}`);
  }

  async deleteQueue() {
    const c = await this.freshCounts();
    if (!c) return;
    if (!await confirmAction({
      title: `Delete queue ${this.name}?`,
      body: [`The queue and all its ${int(total(c))} messages (${STATES.map((st) => `${int(c[st])} ${st}`).join(', ')}) ` +
             'will be removed. This cannot be undone.'],
      button: 'Delete queue', typeToConfirm: this.name})) return;
    try {
      await this.app.conn.request('DeleteQueue', {name: this.name});
      toast(`Deleted queue ${this.name} and its ${int(total(c))} messages`);
      this.app.store.queues.delete(this.name);
      location.hash = '#/';
    } catch (e) {
      toast(`Delete failed: ${e.message}`, 'error');
    }
  }

  async cancelSelected(ids = [...this.selected]) {
    if (!ids.length) return;
    if (!await confirmAction({
      title: `Cancel ${int(ids.length)} messages of ${this.name}?`,
      body: [`${int(ids.length)} selected messages will be canceled (running ones lose their lease): ` +
             ids.slice(0, 5).join(', ') + (ids.length > 5 ? `, … ${int(ids.length - 5)} more` : '') + '.'],
      button: `Cancel ${int(ids.length)} messages`})) return;
    await this.run('Cancel', 'Cancel', {queue: this.name, ids}, (r) => itemSummary('Canceled', r));
  }

  async redriveSelected(ids = [...this.selected]) {
    if (!ids.length) return;
    if (!await confirmAction({
      title: `Redrive ${int(ids.length)} messages of ${this.name}?`,
      body: [`${int(ids.length)} selected errored messages will move back to pending: ` +
             ids.slice(0, 5).join(', ') + (ids.length > 5 ? `, … ${int(ids.length - 5)} more` : '') + '.'],
      button: `Redrive ${int(ids.length)} messages`, danger: false})) return;
    await this.run('Redrive', 'Redrive', {queue: this.name, ids}, (r) => itemSummary('Redriven', r));
  }

  async cancelByFilter() {
    if (!this.filter.length) return;
    await this.countFilter();
    const c = this.filterCounts || {};
    const n = (c.invisible || 0) + (c.pending || 0) + (c.running || 0);
    if (!await confirmAction({
      title: `Cancel every message of ${this.name} matching ${filterText(this.filter)}?`,
      body: [`${int(n)} messages will be canceled now: ${int(c.invisible)} invisible, ${int(c.pending)} ` +
             `pending, ${int(c.running)} running (which lose their lease). Matches that arrive ` +
             'before the server runs it are canceled too.'],
      button: `Cancel ${int(n)} messages`})) return;
    await this.run('Cancel', 'Cancel', {queue: this.name, filter: this.filter},
                   (r) => `Canceled ${int(r.count || 0)} messages of ${this.name}`);
  }

  async redriveByFilter() {
    if (!this.filter.length) return;
    await this.countFilter();
    const n = this.filterCounts ? this.filterCounts.errored : 0;
    if (!await confirmAction({
      title: `Redrive the errored messages of ${this.name} matching ${filterText(this.filter)}?`,
      body: [`${int(n)} errored messages will move back to pending with their attempts reset to 0.`],
      button: `Redrive ${int(n)} messages`, danger: false})) return;
    await this.run('Redrive', 'Redrive', {queue: this.name, filter: this.filter},
                   (r) => `Redriven ${int(r.count || 0)} messages of ${this.name}`);
  }
}

function itemSummary(verb, result) {
  const items = result.items || [];
  const failed = items.filter((i) => i.code && i.code !== 'OK');
  let text = `${verb} ${int(items.length - failed.length)} of ${int(items.length)} messages`;
  if (failed.length) text += `; ${failed.length} refused: ${failed[0].code} ${failed[0].message || ''}`;
  return text;
}
