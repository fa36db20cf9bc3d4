// The console: for the admin and tenant-admin roles only.  Others get a
// "not allowed" page and nothing is fetched for them; the API enforces the
// roles anyway.
import { api, errorText, h, isAdmin, loadSession, logout, signIn, state } from './common.js';

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// A horizontal bar chart of [label, value] pairs, in plain SVG.
function barChart(title, pairs, unit) {
  const row = 22, left = 150, width = 520;
  const max = Math.max(1, ...pairs.map((p) => p[1]));
  const el = svg('svg', { class: 'chart', role: 'img', 'aria-label': title,
    viewBox: `0 0 ${left + width + 90} ${Math.max(1, pairs.length) * row + 8}`,
    width: left + width + 90 });
  pairs.forEach(([label, v], i) => {
    const y = i * row + 4;
    el.append(svg('text', { x: left - 6, y: y + 14, 'text-anchor': 'end' }, String(label).slice(0, 24)),
      svg('rect', { x: left, y, height: row - 6, width: Math.max(1, (v / max) * width) }),
      svg('text', { x: left + (v / max) * width + 6, y: y + 14 }, `${v}${unit || ''}`));
  });
  return h('figure', {}, h('figcaption', { text: title }), el);
}

function sum(rows, key, val) {
  const m = new Map();
  for (const r of rows) m.set(key(r), (m.get(key(r)) || 0) + val(r));
  return [...m.entries()];
}

const views = {
  async audit(sec) {
    const f = {};
    const field = (name, label, ph) => {
      f[name] = h('input', { id: `f-${name}`, name, 'aria-label': label, placeholder: ph || label });
      return f[name];
    };
    const table = h('tbody');
    const info = h('p', { class: 'note', role: 'status' });
    let rows = [];
    const load = async () => {
      const q = new URLSearchParams();
      for (const [k, el] of Object.entries(f)) if (el.value.trim()) q.set(k, el.value.trim());
      q.set('limit', '500');
      const res = await api('GET', `/api/v1/audit?${q}`);
      if (res.status !== 200) { info.textContent = errorText(res); return; }
      rows = res.data.rows;
      info.textContent = `${rows.length} rows${res.data.truncated ? ' (more: narrow the filters)' : ''}`;
      table.replaceChildren(...rows.slice().reverse().map((r) => h('tr', {},
        h('td', { text: new Date(r.ts).toISOString().replace('T', ' ').slice(0, 19) }),
        h('td', { text: r.kind }), h('td', { text: r.user || '' }), h('td', { text: r.tenant || '' }),
        h('td', { class: 'detail', text: JSON.stringify(r.detail) }))));
    };
    const exportRows = () => {
      const blob = new Blob([JSON.stringify(rows, null, 2)], { type: 'application/json' });
      const a = h('a', { href: URL.createObjectURL(blob), download: 'audit.json' });
      document.body.append(a);
      a.click();
      a.remove();
    };
    sec.append(h('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); load(); } },
      field('user', 'User'), field('tool', 'Tool', 'tool (server.tool)'),
      field('decision', 'Decision', 'allow / deny / confirm'), field('kind', 'Kind'),
      field('since', 'Since', 'since (1h, ISO date)'), field('until', 'Until'),
      h('button', { type: 'submit', text: 'Filter' }),
      h('button', { type: 'button', id: 'export', text: 'Export JSON', onclick: exportRows })),
    info, h('table', { id: 'audit' }, h('thead', {}, h('tr', {}, ...['Time', 'Kind', 'User', 'Tenant', 'Detail']
      .map((t) => h('th', { text: t })))), table));
    await load();
  },

  async usage(sec) {
    const res = await api('GET', '/api/v1/usage/tenant');
    if (res.status !== 200) { sec.append(h('p', { class: 'error', text: errorText(res) })); return; }
    const rows = res.data.rows;
    const tokens = (r) => r.input_tokens + r.output_tokens;
    sec.append(h('p', { text: `Tenant ${res.data.tenant}, ${res.data.from} to ${res.data.to}: ` +
      `${res.data.totals.calls} calls, ${res.data.totals.input_tokens + res.data.totals.output_tokens} tokens, ` +
      `$${res.data.totals.cost_usd}` }));
    if (!rows.length) { sec.append(h('p', { class: 'note', text: 'No usage in this period.' })); return; }
    sec.append(barChart('Tokens per day', sum(rows, (r) => r.day, tokens)),
      barChart('Tokens per model', sum(rows, (r) => `${r.provider}/${r.model}`, tokens)),
      barChart('Tokens per user', sum(rows, (r) => r.user === null ? '(deleted)' : r.user, tokens)),
      barChart('Calls per user', sum(rows, (r) => r.user === null ? '(deleted)' : r.user, (r) => r.calls)));
  },

  async servers(sec) {
    const res = await api('GET', '/api/v1/tools');
    if (res.status !== 200) { sec.append(h('p', { class: 'error', text: errorText(res) })); return; }
    const body = h('tbody');
    for (const s of res.data.servers) {
      body.append(h('tr', {}, h('td', { text: s.server }),
        h('td', { class: `state-${s.state}`, text: s.state }), h('td', { text: s.error || '' }),
        h('td', { text: s.tools.map((t) => t.name).join(', ') })));
    }
    sec.append(h('table', { id: 'servers' }, h('thead', {}, h('tr', {},
      ...['Server', 'State', 'Last error', 'Tools'].map((t) => h('th', { text: t })))), body));
  },
};

async function start() {
  const root = document.getElementById('app');
  if (!(await loadSession())) await signIn(root, 'Sign in to the console');
  root.classList.add('console');
  const header = h('header', { class: 'top' }, h('span', { class: 'brand', text: 'mcpbroker console' }),
    h('span', { class: 'who', text: `${state.user} · ${state.tenant}` }), h('a', { href: '/', text: 'Chat' }),
    state.csrf ? h('button', { type: 'button', text: 'Sign out',
      onclick: async () => { await logout(); location.reload(); } }) : null);
  if (!isAdmin()) {
    root.replaceChildren(header, h('div', { class: 'denied', id: 'denied' },
      h('h1', { text: 'Not allowed' }),
      h('p', { text: 'The console is for the admin and tenant-admin roles.' })));
    return;
  }
  const sec = h('section', { id: 'view', 'aria-live': 'polite' });
  const tabs = h('nav', { class: 'tabs', role: 'tablist', 'aria-label': 'Console' });
  const show = async (name) => {
    for (const b of tabs.children) b.setAttribute('aria-selected', String(b.dataset.view === name));
    sec.replaceChildren();
    await views[name](sec);
  };
  for (const [name, label] of [['servers', 'Servers'], ['audit', 'Audit'], ['usage', 'Usage']]) {
    tabs.append(h('button', { type: 'button', role: 'tab', id: `tab-${name}`, 'data-view': name,
      text: label, onclick: () => show(name) }));
  }
  root.replaceChildren(header, tabs, sec);
  await show(location.hash === '#audit' ? 'audit' : location.hash === '#usage' ? 'usage' : 'servers');
}

start();
