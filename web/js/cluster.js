// The cluster panel (docs/dashboard.md, "Cluster"): what this node knows of its cluster, from
// the protocol's `Cluster` request (docs/protocol.md) over the page's WebSocket, asked again
// every two seconds and after every reconnect: the cluster's name, its epoch and replication
// mode, the primary and the published synchronous standby, and each member with its role,
// addresses, epoch, log positions and lag. The server refreshes that view every HA round
// (--ha-loop-ms) and this node's own log positions at each request.
//
// It also says whether this node takes writes: only a primary (or a node outside a cluster)
// does. On a standby, or while no primary is known, the page is read-only (js/confirm.js's
// readOnly()) and a note names the primary and links to its dashboard; the server refuses a
// mutation there anyway (NOT_PRIMARY), the note only says so before the click.

import {h, setText} from './dom.js';
import {duration, int} from './format.js';

const POLL_MS = 2000;

// The JSON form leaves out fields equal to their default (docs/protocol.md).
function member(m) {
  return {
    node: m.node || '',
    role: m.role || 'standalone',
    addr: m.addr || '',
    http_addr: m.http_addr || '',
    epoch: m.epoch || 0,
    end_lsn: m.end_lsn || 0,
    flushed_lsn: m.flushed_lsn || 0,
    lag_records: m.lag_records || 0,
    lag_ms: m.lag_ms || 0,
    sync: !!m.sync,
  };
}

// The dashboard of a node at `httpAddr` (host:port): this page's scheme; a wildcard address
// (a node bound to every interface without --advertise-host) takes this page's host.
export function dashboardUrl(httpAddr) {
  if (!httpAddr) return '';
  const colon = httpAddr.lastIndexOf(':');
  let host = httpAddr.slice(0, colon);
  const port = httpAddr.slice(colon + 1);
  if (host === '0.0.0.0' || host === '[::]' || host === '::' || host === '') host = location.hostname;
  return `${location.protocol}//${host}:${port}/`;
}

export class ClusterPanel {
  constructor(app) {
    this.app = app;
    this.info = null;  // the last Cluster result, fields defaulted
    this.el = document.getElementById('cluster');
    this.note = document.getElementById('standby-note');
    this.badge = document.getElementById('role');
    this.build();
  }

  start() {
    this.app.conn.addEventListener('open', () => this.refresh());
    setInterval(() => this.refresh(), POLL_MS);
  }

  build() {
    this.summary = h('p', {class: 'cluster-summary', id: 'cluster-summary'});
    this.tbody = h('tbody', {id: 'cluster-members'});
    const th = (text, cls = 'num') => h('th', {class: cls, text});
    this.el.append(
        h('h2', {text: 'Cluster'}), this.summary,
        h('div', {class: 'table-wrap'},
          h('table', {class: 'members', id: 'cluster-table'},
            h('thead', null, h('tr', null, th('Node', 'text'), th('Role', 'text'),
                                th('Address', 'text'), th('Epoch'), th('End LSN'),
                                th('Flushed LSN'), th('Lag (records)'), th('Lag'),
                                th('Synchronous', 'text'))),
            this.tbody)));
  }

  async refresh() {
    const conn = this.app.conn;
    if (!conn.open || this.busy) return;
    this.busy = true;
    try {
      const reply = await conn.request('Cluster', {}, {timeoutMs: 10000});
      this.apply(reply.result);
    } catch (e) {
      // The connection went (the header says so) or the server is older: try again later.
    } finally {
      this.busy = false;
    }
  }

  apply(r) {
    const info = {
      cluster: r.cluster || '',
      node: r.node || '',
      epoch: r.epoch || 0,
      primary: r.primary || '',
      primary_addr: r.primary_addr || '',
      sync_standby: r.sync_standby || '',
      replication: r.replication || '',
      members: (r.members || []).map(member),
    };
    this.info = info;
    const self = info.members.find((m) => m.node === info.node);
    const role = info.cluster ? (self ? self.role : 'unknown') : 'standalone';
    const primary = info.members.find((m) => m.node === info.primary && m.role === 'primary') ||
                    info.members.find((m) => m.node === info.primary);
    this.render(info, role, primary);
    this.app.setRole(role, primary ? dashboardUrl(primary.http_addr) : '');
  }

