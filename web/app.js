// Sundial's dashboard (docs/dashboard.md). One WebSocket to /ws carries everything after the
// page has loaded: a '*' subscription with the per-queue stats tick (and no message events),
// on a queue page a sampled subscription to that queue, and the Cluster request every two
// seconds (js/cluster.js). Routes are in the URL's hash, so moving between views makes no HTTP
// request.

import {BatchView} from './js/batches.js';
import {ClusterPanel} from './js/cluster.js';
import {readOnly} from './js/confirm.js';
import {Connection} from './js/conn.js';
import {h, setText} from './js/dom.js';
import {bytes, duration, int, rate} from './js/format.js';
import {OverviewView} from './js/overview.js';
import {QueueView} from './js/queue.js';
import {SchedulesView} from './js/schedules.js';
import {Store} from './js/store.js';

class App {
  constructor() {
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    this.conn = new Connection(`${scheme}//${location.host}/ws`);
    this.store = new Store();
    this.view = null;
    this.viewKey = '';
    this.overview = null;
    this.renders = [];       // {tick, at}: when each tick's figures reached the screen
    this.firstRender = {};   // view -> ms since navigation start
    this.main = document.getElementById('view');
    this.crumbs = document.getElementById('crumbs');
    this.status = document.getElementById('conn');
    this.banner = document.getElementById('banner');
    this.health = document.getElementById('health');
    this.errors = [];
    this.role = '';          // this node's role in its cluster ('standalone' outside one)
    this.cluster = new ClusterPanel(this);
  }

  start() {
    const root = document.documentElement;
    if (root.dataset.mode === 'read-only') document.getElementById('mode').hidden = false;
    if (root.dataset.auth === 'session') document.getElementById('signout').hidden = false;
    this.conn.addEventListener('status', (e) => this.showStatus(e.detail));
    this.conn.addEventListener('open', () => this.onOpen());
    this.conn.addEventListener('StatsTick', (e) => this.onTick(e.detail));
    this.conn.addEventListener('SubscriptionClosed', (e) => this.onSubscriptionClosed(e.detail));
    this.store.addEventListener('change', () => this.refresh());
    window.addEventListener('hashchange', () => this.route());
    setInterval(() => this.showStatus(null), 1000);  // the reconnect countdown
    this.route();
    this.cluster.start();
    this.conn.start();
  }

  async onOpen() {
    const conn = this.conn;
    if (conn.opens === 1) performance.mark('sundial:ws-open');
    try {
      // Per-queue figures every second, shared by every page (queue_stats); no message events
      // (max_events_per_sec 0): the overview needs none, however busy the server is.
      // On a queue page the list can wait for the first tick: the page's own requests (its
      // queue, its first page of messages) go first.
      const wantList = !(this.view instanceof QueueView);
      const [, list, stats] = await Promise.all([
        conn.request('Subscribe', {queue: '*', queue_stats: true, max_events_per_sec: 0}),
        wantList ? conn.request('ListQueues', {}) : null,
        conn.request('Stats', {}),
      ]);
      if (conn.opens === 1) performance.mark('sundial:queues-received');
      this.store.applyStats(stats.result);
      if (list) this.store.applyList(list.result.queues || []);
      if (this.view === this.overview) this.rendered('overview');
    } catch (e) {
      this.showBanner(`Could not load the queues: ${e.message}`);
    }
  }

  onTick(tick) {
    this.store.applyTick(tick);
    this.refresh();
    // When this tick's figures were on screen (the frame after the DOM update): the benchmark's
    // lag figures (bench/dashboard_bench.py).
    requestAnimationFrame(() => {
      this.renders.push({tick: tick.time || 0, at: Date.now()});
      if (this.renders.length > 600) this.renders.shift();
    });
  }

  onSubscriptionClosed(ev) {
    this.showBanner(`Live updates stopped: ${ev.reason || 'closed by the server'}. Resubscribing…`);
    this.onOpen();
    if (this.view && this.view.resume) this.view.resume();
  }

  // First render of a view with its data: a performance mark the benchmark reads.
  rendered(which) {
    if (this.firstRender[which] !== undefined) return;
    this.firstRender[which] = -1;
    // After the frame that shows it has been laid out.
    requestAnimationFrame(() => setTimeout(() => {
      this.firstRender[which] = performance.now();
      performance.mark('sundial:' + which + '-rendered');
    }, 0));
  }

  // js/cluster.js: this node's role, from each Cluster reply. A change between taking writes
  // and not (a standby promoted, a primary demoted) rebuilds the view with or without its
  // actions.
  setRole(role) {
    if (role === this.role) return;
    const before = readOnly();
    this.role = role;
    document.documentElement.dataset.role = role;
    if (readOnly() !== before) this.remount();
  }

  onOverview() {
    return this.view !== null && this.view === this.overview;
  }

  // The overview has no actions; a queue page is built again.
  remount() {
    if (!this.view || this.onOverview()) return;
    this.view.unmount();
    this.view = null;
    this.viewKey = '';
    this.route();
  }

