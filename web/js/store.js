// What the page knows about the server, kept from the StatsTick events (one a second, per-queue
// figures included: Subscribe{queue_stats}) and from ListQueues at each (re)connect.
//
// History: the last 15 minutes of ticks, one slot per tick in a ring shared by every queue (the
// ticks carry every queue at once). A queue's ring (8 series of Float32, 29 KB) is allocated
// the first time it has anything to show, so idle queues cost nothing; slots from before a queue
// had a ring are NaN, which the charts leave blank.

import {counts, settings, total} from './format.js';

export const HISTORY = 900;
export const DEPTH_SERIES = ['pending', 'running', 'invisible', 'errored'];
export const RATE_SERIES = ['enqueued', 'dequeued', 'completed', 'failed'];
const SERIES = DEPTH_SERIES.length + RATE_SERIES.length;
const RECENT = 6;  // ticks: the tables' rates are over the last 5 seconds
const TOTALS = ['enqueued', 'dequeued', 'completed', 'failed', 'lease_expired', 'canceled',
                'errored', 'redriven', 'dead_lettered'];

function queueFrom(info) {
  return {
    name: info.name,
    settings: settings(info.settings),
    counts: counts(info.counts),
    oldest: info.oldest_pending_age_ms || 0,
    memory: info.memory_bytes || 0,
    totals: null,  // from the first tick
    rates: {enqueued: 0, dequeued: 0, completed: 0, failed: 0},  // over the last tick (charts)
    shown: {enqueued: 0, dequeued: 0, completed: 0, failed: 0},  // over the last 5 s (tables)
    recent: [],  // {time, totals} of the last ticks, for `shown`
    ring: null,
  };
}

export class Store extends EventTarget {
  constructor() {
    super();
    this.queues = new Map();
    this.times = new Float64Array(HISTORY);  // server time of each slot (ms), 0: empty
    this.head = 0;                           // the next slot to write
    this.filled = 0;
    this.lastTickTime = 0;
    this.stats = null;
    this.health = {fsyncMeanUs: 0, walBytesPerSec: 0, fsyncsPerSec: 0};
    this.ticks = [];  // {time, received}: the last 120 ticks, for the lag figures
  }

  // ListQueues at (re)connect: the set of queues and their figures now.
  applyList(list) {
    const seen = new Set();
    for (const info of list) {
      seen.add(info.name);
      const q = this.queues.get(info.name);
      if (q) {
        Object.assign(q, {settings: settings(info.settings), counts: counts(info.counts),
                          oldest: info.oldest_pending_age_ms || 0, memory: info.memory_bytes || 0});
      } else {
        this.queues.set(info.name, queueFrom(info));
      }
    }
    for (const name of [...this.queues.keys()]) if (!seen.has(name)) this.queues.delete(name);
    this.dispatchEvent(new Event('change'));
  }

  // One queue's QueueInfo (GetQueue after an action): its figures before the next tick.
  applyQueue(info) {
    const q = this.queues.get(info.name);
    if (!q) this.queues.set(info.name, queueFrom(info));
    else Object.assign(q, {settings: settings(info.settings), counts: counts(info.counts),
                           oldest: info.oldest_pending_age_ms || 0, memory: info.memory_bytes || 0});
    this.dispatchEvent(new Event('change'));
  }

  applyStats(stats) {
    this.stats = stats;
    this.dispatchEvent(new Event('change'));
  }

  applyTick(tick) {
    const t = tick.time || Date.now();
    const dt = this.lastTickTime ? (t - this.lastTickTime) / 1000 : 0;
    this.lastTickTime = t;
    this.ticks.push({time: t, received: Date.now()});
    if (this.ticks.length > 120) this.ticks.shift();
    this.updateHealth(tick.stats || {}, dt);

    const slot = this.head;
    this.times[slot] = t;
    this.head = (this.head + 1) % HISTORY;
    this.filled = Math.min(HISTORY, this.filled + 1);

    const seen = new Set();
    for (const qs of tick.queues || []) {
      const info = qs.queue || {};
      seen.add(info.name);
      let q = this.queues.get(info.name);
      if (!q) {
        q = queueFrom(info);
        this.queues.set(info.name, q);
      } else {
        q.settings = settings(info.settings);
        q.counts = counts(info.counts);
        q.oldest = info.oldest_pending_age_ms || 0;
        q.memory = info.memory_bytes || 0;
      }
      const totals = {};
      for (const k of TOTALS) totals[k] = qs[k] || 0;
      for (const k of RATE_SERIES) {
        // A total that went down: the queue was deleted and created again (or the server
        // restarted). That interval has no rate.
        const d = q.totals && dt > 0 ? totals[k] - q.totals[k] : 0;
        q.rates[k] = d > 0 ? d / dt : 0;
      }
      q.totals = totals;
      q.recent.push({time: t, totals});
      if (q.recent.length > RECENT) q.recent.shift();
      const first = q.recent[0];
      const span = (t - first.time) / 1000;
      for (const k of RATE_SERIES) {
        const d = totals[k] - first.totals[k];
        q.shown[k] = span > 0 && d > 0 ? d / span : 0;
      }
      this.record(q, slot);
    }
    for (const name of [...this.queues.keys()]) if (!seen.has(name)) this.queues.delete(name);
    this.dispatchEvent(new CustomEvent('tick', {detail: {time: t}}));
  }

  record(q, slot) {
    const values = [...DEPTH_SERIES.map((s) => q.counts[s]), ...RATE_SERIES.map((s) => q.rates[s])];
    if (!q.ring) {
      if (values.every((v) => v === 0)) return;
      q.ring = new Float32Array(HISTORY * SERIES).fill(NaN);
    }
    for (let i = 0; i < SERIES; i++) q.ring[slot * SERIES + i] = values[i];
  }

  updateHealth(stats, dt) {
    const prev = this.stats;
    this.stats = stats;
    const syncs = stats.wal_fsyncs || 0;
    const mean = stats.wal_fsync_mean_us || 0;
    if (prev && dt > 0) {
      const ds = syncs - (prev.wal_fsyncs || 0);
      const spent = mean * syncs - (prev.wal_fsync_mean_us || 0) * (prev.wal_fsyncs || 0);
      this.health.fsyncMeanUs = ds > 0 ? spent / ds : 0;
      this.health.fsyncsPerSec = Math.max(0, ds / dt);
      this.health.walBytesPerSec = Math.max(0, ((stats.wal_bytes || 0) - (prev.wal_bytes || 0)) / dt);
    } else {
      this.health.fsyncMeanUs = mean;
    }
  }

  // The last `n` values of a series of queue `q`, oldest first, with their times.
  series(q, name, n = HISTORY) {
    const idx = DEPTH_SERIES.includes(name) ? DEPTH_SERIES.indexOf(name)
                                            : DEPTH_SERIES.length + RATE_SERIES.indexOf(name);
    n = Math.min(n, this.filled);
    const values = new Float64Array(n);
    const times = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const slot = (this.head - n + i + HISTORY) % HISTORY;
      times[i] = this.times[slot];
      values[i] = q.ring ? q.ring[slot * SERIES + idx] : 0;
    }
    return {times, values};
  }

  totalMessages() {
    let t = 0;
    for (const q of this.queues.values()) t += total(q.counts);
    return t;
  }
}
