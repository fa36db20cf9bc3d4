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
    // Admins get state, restarts and who may use each tool; a tenant-admin
    // sees what /api/v1/tools shows them.
    const full = state.roles.includes('admin');
    const res = await api('GET', full ? '/api/v1/admin/servers' : '/api/v1/tools');
    if (res.status !== 200) { sec.append(h('p', { class: 'error', text: errorText(res) })); return; }
    const body = h('tbody');
    const who = (t) => {
      const parts = (t.roles || []).map((r) => r.action === 'confirm' ? `${r.role} (confirm)` : r.role);
      if (t.everyone && t.everyone !== 'deny') parts.unshift(`everyone${t.everyone === 'confirm' ? ' (confirm)' : ''}`);
      const other = (t.other_rules || []).map((o) => `${o.action} ${o.subject} ${o.name}${o.tenant ? ` tenant ${o.tenant}` : ""} (line ${o.line})`);
      return h('td', { class: 'roles' }, parts.length ? parts.join(', ') : h('span', { class: 'note', text: 'no role' }),
        other.length ? h('div', { class: 'note', text: `also: ${other.join('; ')}` }) : null);
    };
    for (const s of res.data.servers) {
      const tools = full ? h('table', { class: 'tools' }, h('tbody', {}, ...s.tools.map((t) => h('tr',
        { 'data-tool': t.name },
        h('td', {}, h('code', { text: t.name }), t.withheld ? h('span', { class: 'error', text: ' withheld' }) : null),
        h('td', { class: 'note', text: (t.description || '').slice(0, 160) }), who(t)))))
        : s.tools.map((t) => t.name).join(', ');
      body.append(h('tr', { 'data-server': s.server }, h('td', { text: s.server }),
        h('td', { class: `state-${s.state}`, text: s.state }), h('td', { text: s.error || '' }),
        full ? h('td', { class: 'restarts', text: String(s.restarts) }) : null,
        h('td', {}, tools)));
    }
    const cols = full ? ['Server', 'State', 'Last error', 'Restarts', 'Tools and who may use them']
      : ['Server', 'State', 'Last error', 'Tools'];
    sec.append(h('table', { id: 'servers' }, h('thead', {}, h('tr', {},
      ...cols.map((t) => h('th', { text: t })))), body));
    if (full) sec.append(h('p', { class: 'note', text: 'Roles are those the policy rules name, each ' +
      'evaluated alone (no user, no tenant, before argument conditions); rules naming a user or a ' +
      'tenant are listed as they are.' }));
  },

  async pending(sec) {
    const info = h('p', { class: 'note', role: 'status' });
    const list = h('div', { id: 'pending' });
    const text = (v) => v === undefined ? '(absent)' : typeof v === 'string' ? v : JSON.stringify(v, null, 2);
    const load = async () => {
      const res = await api('GET', '/api/v1/admin/tools/pending');
      if (res.status !== 200) { info.textContent = errorText(res); list.replaceChildren(); return; }
      const items = res.data.pending;
      info.textContent = items.length ? `${items.length} tool definition change(s) await approval.` :
        'No tool definition changes are pending.';
      list.replaceChildren(...items.map((p) => {
        const msg = h('p', { class: 'error', role: 'alert' });
        const members = p.changed && p.changed.length ? p.changed : Object.keys({ ...p.old, ...p.new });
        return h('article', { class: 'pending', 'data-tool': `${p.server}.${p.tool}` },
          h('h3', {}, h('code', { text: `${p.server}.${p.tool}` }),
            h('span', { class: 'note', text: ` ${p.withheld ? 'withheld' : 'still offered'} since ` +
              `${new Date(p.pending_since).toISOString().replace('T', ' ').slice(0, 19)}` })),
          h('table', { class: 'diff' }, h('thead', {}, h('tr', {}, ...['Member', 'Approved', 'New']
            .map((t) => h('th', { text: t })))),
          h('tbody', {}, ...members.map((m) => h('tr', {}, h('td', { text: m }),
            h('td', {}, h('pre', { class: 'old', text: text(p.old && p.old[m]) })),
            h('td', {}, h('pre', { class: 'new', text: text(p.new && p.new[m]) })))))),
          h('button', { type: 'button', class: 'approve', text: 'Approve', onclick: async () => {
            const r = await api('POST', '/api/v1/admin/tools/approve',
              { server: p.server, tool: p.tool, sha256: p.pending_sha256 });
            if (r.status === 200) await load();
            else msg.textContent = errorText(r);
          } }), msg);
      }));
    };
    sec.append(info, list);
    await load();
  },

  async users(sec) {
    const admin = state.roles.includes('admin');
    const info = h('p', { class: 'note', role: 'status' });
    const keyBox = h('div', { id: 'key-once', class: 'key-once', hidden: true });
    const body = h('tbody');
    const showKey = (title, name, key) => {
      const code = h('code', { id: 'key-value', text: key });
      const copied = h('span', { class: 'note', role: 'status' });
      keyBox.replaceChildren(h('h3', { text: `${title}: ${name}` }),
        h('p', { class: 'warn', text: 'Copy this key now: it is shown once and cannot be shown again. ' +
          'Anyone holding it acts as this user.' }),
        code,
        h('button', { type: 'button', id: 'copy-key', text: 'Copy', onclick: async () => {
          try { await navigator.clipboard.writeText(key); copied.textContent = ' Copied.'; }
          catch (e) { copied.textContent = ' Select the key and copy it by hand.'; }
        } }),
        h('button', { type: 'button', id: 'dismiss-key', text: 'Done', onclick: () => {
          keyBox.replaceChildren(); keyBox.hidden = true;
        } }), copied);
      keyBox.hidden = false;
    };
    const load = async () => {
      const res = await api('GET', '/api/v1/admin/users');
      if (res.status !== 200) { info.textContent = errorText(res); return; }
      info.textContent = `${res.data.users.length} users${admin ? '' : ` in tenant ${state.tenant}`}`;
      body.replaceChildren(...res.data.users.map((u) => {
        const actions = h('td', { class: 'actions' });
        const msg = h('span', { class: 'error', role: 'alert' });
        const normal = () => actions.replaceChildren(
          h('button', { type: 'button', class: 'rotate', text: 'Rotate key', onclick: async () => {
            const r = await api('POST', `/api/v1/admin/users/${u.name}/key`);
            if (r.status === 200) showKey('New key', u.name, r.data.key);
            else msg.textContent = errorText(r);
          } }),
          u.name === state.user ? null : h('button', { type: 'button', class: 'delete', text: 'Delete',
            onclick: () => actions.replaceChildren(
              h('span', { text: `Delete ${u.name} and their conversations? ` }),
              h('button', { type: 'button', class: 'confirm-delete danger', text: 'Delete', onclick: async () => {
                const r = await api('DELETE', `/api/v1/admin/users/${u.name}`);
                if (r.status === 200) await load();
                else { normal(); msg.textContent = errorText(r); }
              } }),
              h('button', { type: 'button', class: 'cancel', text: 'Cancel', onclick: normal })) }),
          msg);
        normal();
        return h('tr', { 'data-user': u.name }, h('td', { text: u.name }), h('td', { text: u.tenant }),
          h('td', { text: u.roles }), actions);
      }));
    };
    const name = h('input', { id: 'u-name', 'aria-label': 'Name', placeholder: 'name', required: true,
      pattern: '[A-Za-z0-9._@\\-]{1,64}' });
    const tenant = admin ? h('input', { id: 'u-tenant', 'aria-label': 'Tenant', placeholder: 'tenant (default)' }) : null;
    const roles = h('input', { id: 'u-roles', 'aria-label': 'Roles', placeholder: 'roles, comma-separated' });
    const formMsg = h('p', { class: 'error', role: 'alert' });
    const form = h('form', { class: 'filters', id: 'user-add', onsubmit: async (ev) => {
      ev.preventDefault();
      formMsg.textContent = '';
      const req = { name: name.value.trim(),
        roles: roles.value.split(',').map((r) => r.trim()).filter(Boolean) };
      if (tenant && tenant.value.trim()) req.tenant = tenant.value.trim();
      const r = await api('POST', '/api/v1/admin/users', req);
      if (r.status !== 200) { formMsg.textContent = errorText(r); return; }
      name.value = ''; roles.value = '';
      if (tenant) tenant.value = '';
      showKey('Key for new user', r.data.name, r.data.key);
      await load();
    } }, name, tenant, roles, h('button', { type: 'submit', text: 'Create user' }));
    sec.append(h('h2', { text: 'New user' }), form, formMsg,
      admin ? null : h('p', { class: 'note', text: `Users are created in tenant ${state.tenant}; ` +
        'the admin and tenant-admin roles are granted by an admin.' }),
      keyBox, info,
      h('table', { id: 'users' }, h('thead', {}, h('tr', {}, ...['Name', 'Tenant', 'Roles', '']
        .map((t) => h('th', { text: t })))), body));
    await load();
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
  const names = [['servers', 'Servers'], ['pending', 'Pending changes'], ['users', 'Users'],
    ['audit', 'Audit'], ['usage', 'Usage']].filter(([n]) => n !== 'pending' || state.roles.includes('admin'));
  for (const [name, label] of names) {
    tabs.append(h('button', { type: 'button', role: 'tab', id: `tab-${name}`, 'data-view': name,
      text: label, onclick: () => show(name) }));
  }
  root.replaceChildren(header, tabs, sec);
  const want = location.hash.slice(1);
  await show(names.some(([n]) => n === want) ? want : 'servers');
}

start();