  refresh() {
    this.showHealth();
    if (this.view && this.view.update) this.view.update();
  }

  route() {
    const hash = location.hash || '#/';
    const m = /^#\/q\/([^/]+)(?:\/m\/(.+))?$/.exec(hash);
    const queue = m ? decodeURIComponent(m[1]) : null;
    const id = m && m[2] ? decodeURIComponent(m[2]) : null;
    // #/schedules[/QUEUE] and #/batches[/ID]: pages of their own, built anew each time.
    const other = /^#\/(schedules|batches)(?:\/(.+))?$/.exec(hash);
    const arg = other && other[2] ? decodeURIComponent(other[2]) : '';
    const key = queue ? 'q:' + queue : other ? `${other[1]}:${arg}` : 'overview';
    if (key === this.viewKey && this.view) {
      if (queue) this.view.showDetail(id);
      return;
    }
    if (this.view) this.view.unmount();
    this.viewKey = key;
    let crumb = '';
    if (queue) {
      this.view = new QueueView(this, queue);
      this.view.mount(this.main, id);
      document.title = `${queue} · Sundial`;
      crumb = ' / ' + queue;
    } else if (other) {
      const View = other[1] === 'schedules' ? SchedulesView : BatchView;
      this.view = new View(this, arg);
      this.view.mount(this.main);
      const title = other[1] === 'schedules' ? 'Schedules' : 'Batches';
      document.title = `${arg ? arg + ' · ' : ''}${title} · Sundial`;
      crumb = ` / ${title}${arg ? ' / ' + arg : ''}`;
    } else {
      if (!this.overview) this.overview = new OverviewView(this);
      this.view = this.overview;
      this.view.mount(this.main);
      document.title = 'Sundial';
    }
    this.crumbs.replaceChildren(h('a', {href: '#/', text: 'Queues'}), crumb ? h('span', {text: crumb}) : '');
    const section = queue || !other ? 'queues' : other[1];
    for (const a of document.querySelectorAll('#sections a')) {
      if (a.dataset.section === section) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    this.cluster.routed();
  }

  showStatus(detail) {
    const c = this.conn;
    let text;
    let cls;
    if (c.state === 'open') {
      text = 'live';
      cls = 'ok';
    } else if (c.state === 'connecting') {
      text = c.attempt ? `reconnecting (attempt ${c.attempt + 1})…` : 'connecting…';
      cls = 'warn';
    } else {
      const s = Math.max(0, Math.ceil((c.retryAt - Date.now()) / 1000));
      text = `disconnected — retrying in ${s} s (attempt ${c.attempt})`;
      cls = 'bad';
    }
    setText(this.status, text);
    this.status.className = 'conn ' + cls;
    this.status.dataset.state = c.state;
    if (detail && detail.state === 'open') this.banner.hidden = !this.walFailed();
  }

  walFailed() {
    return !!(this.store.stats && this.store.stats.wal_failed);
  }

  showBanner(text) {
    this.banner.hidden = false;
    this.banner.className = 'banner';
    setText(this.banner, text);
  }

  showHealth() {
    const st = this.store.stats;
    if (!st) return;
    const hl = this.store.health;
    const items = [
      ['uptime', duration(st.uptime_ms || 0)],
      ['connections', int(st.connections || 0)],
      ['queues', int(st.queues || 0)],
      ['memory', bytes(st.memory_bytes || 0) + (st.memory_budget_bytes ? ` of ${bytes(st.memory_budget_bytes)}` : '')],
      ['WAL fsync', `${rate(hl.fsyncMeanUs / 1000)} ms · ${rate(hl.fsyncsPerSec)}/s`],
      ['WAL writes', `${bytes(Math.round(hl.walBytesPerSec))}/s`],
    ];
    if (!this.healthCells) {
      this.healthCells = items.map(([label]) => {
        const v = h('span', {class: 'value', id: 'health-' + label.replace(/\W+/g, '-').toLowerCase()});
        this.health.append(h('div', {class: 'stat'}, h('span', {class: 'label', text: label}), v));
        return v;
      });
    }
    items.forEach(([, value], i) => setText(this.healthCells[i], value));
    if (this.walFailed()) {
      this.banner.hidden = false;
      this.banner.className = 'banner wal-failed';
      setText(this.banner, 'The write-ahead log has failed: sundiald refuses every write until it ' +
                           'is restarted. Reads go on. See the server log.');
    } else if (this.banner.classList.contains('wal-failed')) {
      this.banner.hidden = true;
    }
  }
}

performance.mark('sundial:script-start');

// Uncaught errors are kept where the browser tests read them.
window.sundialErrors = window.sundialErrors || [];
window.addEventListener('error', (e) => window.sundialErrors.push(String(e.message)));
window.addEventListener('unhandledrejection', (e) => window.sundialErrors.push(String(e.reason)));
const app = new App();
window.sundial = app;
app.start();
