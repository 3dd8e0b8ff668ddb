// The schedules page (#/schedules, #/schedules/QUEUE): every schedule (ListSchedules), or one
// queue's, with its timing, next and last fires, the counts of fires made, missed, skipped by
// the overlap policy and refused (with the last refusal's reason), and the actions pause,
// resume, run now and delete, each behind a confirmation. Schedules change by their own fires,
// which no event announces, so the page asks again every REFRESH_MS while it is shown.

import {confirmAction, readOnly} from './confirm.js';
import {clear, h, setText, toast} from './dom.js';
import {duration, int, time} from './format.js';

const REFRESH_MS = 2000;
const NUMERIC = new Set(['fires', 'missed', 'overlap_skips', 'failed']);
const COLUMNS = [['queue', 'Queue'], ['name', 'Name'], ['when', 'When'], ['status', 'Status'],
                 ['next', 'Next fire'], ['last', 'Last fire'], ['enqueued', 'Last enqueued'],
                 ['fires', 'Fires'], ['missed', 'Missed'], ['overlap_skips', 'Overlap skips'],
                 ['failed', 'Failed']];

// "every 1m 30s" or "30 2 * * * (Europe/Paris)": how a schedule is timed.
export function timing(sc) {
  if (sc.every_ms) return `every ${duration(sc.every_ms)}`;
  return `${sc.cron} (${sc.tz || 'UTC'})`;
}

// "in 12s" / "3m ago": a time relative to now, for the fires' columns.
function relative(ms, now) {
  if (!ms) return '';
  const d = ms - now;
  return d >= 0 ? `in ${duration(d)}` : `${duration(-d)} ago`;
}

// A time cell: the local time to the second, and under it how far from now.
function showTime(cell, ms, now) {
  if (!cell.firstChild) cell.append(h('div', {class: 'at'}), h('div', {class: 'muted rel'}));
  setText(cell.firstChild, ms ? time(ms).slice(0, 19) : '—');
  setText(cell.lastChild, relative(ms, now));
}

function messageLink(queue, id) {
  return h('a', {href: `#/q/${encodeURIComponent(queue)}/m/${encodeURIComponent(id)}`, text: id});
}

export class SchedulesView {
  constructor(app, queue) {
    this.app = app;
    this.queue = queue || '';  // empty: every queue's
    this.list = [];
    this.rows = new Map();  // "queue/name" -> {row, cells, actions, ...}
    this.timer = 0;
    this.seq = 0;
    this.build();
  }

  build() {
    this.tbody = h('tbody', {id: 'schedule-rows'});
    this.error = h('p', {class: 'error', id: 'schedules-error', hidden: true});
    this.none = h('p', {class: 'empty', id: 'schedules-none', hidden: true,
                        text: this.queue ? `Queue “${this.queue}” has no schedule.` : 'No schedules.'});
    const head = h('tr', null, COLUMNS.map(([k, label]) => h('th', {class: NUMERIC.has(k) ? 'num' : 'text', text: label})));
    if (!readOnly()) head.append(h('th', {class: 'text', text: 'Actions'}));
    this.el = h('section', {id: 'schedules-view', dataset: {queue: this.queue}},
                h('div', {class: 'toolbar'},
                  h('h1', {text: this.queue ? `Schedules of ${this.queue}` : 'Schedules'}),
                  this.queue ? h('a', {href: '#/schedules', text: 'every queue'}) : null),
                h('p', {class: 'muted', text: 'A fire at time T enqueues the message name@T ' +
                        '(docs/semantics.md, “Schedules”); times are this browser’s.'}),
                this.error,
                h('div', {class: 'table-wrap'},
                  h('table', {class: 'schedules'}, h('thead', null, head), this.tbody)),
                this.none);
  }

