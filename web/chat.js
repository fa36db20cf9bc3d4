// The chat page.  Model and tool text reaches the DOM in two ways only:
// as textContent, or as Markdown made HTML by marked (raw HTML in it
// escaped) and then cleaned by DOMPurify.
import { api, errorText, h, loadSession, logout, signIn, state } from './common.js';

const { marked, DOMPurify } = window;

function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;',
    '"': '&quot;', "'": '&#39;' }[c]));
}
// HTML written by the model is shown as text, not interpreted.
marked.use({ gfm: true, breaks: false,
  renderer: { html(token) { return escapeHtml(token.text || token.raw || ''); } } });
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

function renderMarkdown(el, text) {
  const html = DOMPurify.sanitize(marked.parse(text), { USE_PROFILE: { html: true },
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'img'] });
  el.innerHTML = html;
  for (const pre of el.querySelectorAll('pre')) {
    const btn = h('button', { type: 'button', class: 'copy', text: 'Copy',
      'aria-label': 'Copy code', onclick: () => copy(pre, btn) });
    pre.prepend(btn);
  }
}

async function copy(pre, btn) {
  const code = pre.querySelector('code') || pre;
  const text = code.textContent;
  try { await navigator.clipboard.writeText(text); }
  catch (e) {
    const ta = h('textarea', { class: 'offscreen', 'aria-hidden': 'true' });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    document.execCommand('copy');
    ta.remove();
  }
  btn.textContent = 'Copied';
  setTimeout(() => { btn.textContent = 'Copy'; }, 1500);
}

const ui = {};
const chat = { connected: false, conversation: null, busy: false, provider: null,
  model: '', toolset: '', providers: [], toolsets: [] };

function pretty(v) {
  return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
}

// ---- messages ----

function addMessage(role) {
  const body = h('div', { class: 'body' });
  const el = h('article', { class: `msg ${role}`, 'aria-label': role === 'user' ? 'You' : 'Assistant' },
    h('div', { class: 'who', text: role === 'user' ? 'You' : 'Assistant' }), body);
  ui.messages.append(el);
  el.scrollIntoView({ block: 'end' });
  return { el, body, text: null, textEl: null, cards: new Map(), pending: false };
}

function userMessage(text) {
  const m = addMessage('user');
  m.body.append(h('p', { class: 'plain', text }));
}

function appendText(m, piece) {
  if (!m.textEl) {
    m.textEl = h('div', { class: 'md' });
    m.text = '';
    m.body.append(m.textEl);
  }
  m.text += piece;
  if (!m.pending) {
    m.pending = true;
    requestAnimationFrame(() => {
      m.pending = false;
      renderMarkdown(m.textEl, m.text);
      ui.messages.scrollTop = ui.messages.scrollHeight;
    });
  }
}

function toolCard(m, d) {
  let c = m.cards.get(d.id);
  if (c) return c;
  const status = h('span', { class: 'status running', text: 'running' });
  const elapsed = h('span', { class: 'elapsed' });
  const input = h('pre', { class: 'io' });
  input.textContent = pretty(d.input);
  const output = h('pre', { class: 'io output' });
  const actions = h('div', { class: 'approval' });
  const name = d.server ? `${d.server}.${d.tool}` : d.tool;
  const el = h('details', { class: 'tool', 'data-id': d.id },
    h('summary', {}, h('span', { class: 'tool-name', text: name }), status, elapsed),
    h('div', { class: 'label', text: 'Input' }), input,
    h('div', { class: 'label', text: 'Output' }), output);
  m.textEl = null;     // text after a call starts a new block
  m.body.append(el, actions);
  const start = performance.now();
  const timer = setInterval(() => {
    elapsed.textContent = `${((performance.now() - start) / 1000).toFixed(1)} s`;
  }, 100);
  c = { el, status, elapsed, output, actions, timer };
  m.cards.set(d.id, c);
  return c;
}

