// What both pages share: the API client (cookie session, CSRF token kept
// in memory), sign-in, and a DOM builder that only ever sets text.

export const state = { user: null, tenant: null, roles: [], csrf: null };

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export async function api(method, path, body, opts = {}) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && state.csrf) headers['X-CSRF-Token'] = state.csrf;
  const r = await fetch(path, {
    method, headers, credentials: 'same-origin', cache: 'no-store',
    body: body !== undefined ? JSON.stringify(body) : undefined,
    signal: opts.signal,
  });
  if (opts.raw) return r;
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  return { status: r.status, ok: r.ok, data };
}

export function errorText(res) {
  const e = res && res.data && res.data.error;
  return e ? `${e.message} (${e.code})` : `HTTP ${res ? res.status : '?'}`;
}

function adopt(d) {
  state.user = d.user;
  state.tenant = d.tenant;
  state.roles = d.roles || [];
  state.csrf = d.csrf_token || null;
}

// Who the caller is: a cookie session, or a development install's user.
export async function loadSession() {
  const res = await api('GET', '/auth/session');
  if (res.status === 200) { adopt(res.data); return true; }
  return false;
}

export async function login(key) {
  const res = await api('POST', '/auth/login', { api_key: key });
  if (res.status === 200) adopt(res.data);
  return res;
}

export async function logout() {
  await api('POST', '/auth/logout');
  state.user = null;
  state.csrf = null;
}

export function isAdmin() {
  return state.roles.includes('admin') || state.roles.includes('tenant-admin');
}

// The sign-in form; resolves once signed in.
export function signIn(root, title) {
  return new Promise((resolve) => {
    const key = h('input', { id: 'api-key', type: 'password', autocomplete: 'off',
      required: true, 'aria-label': 'API key', placeholder: 'mcpb_…' });
    const msg = h('p', { class: 'error', role: 'alert' });
    const form = h('form', { class: 'signin', onsubmit: async (ev) => {
      ev.preventDefault();
      msg.textContent = '';
      const res = await login(key.value.trim());
      if (res.status === 200) { key.value = ''; resolve(); }
      else msg.textContent = res.status === 404 ?
        'This broker has no API keys to sign in with.' : errorText(res);
    } },
    h('h1', { text: title }),
    h('label', { for: 'api-key', text: 'API key' }), key,
    h('button', { type: 'submit', text: 'Sign in' }),
    h('p', { class: 'hint', text: 'A key comes from `mcpbrokerctl user add NAME`.' }),
    msg);
    root.replaceChildren(form);
    key.focus();
  });
}