  mount(container) {
    container.append(this.el);
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
      const {result} = await this.app.conn.request('ListSchedules', this.queue ? {queue: this.queue} : {});
      if (seq !== this.seq) return;
      this.list = result.schedules || [];
      this.error.hidden = true;
    } catch (e) {
      if (seq !== this.seq) return;
      this.error.hidden = false;
      setText(this.error, `Could not list the schedules: ${e.message}`);
    }
    this.render();
    this.el.dataset.loaded = String(seq);
    this.app.rendered('schedules');
  }

  // Rows are kept by schedule and their cells updated in place: a refresh never replaces an
  // element under the pointer (or under a test's click).
  render() {
    const now = Date.now();
    this.none.hidden = this.list.length > 0;
    const seen = new Set();
    let before = this.tbody.firstChild;
    for (const sc of this.list) {
      const key = `${sc.queue}/${sc.name}`;
      seen.add(key);
      let r = this.rows.get(key);
      if (!r) {
        r = this.buildRow(sc, key);
        this.rows.set(key, r);
      }
      if (r.row !== before) this.tbody.insertBefore(r.row, before);
      else before = before.nextSibling;
      this.fillRow(r, sc, now);
    }
    for (const [key, r] of this.rows) {
      if (seen.has(key)) continue;
      r.row.remove();
      this.rows.delete(key);
    }
  }

  buildRow(sc, key) {
    const cells = {};
    const row = h('tr', {dataset: {schedule: key}});
    for (const [k] of COLUMNS) {
      cells[k] = h('td', {class: NUMERIC.has(k) ? 'num' : '', dataset: {key: k}});
      row.append(cells[k]);
    }
    cells.queue.append(h('a', {href: `#/q/${encodeURIComponent(sc.queue)}`, text: sc.queue}));
    setText(cells.name, sc.name);
    const actions = readOnly() ? null : h('td', {class: 'text'});
    if (actions) row.append(actions);
    return {row, cells, actions, paused: null, enqueued: null};
  }

  fillRow(r, sc, now) {
    const c = r.cells;
    r.row.classList.toggle('paused', !!sc.paused);
    r.row.classList.toggle('has-errors', !!sc.last_error);
    setText(c.when, timing(sc));
    setText(c.status, sc.paused ? 'paused' : 'active');
    showTime(c.next, sc.next_fire_at, now);
    showTime(c.last, sc.last_fire_at, now);
    const enqueued = sc.last_enqueued_at ? `${sc.name}@${sc.last_enqueued_at}` : '';
    if (enqueued !== r.enqueued) {
      r.enqueued = enqueued;
      clear(c.enqueued);
      c.enqueued.append(enqueued ? messageLink(sc.queue, enqueued) : '—');
    }
    for (const k of ['fires', 'missed', 'overlap_skips', 'failed']) setText(c[k], int(sc[k] || 0));
    c.failed.title = sc.last_error ? `last refused fire: ${sc.last_error}` : '';
    if (r.actions && r.paused !== !!sc.paused) {
      r.paused = !!sc.paused;
      clear(r.actions);
      r.actions.append(this.actionsFor(sc));
    }
    r.sc = sc;
  }

  // The buttons act on the row's latest state (fillRow keeps it in r.sc).
  actionsFor(sc) {
    const key = `${sc.queue}/${sc.name}`;
    const latest = () => this.rows.get(key)?.sc || sc;
    const b = (act, text, onclick, cls = '') =>
      h('button', {type: 'button', class: cls, dataset: {act}, text, onclick});
    return h('span', {class: 'row-actions'},
             sc.paused ? b('resume', 'Resume', () => this.pauseOrResume(latest(), false))
                       : b('pause', 'Pause', () => this.pauseOrResume(latest(), true)),
             b('trigger', 'Run now', () => this.trigger(latest())),
             b('delete', 'Delete…', () => this.remove(latest()), 'danger-outline'));
  }

  async act(label, opType, sc, describe) {
    try {
      const {result} = await this.app.conn.request(opType, {queue: sc.queue, name: sc.name});
      toast(describe(result));
    } catch (e) {
      toast(`${label} failed: ${e.message}`, 'error');
    }
    await this.load();
  }

  async pauseOrResume(sc, pausing) {
    const verb = pausing ? 'Pause' : 'Resume';
    const body = pausing ?
        [`“${sc.name}” of ${sc.queue} will make no fire until it is resumed; the fires due meanwhile are not made.`] :
        [`“${sc.name}” of ${sc.queue} fires again from now: ${timing(sc)}.`];
    if (!await confirmAction({title: `${verb} schedule ${sc.name}?`, body, button: verb, danger: pausing})) return;
    await this.act(verb, pausing ? 'PauseSchedule' : 'ResumeSchedule', sc,
                   () => `Schedule ${sc.name} of ${sc.queue} ${pausing ? 'paused' : 'resumed'}`);
  }

  async trigger(sc) {
    if (!await confirmAction({
      title: `Run schedule ${sc.name} now?`,
      body: [`One fire now: enqueues ${sc.name}@<now> into ${sc.queue}, whatever its overlap ` +
             `policy${sc.paused ? ' and although it is paused' : ''}. Its regular fires go on.`],
      button: 'Run now', danger: false})) return;
    await this.act('Run now', 'TriggerSchedule', sc,
                   (r) => r.duplicate ? `A fire at ${time(r.fire_at)} existed already: ${r.id}` : `Fired: ${r.id}`);
  }

  async remove(sc) {
    if (!await confirmAction({
      title: `Delete schedule ${sc.name} of ${sc.queue}?`,
      body: [`It will make no more fires. The ${int(sc.fires || 0)} messages it made stay in ${sc.queue}.`],
      button: 'Delete schedule', typeToConfirm: sc.name})) return;
    await this.act('Delete', 'DeleteSchedule', sc, () => `Deleted schedule ${sc.name} of ${sc.queue}`);
  }
}