  render(info, role, primary) {
    const inCluster = !!info.cluster;
    this.el.hidden = !inCluster || !this.app.onOverview();
    this.el.dataset.role = role;
    this.badge.hidden = !inCluster;
    this.badge.dataset.role = role;
    this.badge.className = 'badge role ' + role;
    setText(this.badge, role === 'primary' ? `primary · epoch ${info.epoch}` :
                        role === 'standby' ? `standby · epoch ${info.epoch}` : 'no primary');
    this.renderNote(info, role, primary);
    if (!inCluster) return;

    const sync = info.sync_standby || 'none';
    setText(this.summary,
            `Cluster ${info.cluster} · epoch ${info.epoch} · replication ${info.replication || '—'} · ` +
            `primary ${info.primary || 'none known'} · synchronous standby ${sync} · ` +
            `this page: ${info.node}`);
    this.summary.classList.toggle('no-sync', !info.sync_standby);
    const rows = [...info.members].sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
    this.tbody.replaceChildren(...rows.map((m) => this.row(m, info)));
  }

  row(m, info) {
    const url = dashboardUrl(m.http_addr);
    const name = m.node === info.node ? h('span', null, m.node, h('span', {class: 'muted', text: ' (this page)'}))
                                      : (url ? h('a', {href: url, text: m.node}) : m.node);
    const isStandby = m.role === 'standby';
    return h('tr', {class: 'member ' + m.role, dataset: {node: m.node, role: m.role}},
             h('td', {class: 'text', dataset: {key: 'node'}}, name),
             h('td', {class: 'text', dataset: {key: 'role'}},
               h('span', {class: 'badge role ' + m.role, text: m.role})),
             h('td', {class: 'text', dataset: {key: 'addr'}}, m.addr),
             h('td', {class: 'num', dataset: {key: 'epoch'}, text: int(m.epoch)}),
             h('td', {class: 'num', dataset: {key: 'end_lsn'}, text: int(m.end_lsn)}),
             h('td', {class: 'num', dataset: {key: 'flushed_lsn'}, text: int(m.flushed_lsn)}),
             h('td', {class: 'num', dataset: {key: 'lag_records'},
                      text: isStandby ? int(m.lag_records) : '—'}),
             h('td', {class: 'num', dataset: {key: 'lag_ms'},
                      text: isStandby ? duration(m.lag_ms) : '—'}),
             h('td', {class: 'text', dataset: {key: 'sync'}, text: m.sync ? 'yes' : ''}));
  }

  renderNote(info, role, primary) {
    const readOnly = role === 'standby' || role === 'unknown';
    this.note.hidden = !readOnly;
    if (!readOnly) return;
    const parts = [];
    if (role === 'standby') {
      parts.push(`This node (${info.node}) is a standby: the dashboard is read-only here. `);
    } else {
      parts.push(`This node (${info.node}) knows no primary yet (an election is under way): ` +
                 'the dashboard is read-only until one is elected. ');
    }
    if (primary) {
      const url = dashboardUrl(primary.http_addr);
      parts.push('Changes go to the primary, ', h('strong', {id: 'standby-note-primary', text: primary.node}),
                 ` (${primary.addr})`);
      if (url) parts.push(': ', h('a', {href: url, id: 'standby-note-link', text: 'open its dashboard'}));
      parts.push('.');
    }
    this.note.replaceChildren(...parts);
  }

  // The route changed: the panel shows on the overview only.
  routed() {
    if (this.info) this.el.hidden = !this.info.cluster || !this.app.onOverview();
  }
}
