// kairosmq console: the browser side of console/api.py. No framework, no network but the
// console's own origin; data is written with textContent only (never parsed as HTML).
"use strict";

const state = { csrf: "", role: "", broker: "", pendingCursor: null, pendingQuery: null, dlqCursor: null };

const $ = (sel) => document.querySelector(sel);

function status(text, error = false) {
  const el = $("#status");
  el.textContent = text;
  el.classList.toggle("error", error);
}

async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.headers["X-CSRF-Token"] = state.csrf;
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  const data = resp.status === 204 ? {} : await resp.json();
  if (resp.status === 401 && path !== "/api/login") {
    showLogin();
  }
  if (!resp.ok) {
    throw new Error(data.error || `HTTP ${resp.status}`);
  }
  return data;
}

function withBroker(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== "" && v !== null && v !== undefined) q.set(k, v);
  }
  if (state.broker) q.set("broker", state.broker);
  return q.toString();
}

function fmtTime(ms) {
  if (!ms) return "-";
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function fmtIn(ms) {
  if (ms <= 0) return "due";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${(ms / 1000).toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} m`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "-" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function button(label, onClick, cls) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  if (cls) b.className = cls;
  b.addEventListener("click", onClick);
  return b;
}

// ------------------------------------------------------------------ login

function showLogin() {
  $("#login").hidden = false;
  $("#tabs").hidden = true;
  $("#who").hidden = true;
  for (const v of document.querySelectorAll(".view")) v.hidden = true;
}

async function loggedIn(me) {
  state.csrf = me.csrf;
  state.role = me.role;
  document.body.classList.toggle("viewer", me.role === "viewer");
  document.body.classList.toggle("admin", me.role === "admin");
  $("#user").textContent = `${me.user} (${me.role})`;
  $("#login").hidden = true;
  $("#tabs").hidden = false;
  $("#who").hidden = false;
  const brokers = await api("GET", "/api/brokers");
  const sel = $("#broker");
  sel.textContent = "";
  for (const b of brokers) {
    const o = document.createElement("option");
    o.value = b.name;
    o.textContent = `${b.name} (${b.address})`;
    sel.appendChild(o);
  }
  state.broker = brokers.length ? brokers[0].name : "";
  showTab("pending");
}

$("#login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const me = await api("POST", "/api/login", {
      user: $("#login-user").value,
      password: $("#login-password").value,
    });
    $("#login-password").value = "";
    status("");
    await loggedIn(me);
  } catch (err) {
    status(err.message, true);
  }
});

$("#logout").addEventListener("click", async () => {
  try {
    await api("POST", "/api/logout", {});
  } finally {
    state.csrf = "";
    showLogin();
    status("Logged out.");
  }
});

$("#broker").addEventListener("change", (ev) => {
  state.broker = ev.target.value;
  showTab(document.querySelector(".tab.active").dataset.tab);
});

for (const t of document.querySelectorAll(".tab")) {
  t.addEventListener("click", () => showTab(t.dataset.tab));
}

function showTab(name) {
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.dataset.tab === name);
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== name;
  if (name === "pending") loadPending(null).catch((e) => status(e.message, true));
  if (name === "transactions") loadTransactions().catch((e) => status(e.message, true));
  if (name === "timers") loadTimers().catch((e) => status(e.message, true));
  if (name === "cluster") loadCluster().catch((e) => status(e.message, true));
  if (name === "topics") loadTopics(0).catch((e) => status(e.message, true));
  if (name === "groups") loadGroups().catch((e) => status(e.message, true));
}

// ------------------------------------------------------------------ pending

function pendingQuery() {
  const f = new FormData($("#pending-filter"));
  const when = (v) => (v ? String(new Date(v).getTime()) : "");
  return {
    topic: f.get("topic"), msgId: f.get("msgId"), key: f.get("key"), kind: f.get("kind"),
    fromMs: when(f.get("from")), toMs: when(f.get("to")), limit: f.get("limit"),
  };
}

async function loadPending(cursor, keepStatus = false) {
  state.pendingPage = cursor;
  const query = pendingQuery();
  state.pendingQuery = query;
  const page = await api("GET", "/api/pending?" + withBroker({ ...query, cursor }));
  const body = $("#pending-table tbody");
  body.textContent = "";
  for (const r of page.rows) {
    const tr = document.createElement("tr");
    tr.dataset.ref = r.ref;
    cell(tr, fmtTime(r.dueMs));
    cell(tr, fmtIn(r.dueMs - page.nowMs));
    cell(tr, r.kind === "level" ? `level ${r.level}` : "timer");
    cell(tr, r.topic);
    cell(tr, r.msgId, "id");
    cell(tr, r.keys);
    cell(tr, r.tags);
    const actions = cell(tr, "", "actions op");
    actions.textContent = "";
    actions.append(
      button("Run now", () => act("/api/pending/run-now", { ref: r.ref }, `run ${r.msgId} now`)),
      button("Reschedule", () => rescheduleForm(actions, r)),
      button("Recall", () => act("/api/pending/recall", { ref: r.ref }, `recall ${r.msgId}`), "danger"),
    );
    body.appendChild(tr);
  }
  state.pendingCursor = page.nextCursor;
  $("#pending-next").disabled = !page.nextCursor;
  if (!keepStatus) {
    status(page.rows.length ? `${page.rows.length} pending shown` +
      (page.complete ? "" : " (scan budget reached: next page goes on)") : "Nothing pending here.");
  }
  await loadHistogram();
}

async function loadHistogram() {
  const q = state.pendingQuery || {};
  const h = await api("GET", "/api/pending/histogram?" + withBroker({
    unit: $("#hist-unit").value, kind: q.kind, fromMs: q.fromMs, toMs: q.toMs,
  }));
  const box = $("#histogram");
  box.textContent = "";
  const max = Math.max(1, ...h.bins.map((b) => b.timers + b.levels));
  const step = { minute: 60000, hour: 3600000, day: 86400000 }[h.unit];
  let bins = h.bins;
  if (bins.length && (bins[bins.length - 1].startMs - bins[0].startMs) / step < 1000) {
    const byStart = new Map(bins.map((b) => [b.startMs, b]));  // empty bins shown as gaps
    bins = [];
    for (let t = h.bins[0].startMs; t <= h.bins[h.bins.length - 1].startMs; t += step) {
      bins.push(byStart.get(t) || { startMs: t, timers: 0, levels: 0 });
    }
  }
  for (const b of bins) {
    const bar = document.createElement("div");
    const n = b.timers + b.levels;
    bar.className = n === 0 ? "bar empty" : b.levels > b.timers ? "bar level" : "bar";
    bar.style.height = `${n ? Math.max(2, Math.round((n / max) * 80)) : 80}px`;
    bar.title = `${fmtTime(b.startMs)}: ${b.timers} timers, ${b.levels} level-delayed`;
    box.appendChild(bar);
  }
  $("#hist-total").textContent = `${h.timers} timers, ${h.levels} level-delayed pending`;
}

function rescheduleForm(where, r) {
  where.textContent = "";
  const form = document.createElement("form");
  form.className = "inline-form";
  const input = document.createElement("input");
  input.type = "datetime-local";
  input.step = "1";
  input.required = true;
  const go = document.createElement("button");
  go.type = "submit";
  go.textContent = "Move";
  form.append(input, go, button("Cancel", () => loadPending(null)));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const dueMs = new Date(input.value).getTime();
    act("/api/pending/reschedule", { ref: r.ref, dueMs }, `move ${r.msgId} to ${fmtTime(dueMs)}`);
  });
  where.appendChild(form);
  input.focus();
}

async function act(path, body, what) {
  let text, error = false;
  try {
    const out = await api("POST", path, { ...body, broker: state.broker });
    text = `${what}: ` + (out.results || []).map((x) => x.outcome).join(", ");
  } catch (err) {
    text = `${what}: ${err.message}`;
    error = true;
  }
  await loadPending(null, true).catch(() => {});
  status(text, error);
}

$("#pending-filter").addEventListener("submit", (ev) => {
  ev.preventDefault();
  loadPending(null).catch((e) => status(e.message, true));
});
$("#pending-first").addEventListener("click", () => loadPending(null).catch((e) => status(e.message, true)));
$("#pending-next").addEventListener("click", () => loadPending(state.pendingCursor).catch((e) => status(e.message, true)));
$("#hist-unit").addEventListener("change", () => loadHistogram().catch((e) => status(e.message, true)));

// ------------------------------------------------------------------ dead letters

async function loadDlq(cursor, keepStatus = false) {
  const group = new FormData($("#dlq-filter")).get("consumerGroup");
  const page = await api("GET", "/api/dlq?" + withBroker({ consumerGroup: group, cursor }));
  const body = $("#dlq-table tbody");
  body.textContent = "";
  for (const r of page.rows) {
    const tr = document.createElement("tr");
    cell(tr, r.queueId);
    cell(tr, r.queueOffset);
    cell(tr, r.msgId, "id");
    cell(tr, r.originTopic);
    cell(tr, r.keys);
    cell(tr, r.reconsumeTimes);
    cell(tr, fmtTime(r.storeMs));
    cell(tr, r.resent ? "yes" : "no");
    body.appendChild(tr);
  }
  state.dlqCursor = page.nextCursor;
  $("#dlq-next").disabled = !page.nextCursor;
  if (!keepStatus) status(`${page.rows.length} dead letters of ${group} shown`);
}

$("#dlq-filter").addEventListener("submit", (ev) => {
  ev.preventDefault();
  loadDlq(null).catch((e) => status(e.message, true));
});
$("#dlq-next").addEventListener("click", () => loadDlq(state.dlqCursor).catch((e) => status(e.message, true)));
$("#dlq-resend").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const group = new FormData($("#dlq-filter")).get("consumerGroup");
  let text, error = false;
  try {
    const out = await api("POST", "/api/dlq/resend", {
      broker: state.broker, consumerGroup: group, maxNum: Number(f.get("maxNum")),
      delayMs: Number(f.get("delay")) * 1000 || undefined, toRetryTopic: f.get("toRetryTopic") === "on",
    });
    text = `resent ${out.resent.length}; still in the DLQ: ${out.remaining}`;
  } catch (err) {
    text = err.message;
    error = true;
  }
  await loadDlq(null, true).catch(() => {});
  status(text, error);
});

// ------------------------------------------------------------------ transactions

async function loadTransactions(keepStatus = false) {
  const group = new FormData($("#tx-filter")).get("producerGroup");
  const out = await api("GET", "/api/transactions?" + withBroker({ producerGroup: group }));
  const body = $("#tx-table tbody");
  body.textContent = "";
  for (const [g, info] of Object.entries(out.groups)) {
    for (const m of info.messages) {
      const tr = document.createElement("tr");
      cell(tr, g);
      cell(tr, m.msgId, "id");
      cell(tr, m.topic);
      cell(tr, m.commitLogOffset);
      cell(tr, fmtIn(m.ageMs));
      cell(tr, m.checks);
      const actions = cell(tr, "", "actions op");
      actions.textContent = "";
      const end = (action) => async () => {
        let text = `${action}: ${m.msgId}`, error = false;
        try {
          await api("POST", "/api/transactions/end", { broker: state.broker, commitLogOffset: m.commitLogOffset, action });
        } catch (err) {
          text = `${action} ${m.msgId}: ${err.message}`;
          error = true;
        }
        await loadTransactions(true).catch(() => {});
        status(text, error);
      };
      actions.append(button("Commit", end("commit")), button("Roll back", end("rollback"), "danger"));
      body.appendChild(tr);
    }
  }
  if (!keepStatus) status(`${out.pending} pending half messages`);
}

$("#tx-filter").addEventListener("submit", (ev) => {
  ev.preventDefault();
  loadTransactions().catch((e) => status(e.message, true));
});

// ------------------------------------------------------------------ timer health

function fmtDur(ms) {
  if (ms === null || ms === undefined) return "-";
  if (ms < 1000) return `${ms} ms`;
  return fmtIn(ms);
}

async function loadTimers(keepStatus = false) {
  const out = await api("GET", "/api/timers?" + withBroker({}));
  const tbody = $("#timer-table tbody");
  tbody.textContent = "";
  if (out.timers) {
    const t = out.timers;
    const tr = document.createElement("tr");
    cell(tr, t.pending);
    cell(tr, t.pending ? fmtTime(t.nextDueMs) : "-");
    cell(tr, t.oldestOverdueMs ? fmtDur(t.oldestOverdueMs) : "none", t.oldestOverdueMs ? "bad" : "");
    cell(tr, t.scheduled);
    cell(tr, t.fired);
    cell(tr, t.meanLatenessMs === null ? "-" : `${t.meanLatenessMs} ms`);
    tbody.appendChild(tr);
  }
  const lbody = $("#level-table tbody");
  lbody.textContent = "";
  for (const lv of out.levels) {
    const tr = document.createElement("tr");
    cell(tr, lv.level);
    cell(tr, lv.delayMs === undefined ? "-" : fmtDur(lv.delayMs));
    cell(tr, lv.pending);
    cell(tr, lv.pending && lv.nextDueMs ? fmtTime(lv.nextDueMs) : "-");
    cell(tr, lv.oldestOverdueMs ? fmtDur(lv.oldestOverdueMs) : "none", lv.oldestOverdueMs ? "bad" : "");
    cell(tr, lv.scheduled);
    cell(tr, lv.delivered);
    lbody.appendChild(tr);
  }
  if (!keepStatus) {
    status(out.kairosmq ? `${out.timers.pending} timers pending` : "not a kairosmq broker: delay levels only");
  }
}

// ------------------------------------------------------------------ cluster

async function loadCluster() {
  const out = await api("GET", "/api/cluster");
  const tbody = $("#cluster-table tbody");
  tbody.textContent = "";
  for (const b of out.brokers) {
    const tr = document.createElement("tr");
    cell(tr, b.cluster);
    cell(tr, b.brokerName);
    cell(tr, b.brokerId);
    cell(tr, b.address, "id");
    cell(tr, b.role);
    if (b.error) {
      cell(tr, b.error, "bad");
    } else {
      cell(tr, b.version);
      cell(tr, b.putTps === null ? "-" : b.putTps.toFixed(1));
      cell(tr, b.getTps === null ? "-" : b.getTps.toFixed(1));
      cell(tr, b.diskUsed === null ? "-" : `${(b.diskUsed * 100).toFixed(1)} %`);
      cell(tr, b.kairosmq ? b.core : "(Apache)");
      cell(tr, b.ha ? `${b.ha.role || ""}${b.ha.lagBytes !== undefined && b.ha.lagBytes !== null ? ` lag ${b.ha.lagBytes} B` : ""}` : "-");
    }
    tbody.appendChild(tr);
  }
  status(`${out.brokers.length} brokers in ${out.clusters.join(", ")}`);
}

// ------------------------------------------------------------------ topics

state.topicsOffset = 0;

async function loadTopics(offset, keepStatus = false) {
  const f = new FormData($("#topics-filter"));
  const page = await api("GET", "/api/topics?" + withBroker({
    contains: f.get("contains"), kind: f.get("kind"), offset, limit: 50,
  }));
  const tbody = $("#topics-table tbody");
  tbody.textContent = "";
  for (const r of page.rows) {
    const tr = document.createElement("tr");
    tr.dataset.topic = r.topic;
    cell(tr, r.topic);
    cell(tr, r.kind);
    cell(tr, `${r.readQueues}/${r.writeQueues}`);
    cell(tr, r.error ? r.error : r.messages);
    cell(tr, r.queues ? r.queues.map((q) => q.maxOffset).join(" ") : "-");
    cell(tr, fmtTime(r.lastUpdateTimestamp));
    const actions = cell(tr, "", "actions adm");
    actions.textContent = "";
    actions.append(button("Delete", () => deleteTopic(r.topic), "danger"));
    tbody.appendChild(tr);
  }
  state.topicsOffset = page.offset;
  state.topicsNext = page.nextOffset;
  $("#topics-next").disabled = page.nextOffset === null;
  $("#topics-total").textContent = `${page.offset + 1}-${page.offset + page.rows.length} of ${page.total}`;
  if (!keepStatus) status(`${page.total} topics`);
}

async function adminWrite(path, body, what, reload) {
  let text, error = false;
  try {
    const out = await api("POST", path, { ...body, broker: state.broker });
    text = `${what}: done` + (out.queues && out.queues.map ? ` (${out.queues.map((q) => `${q.queueId}@${q.offset}`).join(" ")})` : "");
  } catch (err) {
    text = `${what}: ${err.message}`;
    error = true;
  }
  await reload().catch(() => {});
  status(text, error);
}

function deleteTopic(topic) {
  if (!window.confirm(`Delete topic ${topic} on ${state.broker}?`)) return;
  adminWrite("/api/topics/delete", { topic }, `delete ${topic}`, () => loadTopics(state.topicsOffset, true));
}

$("#topic-create").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const topic = f.get("topic");
  adminWrite("/api/topics/create", { topic, queues: Number(f.get("queues")), perm: f.get("perm") },
    `create ${topic}`, () => loadTopics(state.topicsOffset, true));
});

$("#topics-filter").addEventListener("submit", (ev) => {
  ev.preventDefault();
  loadTopics(0).catch((e) => status(e.message, true));
});
$("#topics-first").addEventListener("click", () => loadTopics(0).catch((e) => status(e.message, true)));
$("#topics-next").addEventListener("click", () => loadTopics(state.topicsNext).catch((e) => status(e.message, true)));

// ------------------------------------------------------------------ groups

async function loadGroups() {
  const out = await api("GET", "/api/groups?" + withBroker({}));
  const tbody = $("#groups-table tbody");
  tbody.textContent = "";
  for (const g of out.groups) {
    const tr = document.createElement("tr");
    tr.dataset.group = g.group;
    cell(tr, g.group);
    cell(tr, g.online);
    cell(tr, g.lag);
    cell(tr, g.messageModel);
    const c = cell(tr, "");
    c.textContent = "";
    c.append(button("Details", () => loadGroup(g.group).catch((e) => status(e.message, true))));
    tbody.appendChild(tr);
  }
  status(`${out.groups.length} consumer groups`);
}

$("#reset-offset").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const timestamp = f.get("end") === "on" ? -1 : new Date(f.get("at")).getTime();
  if (Number.isNaN(timestamp)) {
    status("give the instant or tick 'the end'", true);
    return;
  }
  const group = state.group;
  adminWrite("/api/groups/reset-offset", { consumerGroup: group, topic: f.get("topic"), timestamp },
    `reset ${group}`, () => loadGroup(group, true));
});

async function loadGroup(name, keepStatus = false) {
  state.group = name;
  const out = await api("GET", "/api/groups/detail?" + withBroker({ consumerGroup: name }));
  $("#group-detail").hidden = false;
  $("#group-name").textContent = `${out.group}: lag ${out.lag}`;
  const qbody = $("#group-queues tbody");
  qbody.textContent = "";
  for (const q of out.queues) {
    const tr = document.createElement("tr");
    cell(tr, q.topic);
    cell(tr, q.queueId);
    cell(tr, q.brokerOffset);
    cell(tr, q.consumerOffset);
    cell(tr, q.lag);
    cell(tr, fmtTime(q.lastTimestamp));
    qbody.appendChild(tr);
  }
  const cbody = $("#group-connections tbody");
  cbody.textContent = "";
  for (const c of out.connections) {
    const tr = document.createElement("tr");
    cell(tr, c.clientId, "id");
    cell(tr, c.clientAddr);
    cell(tr, c.language);
    cell(tr, c.version);
    cbody.appendChild(tr);
  }
  if (!keepStatus) status(`${out.group}: ${out.queues.length} queues, ${out.connections.length} connections`);
}

// ------------------------------------------------------------------ live pages

// The pending and timer-health views refresh themselves every POLL_MS (the page shown
// again, the status line kept), unless the tab is hidden, a request is still running,
// or a reschedule form is open.
const POLL_MS = 3000;
let polling = false;

setInterval(async () => {
  if (polling || document.hidden || !state.csrf) return;
  const active = document.querySelector(".tab.active");
  const tab = active && !$("#tabs").hidden ? active.dataset.tab : "";
  polling = true;
  try {
    if (tab === "pending" && !document.querySelector("#pending-table .inline-form")) {
      await loadPending(state.pendingPage, true);
    } else if (tab === "timers") {
      await loadTimers(true);
    }
  } catch (_err) {
    // the next tick tries again; a lost login shows the login form (api())
  } finally {
    polling = false;
  }
}, POLL_MS);

// ------------------------------------------------------------------ start

(async () => {
  try {
    await loggedIn(await api("GET", "/api/me"));
  } catch (_err) {
    showLogin();
  }
})();