function finishCard(c, ok, text, ms) {
  clearInterval(c.timer);
  c.status.textContent = ok ? 'done' : 'failed';
  c.status.className = `status ${ok ? 'done' : 'failed'}`;
  if (ms !== undefined) c.elapsed.textContent = `${(ms / 1000).toFixed(2)} s`;
  c.output.textContent = text || '';
  c.actions.replaceChildren();
}

function approval(m, d) {
  const c = toolCard(m, d);
  c.status.textContent = 'needs approval';
  c.status.className = 'status waiting';
  c.el.open = true;
  const args = h('pre', { class: 'io' });
  args.textContent = pretty(d.input);
  const answer = async (approve) => {
    for (const b of c.actions.querySelectorAll('button')) b.disabled = true;
    const res = await api('POST', '/llmchat/approve', approve ?
      { id: d.id, approve: true, input: d.input } : { id: d.id, approve: false });
    if (!res.ok) c.actions.append(h('p', { class: 'error', text: errorText(res) }));
    else if (c.status.textContent === 'needs approval') {
      c.status.textContent = approve ? 'running' : 'declined';
      c.status.className = `status ${approve ? 'running' : 'failed'}`;
      c.actions.replaceChildren();
    }
  };
  c.actions.replaceChildren(
    h('p', { text: `Run ${d.server}.${d.tool} with exactly these arguments?` }), args,
    h('button', { type: 'button', class: 'approve', onclick: () => answer(true), text: 'Approve' }),
    h('button', { type: 'button', class: 'deny', onclick: () => answer(false), text: 'Deny' }));
  c.actions.querySelector('.approve').focus();
}

function banner(text, kind) {
  ui.banner.replaceChildren(text ? h('div', { class: `banner ${kind || ''}`, text }) : '');
}

// ---- the stream ----

function onEvent(m, name, d) {
  switch (name) {
    case 'token': appendText(m, d.content || ''); break;
    case 'tool_start': toolCard(m, d); break;
    case 'tool_end': finishCard(toolCard(m, d), true, d.output, d.elapsed_ms); break;
    case 'tool_error': finishCard(toolCard(m, d), false, d.error); break;
    case 'approval_required': approval(m, d); break;
    case 'budget_warning':
      banner(`Budget ${d.scope} ${d.name}: ${d.metric} ${d.used} of ${d.limit} used.`, 'warn');
      break;
    case 'final':
      if (d.conversation_id) chat.conversation = d.conversation_id;
      if (!m.text && d.content) appendText(m, d.content);
      break;
    case 'error':
      m.body.append(h('p', { class: d.code === 'stopped' ? 'note' : 'error',
        text: d.code === 'stopped' ? 'Stopped.' : `${d.message} (${d.code})` }));
      for (const c of m.cards.values()) if (c.status.textContent === 'running' ||
        c.status.textContent === 'needs approval') finishCard(c, false, 'cancelled');
      break;
    default: break;
  }
}

async function readStream(r, m) {
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) !== -1) {
      const block = buf.slice(0, i);
      buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
      let name = 'message';
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) {
        let d;
        try { d = JSON.parse(data.join('\n')); } catch (e) { continue; }
        onEvent(m, name, d);
      }
    }
  }
}

function setBusy(busy) {
  chat.busy = busy;
  ui.send.disabled = busy || !chat.connected;
  ui.stop.hidden = !busy;
  ui.stop.disabled = !busy;
}

