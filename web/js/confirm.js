// The confirmation every action goes through: it names what the action touches, with a count,
// and for deleting a queue asks for its name to be typed. Resolves true only on the button.

import {clear, h} from './dom.js';

// No action on screen: under --dashboard read-only, and on a node of a cluster that does not
// take writes (a standby, or no primary known: js/cluster.js sets data-role).
export function readOnly() {
  const d = document.documentElement.dataset;
  return d.mode === 'read-only' || d.role === 'standby' || d.role === 'unknown';
}

// {title, body: [lines], button, danger, typeToConfirm, extra: Node} -> Promise<boolean>
export function confirmAction({title, body, button, danger = true, typeToConfirm = '', extra}) {
  const dialog = document.getElementById('confirm');
  clear(dialog);
  const ok = h('button', {type: 'submit', class: danger ? 'danger' : 'primary', id: 'confirm-ok',
                          value: 'ok', text: button});
  const typed = typeToConfirm ?
      h('input', {id: 'confirm-typed', autocomplete: 'off', spellcheck: 'false',
                  placeholder: typeToConfirm, 'aria-label': `Type ${typeToConfirm} to confirm`}) :
      null;
  if (typed) {
    ok.disabled = true;
    typed.addEventListener('input', () => { ok.disabled = typed.value !== typeToConfirm; });
  }
  const form = h('form', {method: 'dialog'},
                 h('h2', {text: title}),
                 ...body.map((line) => h('p', {class: 'confirm-line', text: line})),
                 extra || null,
                 typed ? h('label', {class: 'typed'}, `Type “${typeToConfirm}” to confirm: `, typed)
                       : null,
                 h('div', {class: 'buttons'},
                   h('button', {type: 'submit', value: 'cancel', id: 'confirm-cancel',
                                text: 'Cancel'}),
                   ok));
  dialog.append(form);
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), {once: true});
    dialog.returnValue = '';
    dialog.showModal();
    (typed || (danger ? dialog.querySelector("#confirm-cancel") : ok)).focus();
  });
}
