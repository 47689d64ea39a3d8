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
  if (name === "timeline") loadTimeline().catch((e) => status(e.message, true));
  if (name === "report") loadReport().catch((e) => status(e.message, true));
  if (name === "search") status("Search a message by msgId or key.");
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
  state.dlqPage = cursor;
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
    const actions = cell(tr, "", "actions op");
    actions.textContent = "";
    if (!r.resent) actions.append(button("Resend", () => resendRow(group, r)));
    body.appendChild(tr);
  }
  state.dlqCursor = page.nextCursor;
  $("#dlq-next").disabled = !page.nextCursor;
  if (!keepStatus) status(`${page.rows.length} dead letters of ${group} shown`);
}

async function resendRow(group, r) {
  const delayMs = Number(new FormData($("#dlq-resend")).get("delay")) * 1000 || undefined;
  let text, error = false;
  try {
    const out = await api("POST", "/api/dlq/resend", {
      broker: state.broker, consumerGroup: group, queueId: r.queueId, queueOffset: r.queueOffset, delayMs,
    });
    text = `resent ${r.msgId}` + (out.resent.length && out.resent[0].dueMs ? ` (due ${fmtTime(out.resent[0].dueMs)})` : "");
  } catch (err) {
    text = `resend ${r.msgId}: ${err.message}`;
    error = true;
  }
  await loadDlq(state.dlqPage, true).catch(() => {});
  status(text, error);
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
    onTimeCells(tr, t.onTime);
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
    onTimeCells(tr, lv.onTime);
    lbody.appendChild(tr);
  }
  const all = out.onTime;
  $("#ontime-all").textContent = all && all.fired
    ? `On time: ${all.within10ms} % of ${all.fired} fired within 10 ms of due, ${all.within100ms} % within 100 ms`
    : (out.kairosmq ? "On time: nothing fired yet" : "On time: not reported by this broker");
  if (!keepStatus) {
    status(out.kairosmq ? `${out.timers.pending} timers pending` : "not a kairosmq broker: delay levels only");
  }
}

function onTimeCells(tr, ot) {
  const pct = (v) => (v === null || v === undefined ? "-" : `${v} %`);
  cell(tr, ot ? pct(ot.within10ms) : "-");
  cell(tr, ot ? pct(ot.within100ms) : "-");
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

// ------------------------------------------------------------------ bulk actions

// The pending filter selects (topic, key, kind, due window); a dry run counts, the
// confirmation step shows that count and sends it back: the console refuses (409) when
// the filter selects another count by then.
function bulkBody() {
  const q = pendingQuery();
  const f = new FormData($("#bulk"));
  const body = { broker: state.broker, topic: q.topic, key: q.key, kind: q.kind, action: f.get("action") };
  if (q.fromMs) body.fromMs = Number(q.fromMs);
  if (q.toMs) body.toMs = Number(q.toMs);
  if (body.action === "shift") body.shiftMs = Math.round(Number(f.get("shiftMin")) * 60000);
  return body;
}

$("#bulk").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = bulkBody();
  try {
    const out = await api("POST", "/api/pending/bulk", { ...body, dryRun: true });
    state.bulk = { ...body, confirmCount: out.count };
    const what = body.action === "shift" ? `shift by ${body.shiftMs / 60000} min` : body.action;
    $("#bulk-count").textContent = `${what}: ${out.count} pending messages selected. Confirm?`;
    $("#bulk-confirm").hidden = false;
    $("#bulk-go").disabled = out.count === 0;
    status(`dry run: ${out.count} selected`);
  } catch (err) {
    status(err.message, true);
  }
});

$("#bulk-cancel").addEventListener("click", () => {
  $("#bulk-confirm").hidden = true;
  state.bulk = null;
});

$("#bulk-go").addEventListener("click", async () => {
  if (!state.bulk) return;
  let text, error = false;
  try {
    const out = await api("POST", "/api/pending/bulk", { ...state.bulk, dryRun: false });
    const parts = Object.entries(out.outcomes).map(([k, v]) => `${v} ${k}`);
    text = `${out.action}: ${parts.join(", ") || "nothing"}` + (out.failed.length ? `, ${out.failed.length} failed` : "");
  } catch (err) {
    text = `bulk ${state.bulk.action}: ${err.message}`;
    error = true;
  }
  $("#bulk-confirm").hidden = true;
  state.bulk = null;
  await loadPending(null, true).catch(() => {});
  status(text, error);
});

// ------------------------------------------------------------------ timeline

const SVG = "http://www.w3.org/2000/svg";
const UNIT_MS = { minute: 60000, hour: 3600000, day: 86400000 };
const SPAN_MS = { minute: 12 * 3600000, hour: 40 * 86400000, day: 40 * 86400000 };