async function send() {
  const text = ui.input.value.trim();
  if (!text || chat.busy || !chat.connected) return;
  ui.input.value = '';
  banner('');
  userMessage(text);
  const m = addMessage('assistant');
  setBusy(true);
  try {
    const r = await api('POST', '/llmchat/chat', { message: text, streaming: true }, { raw: true });
    if ((r.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
      await readStream(r, m);
    } else {
      let data = null;
      try { data = await r.json(); } catch (e) { data = null; }
      m.body.append(h('p', { class: 'error', text: errorText({ status: r.status, data }) }));
      if (r.status === 409 && data && data.error && data.error.code === 'not_connected') {
        chat.connected = false;
        showStatus('Not connected');
      }
    }
  } catch (e) {
    m.body.append(h('p', { class: 'error', text: 'The connection was lost; reconnecting…' }));
    await recover();
  } finally {
    for (const c of m.cards.values()) clearInterval(c.timer);
    setBusy(false);
    ui.input.focus();
    refreshList();
  }
}

// After a network blip: wait for the broker, then show the session's
// history again (or resume the stored conversation if the session is gone).
async function recover() {
  for (let i = 0; i < 60; i++) {
    try {
      const st = await api('GET', `/llmchat/status/${encodeURIComponent(state.user)}`);
      if (st.status === 200) {
        if (st.data.connected) await showHistory();
        else if (chat.conversation) await resume(chat.conversation);
        banner('Reconnected.', 'ok');
        return;
      }
      if (st.status === 401) { location.reload(); return; }
    } catch (e) { /* still down */ }
    await new Promise((res) => setTimeout(res, 1000));
  }
  banner('The broker cannot be reached.', 'error');
}

async function showHistory() {
  const res = await api('GET', '/llmchat/history');
  if (res.status !== 200) return;
  ui.messages.replaceChildren();
  renderStored(res.data.messages.map((x) => ({ role: x.role, content: x.content })));
}

function renderStored(messages) {
  let m = null;
  for (const x of messages) {
    if (x.role === 'user') { userMessage(x.content || ''); m = null; continue; }
    if (!m) m = addMessage('assistant');
    if (x.role === 'assistant') {
      if (x.content) { m.textEl = null; appendText(m, x.content); }
      for (const tc of x.tool_calls || []) {
        let input = tc.arguments;
        try { input = JSON.parse(tc.arguments); } catch (e) { /* as written */ }
        toolCard(m, { id: tc.id, tool: tc.name, server: '', input });
      }
    } else if (x.role === 'tool') {
      const c = x.call_id && m.cards.get(x.call_id);
      if (c) finishCard(c, !x.is_error, x.content);
      else {
        const d = { id: `r${Math.random()}`, tool: x.call_name || 'tool', server: '', input: '' };
        finishCard(toolCard(m, d), !x.is_error, x.content);
      }
    }
  }
  for (const el of ui.messages.querySelectorAll('.md')) el.dataset.stored = '1';
}

// ---- connecting ----

function showStatus(text, tools) {
  ui.status.textContent = text;
  ui.tools.replaceChildren();
  if (!tools) { ui.toolsBox.hidden = true; return; }
  ui.toolsBox.hidden = false;
  ui.toolsSummary.textContent = `Tools (${tools.length})`;
  for (const t of tools) {
    ui.tools.append(h('li', {}, h('strong', { text: t.tool }),
      h('span', { class: 'server', text: ` ${t.server}` }),
      h('div', { class: 'desc', text: t.description || '' })));
  }
}

function connectBody(extra) {
  const body = { provider: ui.provider.value, streaming: true };
  if (ui.model.value.trim()) body.model = ui.model.value.trim();
  if (ui.toolset.value) body.toolset = ui.toolset.value;
  return Object.assign(body, extra || {});
}

async function connect(extra) {
  ui.status.textContent = 'Connecting…';
  const res = await api('POST', '/llmchat/connect', connectBody(extra));
  if (res.status !== 200) {
    chat.connected = false;
    showStatus(`Not connected: ${errorText(res)}`);
    setBusy(false);
    return false;
  }
  const d = res.data;
  chat.connected = true;
  chat.conversation = d.conversation_id;
  showStatus(`Connected · ${d.provider} · ${d.model} · ${d.tool_count} tools`, d.tools);
  setBusy(false);
  return true;
}

async function newChat() {
  ui.messages.replaceChildren();
  banner('');
  await connect();
  ui.input.focus();
}

async function resume(id) {
  if (!(await connect({ conversation_id: id }))) return;
  const res = await api('GET', `/api/v1/conversations/${encodeURIComponent(id)}`);
  ui.messages.replaceChildren();
  if (res.status === 200) renderStored(res.data.messages);
  highlight();
  ui.input.focus();
}

// ---- the sidebar ----

function highlight() {
  for (const li of ui.list.children) {
    li.classList.toggle('current', li.dataset.id === chat.conversation);
    const b = li.querySelector('.open');
    if (b) b.setAttribute('aria-current', li.dataset.id === chat.conversation ? 'true' : 'false');
  }
}

async function refreshList() {
  const q = ui.search.value.trim();
  let res;
  try {
    res = await api('GET', `/api/v1/conversations?limit=50${q ? `&q=${encodeURIComponent(q)}` : ''}`);
  } catch (e) { return; }
  if (res.status !== 200) return;
  ui.list.replaceChildren(...res.data.conversations.map(listItem));
  if (!res.data.conversations.length) ui.list.append(h('li', { class: 'empty', text: q ? 'No match.' : 'No conversations yet.' }));
  highlight();
}

function listItem(c) {
  const li = h('li', { 'data-id': c.id });
  const open = h('button', { type: 'button', class: 'open', text: c.title || '(untitled)',
    title: c.title, onclick: () => resume(c.id) });
  const rename = h('button', { type: 'button', class: 'icon rename', text: '✎',
    'aria-label': `Rename ${c.title}`, onclick: () => {
      const input = h('input', { type: 'text', class: 'rename-input', value: c.title,
        'aria-label': 'New title', maxlength: 200 });
      const done = async (save) => {
        if (save && input.value.trim() && input.value.trim() !== c.title) {
          const res = await api('PATCH', `/api/v1/conversations/${c.id}`, { title: input.value.trim() });
          if (!res.ok) banner(errorText(res), 'error');
        }
        refreshList();
      };
      input.addEventListener('keydown', (ev) => {
        if (ev.key === 'Enter') { ev.preventDefault(); done(true); }
        if (ev.key === 'Escape') { ev.preventDefault(); done(false); }
      });
      li.replaceChildren(input);
      input.focus();
      input.select();
    } });
  const del = h('button', { type: 'button', class: 'icon delete', text: '×',
    'aria-label': `Delete ${c.title}`, onclick: () => {
      const yes = h('button', { type: 'button', class: 'danger confirm-delete', text: 'Delete',
        onclick: async () => {
          const res = await api('DELETE', `/api/v1/conversations/${c.id}`);
          if (!res.ok) banner(errorText(res), 'error');
          if (c.id === chat.conversation) { ui.messages.replaceChildren(); chat.conversation = null; }
          refreshList();
        } });
      li.replaceChildren(h('span', { class: 'ask', text: 'Delete this conversation?' }), yes,
        h('button', { type: 'button', text: 'Cancel', onclick: () => refreshList() }));
      yes.focus();
    } });
  li.append(open, rename, del);
  return li;
}

// ---- the page ----

function build(root) {
  ui.provider = h('select', { id: 'provider', 'aria-label': 'Provider' });
  ui.model = h('input', { id: 'model', type: 'text', 'aria-label': 'Model', placeholder: 'model' });
  ui.toolset = h('select', { id: 'toolset', 'aria-label': 'Toolset' });
  ui.status = h('span', { id: 'status', role: 'status', text: 'Not connected' });
  ui.toolsSummary = h('summary', { text: 'Tools' });
  ui.tools = h('ul', { class: 'tool-list' });
  ui.toolsBox = h('details', { id: 'tools', hidden: true }, ui.toolsSummary, ui.tools);
  ui.banner = h('div', { id: 'banner', role: 'status', 'aria-live': 'polite' });
  ui.messages = h('div', { id: 'messages', role: 'log', 'aria-live': 'polite', 'aria-label': 'Conversation' });
  ui.input = h('textarea', { id: 'input', rows: 2, 'aria-label': 'Message',
    placeholder: 'Message (Enter sends, Shift+Enter for a new line)' });
  ui.send = h('button', { type: 'submit', id: 'send', text: 'Send', disabled: true });
  ui.stop = h('button', { type: 'button', id: 'stop', text: 'Stop', hidden: true,
    onclick: () => api('POST', '/llmchat/stop') });
  ui.search = h('input', { id: 'search', type: 'search', 'aria-label': 'Search conversations',
    placeholder: 'Search' });
  ui.list = h('ul', { id: 'conversations', 'aria-label': 'Conversations' });
  ui.sidebar = h('nav', { id: 'sidebar', 'aria-label': 'Conversations' },
    h('button', { type: 'button', id: 'new-chat', text: '+ New chat', onclick: newChat }),
    ui.search, ui.list);
  let t = null;
  ui.search.addEventListener('input', () => { clearTimeout(t); t = setTimeout(refreshList, 250); });
  ui.input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); send(); }
  });
  const toggle = h('button', { type: 'button', id: 'toggle-sidebar', 'aria-controls': 'sidebar',
    'aria-expanded': 'false', text: '☰', 'aria-label': 'Show conversations',
    onclick: () => {
      const open = document.body.classList.toggle('sidebar-open');
      toggle.setAttribute('aria-expanded', String(open));
    } });
  const header = h('header', { class: 'top' }, toggle,
    h('span', { class: 'brand', text: 'mcpbroker' }),
    h('span', { class: 'who', text: `${state.user} · ${state.tenant}` }),
    state.roles.includes('admin') || state.roles.includes('tenant-admin') ?
      h('a', { href: '/admin', text: 'Console' }) : null,
    state.csrf ? h('button', { type: 'button', id: 'signout', text: 'Sign out',
      onclick: async () => { await logout(); location.reload(); } }) : null);
  const connectForm = h('form', { id: 'connect', onsubmit: (ev) => { ev.preventDefault(); newChat(); } },
    ui.provider, ui.model, ui.toolset, h('button', { type: 'submit', text: 'Connect' }), ui.status);
  const composer = h('form', { id: 'composer', onsubmit: (ev) => { ev.preventDefault(); send(); } },
    ui.input, h('div', { class: 'buttons' }, ui.send, ui.stop));
  root.replaceChildren(header, h('div', { class: 'layout' }, ui.sidebar,
    h('section', { class: 'main', 'aria-label': 'Chat' }, connectForm, ui.toolsBox, ui.banner,
      ui.messages, composer)));
}

