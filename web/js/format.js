// Number, time and byte formatting, and the defaults the server leaves out of its JSON
// (docs/protocol.md, "The JSON form": a field equal to its schema default is absent).

// `waiting`: enqueued with depends_on, not dequeueable until its dependencies complete.
export const STATES = ['waiting', 'invisible', 'pending', 'running', 'completed', 'canceled', 'errored'];

const intFormat = new Intl.NumberFormat('en-US');
const rateFormat = new Intl.NumberFormat('en-US', {maximumFractionDigits: 1});

export function int(n) {
  return intFormat.format(Math.round(n || 0));
}

export function rate(n) {
  if (!n) return '0';
  if (n >= 100) return int(n);
  return rateFormat.format(n);
}

export function bytes(n) {
  n = n || 0;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  return (u === 0 ? String(n) : n.toFixed(n >= 100 ? 0 : 1)) + ' ' + units[u];
}

// A duration in ms as "850 ms", "12.3 s", "4m 05s", "3h 12m", "2d 4h".
export function duration(ms) {
  ms = Math.max(0, ms || 0);
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  const h = Math.floor(m / 60);
  if (h < 48) return h + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
}

// ms since the epoch as a local "2026-01-01 12:00:00.123".
export function time(ms) {
  if (!ms) return '—';
  const d = new Date(ms);
  const p = (x, n = 2) => String(x).padStart(n, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
      `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

export function clock(ms) {
  const d = new Date(ms);
  const p = (x) => String(x).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function counts(c) {
  c = c || {};
  const out = {blocked: c.blocked || 0};
  for (const s of STATES) out[s] = c[s] || 0;
  return out;
}

export function total(c) {
  let t = 0;
  for (const s of STATES) t += c[s] || 0;
  return t;
}

// A queue's settings as the server describes them: it sends every setting (the defaults live in
// one place, the engine's; docs/semantics.md, "Queues"), so nothing is filled in here.
export function settings(s) {
  s = s || {};
  return {
    type: s.type || 'simple',
    exclusivity_key: s.exclusivity_key || '',
    lease_ms: s.lease_ms,
    invisibility_ms: s.invisibility_ms,
    max_attempts: s.max_attempts,
    retry_backoff_ms: s.retry_backoff_ms,
    retry_backoff_max_ms: s.retry_backoff_max_ms,
    dead_letter_queue: s.dead_letter_queue || '',
    retention_ms: s.retention_ms,
    max_depth: s.max_depth,
    enqueue_paused: !!s.enqueue_paused,
    dequeue_paused: !!s.dequeue_paused,
    flow_key: s.flow_key || '',                // flow control: the key whose values are limited
    key_concurrency: s.key_concurrency || 0,   // running messages per value; 0: no limit
    rate_per_s: s.rate_per_s || 0,             // the queue's token bucket; 0: no rate
    burst: s.burst || 1,
    key_rate_per_s: s.key_rate_per_s || 0,     // each flow-key value's bucket; 0: no rate
    key_burst: s.key_burst || 1,
    fairness: s.fairness || 'none',            // weighted: turns among the flow-key values
    overdue_first_ms: s.overdue_first_ms || 0,
  };
}

// A message (Message or MessageSummary) with its defaults.
export function message(m) {
  m = m || {};
  return {
    queue: m.queue || '',
    id: m.id || '',
    priority: m.priority || 0,
    payload: m.payload || [],
    metadata: m.metadata || [],
    state: m.state || 'invisible',
    attempts: m.attempts || 0,
    max_attempts: m.max_attempts || 0,
    visible_at: m.visible_at || 0,
    lease_token: m.lease_token || 0,
    lease_expires_at: m.lease_expires_at || 0,
    expires_at: m.expires_at || 0,  // its ttl runs out then; 0: no ttl
    version: m.version || 0,
    enqueued_at: m.enqueued_at || 0,
    updated_at: m.updated_at || 0,
    last_error: m.last_error || '',
    result: m.result || [],  // completed: the bytes its complete carried
    // With include_dependency_results: one outcome per dependency ({id: "queue/id", state, …}).
    dependency_results: (m.dependency_results || []).map((d) => ({
      id: d.id || '',
      state: d.state || 'invisible',
      error: d.error || null,
      last_error: d.last_error || '',
    })),
  };
}

// "tenant=acme region=eu" or 'k="a b"' -> [{key, value}]; throws Error on bad input.
export function parseFilter(text) {
  const pairs = [];
  const re = /\s*([^\s=]+)=("([^"]*)"|(\S*))/y;
  let rest = text.trim();
  let at = 0;
  while (at < rest.length) {
    re.lastIndex = at;
    const m = re.exec(rest);
    if (!m) throw new Error('filter: write key=value pairs separated by spaces (key="a b" for spaces)');
    pairs.push({key: m[1], value: m[3] !== undefined ? m[3] : m[4]});
    at = re.lastIndex;
    while (at < rest.length && rest[at] === ' ') at++;
  }
  if (pairs.length > 4) throw new Error('filter: at most 4 pairs');
  const keys = new Set(pairs.map((p) => p.key));
  if (keys.size !== pairs.length) throw new Error('filter: each key once');
  return pairs;
}

export function filterText(pairs) {
  return (pairs || []).map((p) => `${p.key}=${/[\s"]/.test(p.value) ? `"${p.value}"` : p.value}`)
      .join(' ');
}
