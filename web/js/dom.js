// A few DOM helpers. Text always goes in through textContent, never innerHTML: message ids,
// metadata and payloads are data, not markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, v);
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const SVG = 'http://www.w3.org/2000/svg';
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v);
  }
  for (const c of children) if (c) el.append(c);
  return el;
}

// Sets textContent only when it changed (1,000 rows a second: skip the no-op writes).
export function setText(el, text) {
  text = String(text);
  if (el.textContent !== text) el.textContent = text;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
}

export function toast(text, kind = 'ok') {
  const box = document.getElementById('toasts');
  const t = h('div', {class: 'toast ' + kind, role: kind === 'error' ? 'alert' : 'status', text});
  box.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 10000 : 5000);
  return t;
}