function svg(tag, attrs, parent) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (parent) parent.appendChild(el);
  return el;
}

function toLocalInput(ms) {
  const d = new Date(ms);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

async function loadTimeline() {
  const f = new FormData($("#timeline-filter"));
  const unit = f.get("unit");
  const step = UNIT_MS[unit];
  const now = Date.now();
  const from = Math.floor(now / step) * step;
  const to = from + SPAN_MS[unit] + step;
  const counts = new Map();
  let cursor = null, total = 0, pages = 0, complete = true;
  do {  // a topic's histogram is a scan: follow its cursor (at most 20 requests)
    const h = await api("GET", "/api/pending/histogram?" + withBroker({
      unit, topic: f.get("topic"), kind: f.get("kind"), fromMs: 0, toMs: to, cursor,
    }));
    for (const b of h.bins) {
      const start = Math.max(b.startMs, from);  // overdue ones count in the first bar
      const c = counts.get(start) || { timers: 0, levels: 0 };
      c.timers += b.timers;
      c.levels += b.levels;
      counts.set(start, c);
      total += b.timers + b.levels;
    }
    cursor = h.nextCursor;
    pages += 1;
    complete = !cursor;
  } while (cursor && pages < 20);
  const n = Math.round((to - from) / step);
  const barW = Math.max(2, Math.min(24, Math.floor(1200 / n)));
  const height = 180, top = 10, bottom = 30, left = 40;
  const max = Math.max(1, ...[...counts.values()].map((c) => c.timers + c.levels));
  const box = $("#timeline-chart");
  box.textContent = "";
  const chart = svg("svg", { width: left + n * barW + 10, height, role: "img", "aria-label": `pending per ${unit}` }, box);
  svg("line", { x1: left, y1: height - bottom, x2: left + n * barW, y2: height - bottom, class: "axis" }, chart);
  svg("text", { x: left - 4, y: top + 8, class: "tick", "text-anchor": "end" }, chart).textContent = String(max);
  svg("text", { x: left - 4, y: height - bottom, class: "tick", "text-anchor": "end" }, chart).textContent = "0";
  const labelEvery = Math.max(1, Math.ceil(n / 8));
  for (let i = 0; i < n; i++) {
    const start = from + i * step;
    if (i % labelEvery === 0) {
      const label = unit === "day" || (unit === "hour" && labelEvery >= 24) ? fmtTime(start).slice(5, 10) : fmtTime(start).slice(5, 16);
      svg("text", { x: left + i * barW, y: height - bottom + 16, class: "tick" }, chart).textContent = label;
    }
    const c = counts.get(start);
    if (!c) continue;
    const v = c.timers + c.levels;
    const h = Math.max(2, Math.round((v / max) * (height - top - bottom)));
    const bar = svg("rect", {
      x: left + i * barW, y: height - bottom - h, width: Math.max(1, barW - 1), height: h,
      class: c.levels > c.timers ? "tl-bar level" : "tl-bar", "data-start": start, tabindex: 0,
    }, chart);
    svg("title", {}, bar).textContent = `${fmtTime(start)}: ${c.timers} timers, ${c.levels} level-delayed`;
    const open = () => showWindow(start, start + step, f.get("topic"), f.get("kind"));
    bar.addEventListener("click", open);
    bar.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
  }
  $("#timeline-total").textContent = `${total} pending in the next ${unit === "minute" ? "12 hours" : "40 days"}` +
    (complete ? "" : " (scan budget reached: partial)");
  status(`timeline per ${unit}: ${counts.size} ${unit}s with pending messages`);
}

function showWindow(fromMs, toMs, topic, kind) {
  const form = $("#pending-filter");
  form.elements.from.value = toLocalInput(fromMs);
  form.elements.to.value = toLocalInput(toMs);
  form.elements.topic.value = topic || "";
  form.elements.kind.value = kind || "all";
  form.elements.msgId.value = "";
  form.elements.key.value = "";
  showTab("pending");
}

$("#timeline-filter").addEventListener("submit", (ev) => {
  ev.preventDefault();
  loadTimeline().catch((e) => status(e.message, true));
});

// ------------------------------------------------------------------ search: a message's journey

function fmtLate(ms) {
  if (ms === null || ms === undefined) return "-";
  return ms < 1000 ? `${ms} ms` : fmtIn(ms);
}

async function search() {
  const f = new FormData($("#search-form"));
  const out = await api("GET", "/api/journey?" + withBroker({ msgId: f.get("msgId"), key: f.get("key") }));
  const box = $("#journeys");
  box.textContent = "";
  for (const m of out.messages) {
    const card = document.createElement("div");
    card.className = "journey";
    card.dataset.msgId = m.msgId;
    const h = document.createElement("h2");
    h.textContent = `${m.msgId} in ${m.topic || "?"}` + (m.keys ? ` (keys ${m.keys})` : "");
    card.appendChild(h);
    const table = document.createElement("table");
    table.className = "steps";
    const head = document.createElement("tr");
    for (const t of ["Step", "Topic", "Queue:offset", "Stored", "Due", "Late by", "Detail"]) {
      const th = document.createElement("th");
      th.textContent = t;
      head.appendChild(th);
    }
    table.appendChild(head);
    const rows = [...m.steps];
    for (const p of m.pending) rows.push({ ...p, pending: true });
    for (const s of rows) {
      const tr = document.createElement("tr");
      tr.dataset.step = s.step;
      cell(tr, s.step);
      cell(tr, s.topic);
      cell(tr, s.queueId === undefined ? "-" : `${s.queueId}:${s.queueOffset}`);
      cell(tr, s.storeMs ? fmtTime(s.storeMs) : "-");
      cell(tr, s.dueMs ? fmtTime(s.dueMs) : "-");
      const late = s.pending ? `due in ${fmtIn(s.dueMs - out.nowMs)}` : fmtLate(s.latenessMs);
      cell(tr, late, s.latenessMs > 1000 ? "bad" : "");
      const detail = [];
      if (s.kind) detail.push(s.kind === "level" ? `level ${s.level}` : "timer");
      if (s.group) detail.push(`group ${s.group}`);
      if (s.realTopic && s.realTopic !== s.topic) detail.push(`for ${s.realTopic}`);
      if (s.originMsgId) detail.push(`origin ${s.originMsgId}`);
      cell(tr, detail.join(", "));
      table.appendChild(tr);
    }
    for (const c of m.consumed) {
      const tr = document.createElement("tr");
      tr.dataset.step = c.consumed ? "consumed" : "not consumed";
      cell(tr, c.consumed ? "consumed" : "not consumed yet");
      cell(tr, c.topic);
      cell(tr, `${c.queueId}:${c.queueOffset}`);
      cell(tr, "-");
      cell(tr, "-");
      cell(tr, "-");
      cell(tr, `group ${c.group}, committed offset ${c.committedOffset}`);
      table.appendChild(tr);
    }
    card.appendChild(table);
    box.appendChild(card);
  }
  status(out.messages.length ? `${out.messages.length} messages found` + (out.truncated ? " (first 10)" : "") : "No message found.");
}

$("#search-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  search().catch((e) => status(e.message, true));
});