async function start() {
  const root = document.getElementById('app');
  if (!(await loadSession())) {
    await signIn(root, 'Sign in to chat');
  }
  build(root);
  const pv = await api('GET', '/api/v1/providers');
  if (pv.status === 200) {
    for (const p of pv.data.providers) {
      ui.provider.append(h('option', { value: p.name, text: `${p.name} (${p.type})` }));
    }
    ui.toolset.append(h('option', { value: '', text: 'all tools' }));
    for (const t of pv.data.toolsets) ui.toolset.append(h('option', { value: t, text: t }));
    const sync = () => {
      const p = pv.data.providers.find((x) => x.name === ui.provider.value);
      ui.model.placeholder = p && p.model ? p.model : 'model';
    };
    ui.provider.addEventListener('change', sync);
    sync();
  }
  const st = await api('GET', `/llmchat/config/${encodeURIComponent(state.user)}`);
  if (st.status === 200) {
    ui.provider.value = st.data.provider;
    if (st.data.model) ui.model.value = st.data.model;
    if (st.data.toolset) ui.toolset.value = st.data.toolset;
    chat.connected = true;
    showStatus(`Connected · ${st.data.provider} · ${st.data.model}`);
    setBusy(false);
    await showHistory();
  }
  refreshList();
  ui.input.focus();
}

start();
