// The page's one WebSocket to /ws, in the protocol's JSON form (docs/protocol.md): requests
// matched to replies by request_id, events dispatched by type, and reconnection with
// exponential backoff (0.5 s doubling to 10 s, ±20% jitter) that the header shows.
//
// Events: 'status' {state: 'connecting'|'open'|'waiting', attempt, retryAt},
//         'open' (after every (re)connect), 'MessageEvent', 'StatsTick', 'SubscriptionClosed'.

export class RequestError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
    this.detail = message;
  }
}

export class Connection extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.ws = null;
    this.nextId = 1;
    this.pending = new Map();  // request_id -> {resolve, reject, timer}
    this.attempt = 0;
    this.state = 'connecting';
    this.retryAt = 0;
    this.opens = 0;
  }

  start() {
    this.connect();
  }

  connect() {
    this.setState('connecting');
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (e) {
      return this.scheduleRetry();
    }
    this.ws = ws;
    ws.onopen = () => {
      this.attempt = 0;
      this.opens++;
      this.setState('open');
      this.dispatchEvent(new Event('open'));
    };
    ws.onmessage = (e) => this.onMessage(e.data);
    ws.onerror = () => {};  // a close follows
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      for (const [, p] of this.pending) {
        clearTimeout(p.timer);
        p.reject(new RequestError('UNAVAILABLE', 'the connection to sundiald was lost'));
      }
      this.pending.clear();
      this.scheduleRetry();
    };
  }

  scheduleRetry() {
    const base = Math.min(10000, 500 * 2 ** this.attempt);
    const delay = base * (0.8 + 0.4 * Math.random());
    this.attempt++;
    this.retryAt = Date.now() + delay;
    this.setState('waiting');
    setTimeout(() => this.connect(), delay);
  }

  setState(state) {
    this.state = state;
    this.dispatchEvent(new CustomEvent('status', {
      detail: {state, attempt: this.attempt, retryAt: this.retryAt},
    }));
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  // Sends one operation; resolves with {type, result} or rejects with a RequestError.
  request(opType, op = {}, {timeoutMs = 30000} = {}) {
    if (!this.open) {
      return Promise.reject(new RequestError('UNAVAILABLE', 'not connected to sundiald'));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new RequestError('UNAVAILABLE', `no reply to ${opType} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {resolve, reject, timer});
      this.ws.send(JSON.stringify({request_id: id, op_type: opType, op}));
    });
  }

  onMessage(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch (e) {
      console.warn('sundial: a message that is not JSON', e);
      return;
    }
    const body = msg.body || {};
    if (msg.body_type === 'Response') {
      const id = body.request_id || 0;
      const p = this.pending.get(id);
      if (!p) {
        if (body.error) console.warn('sundial: server error', body.error.code, body.error.message);
        return;
      }
      this.pending.delete(id);
      clearTimeout(p.timer);
      if (body.error) {
        p.reject(new RequestError(body.error.code || 'OK', body.error.message || ''));
      } else {
        p.resolve({type: body.result_type, result: body.result || {}});
      }
    } else if (msg.body_type === 'EventMessage') {
      this.dispatchEvent(new CustomEvent(body.event_type, {detail: body.event || {}}));
    }
  }
}