// ------------------------------------------------------------------ the latest Spark report

function reportTable(rows) {
  const table = document.createElement("table");
  const cols = [];
  for (const r of rows) for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k);
  const head = document.createElement("tr");
  for (const c of cols) {
    const th = document.createElement("th");
    th.textContent = c;
    head.appendChild(th);
  }
  table.appendChild(head);
  for (const r of rows) {
    const tr = document.createElement("tr");
    for (const c of cols) {
      const v = r[c];
      cell(tr, v !== null && typeof v === "object" ? JSON.stringify(v) : v);
    }
    table.appendChild(tr);
  }
  return table;
}

async function loadReport() {
  const out = await api("GET", "/api/report");
  const summary = $("#report-summary tbody");
  summary.textContent = "";
  const tables = $("#report-tables");
  tables.textContent = "";
  if (!out.dir) {
    $("#report-head").textContent = "No report yet (kairosmq report -o <dir> writes one).";
    status("no report");
    return;
  }
  $("#report-head").textContent = `${out.dir}, written ${fmtTime(out.writtenMs)}`;
  for (const [k, v] of Object.entries(out.summary || {})) {
    const tr = document.createElement("tr");
    cell(tr, k, "id");
    cell(tr, v !== null && typeof v === "object" ? JSON.stringify(v) : v);
    summary.appendChild(tr);
  }
  for (const [name, t] of Object.entries(out.tables)) {
    const d = document.createElement("details");
    d.dataset.table = name;
    d.open = t.rows.length > 0 && t.rows.length <= 20;
    const sum = document.createElement("summary");
    sum.textContent = `${name} (${t.total} rows${t.truncated ? `, first ${t.rows.length} shown` : ""})`;
    d.appendChild(sum);
    if (t.rows.length) d.appendChild(reportTable(t.rows));
    tables.appendChild(d);
  }
  status(`report: ${Object.keys(out.tables).length} tables`);
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
