/* c3m inspector: a read-only view of one store through the HTTP API (no build step, no network but this
   server). The key is sent as `Authorization: Bearer <key>` and kept in sessionStorage; `#key=...&ns=...` in
   the URL fragment (never the query string) sets it for tests and screenshots and is then cleared from the
   address bar. Images are fetched with the header and shown through object URLs. Everything from the store is
   inserted as text (no innerHTML), so stored turns cannot inject markup. */
(function () {
  "use strict";
  const KEY_SLOT = "c3m.inspector.key";
  const S = { key: sessionStorage.getItem(KEY_SLOT) || "", ns: "", index: null, indexSeq: 0, latest: null };
  const $ = (id) => document.getElementById(id);
  const blobs = new Map();

  // ---- DOM helpers -------------------------------------------------------------------------------
  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") n.className = v;
      else if (k === "text") n.textContent = v;
      else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(n.dataset, v);
      else n.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of kids.flat(Infinity)) if (c !== null && c !== undefined && c !== false)
      n.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return n;
  }
  const clear = (n) => { n.replaceChildren(); return n; };
  const fmt = (x) => (typeof x === "number" ? x.toLocaleString("en-US") : String(x));
  const score = (s) => (typeof s === "number" ? s.toFixed(3) : "");
  const when = (t) => (t ? String(t).replace("T", " ").slice(0, 16) : "");
  const enc = (s) => encodeURIComponent(s).replace(/%2F/g, "/");

  // ---- API -----------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, err) { super(err.message || ("HTTP " + status)); this.status = status; this.err = err; }
  }
  async function api(path, opts) {
    const o = Object.assign({ headers: {} }, opts || {});
    o.headers = Object.assign({ Accept: "application/json" }, o.headers);
    if (S.key) o.headers.Authorization = "Bearer " + S.key;
    if (o.json !== undefined) { o.body = JSON.stringify(o.json); o.headers["Content-Type"] = "application/json"; o.method = o.method || "POST"; }
    let r;
    try { r = await fetch(path, o); } catch (e) { throw new ApiError(0, { type: "NetworkError", message: String(e), fix: "is `c3m serve` still running?" }); }
    if (!r.ok) {
      let body = null;
      try { body = await r.json(); } catch (e) { /* not JSON */ }
      throw new ApiError(r.status, (body && body.error) || { type: "HTTP " + r.status, message: r.statusText, fix: null });
    }
    return r;
  }
  const getJSON = async (path, opts) => (await api(path, opts)).json();
  const nsPath = (rest) => "/v1/namespaces/" + enc(S.ns) + rest;

  function showError(e) {
    const err = e instanceof ApiError ? e.err : { type: "Error", message: String(e && e.message || e), fix: null };
    $("error-type").textContent = (err.type || "Error") + (e instanceof ApiError && e.status ? " (" + e.status + ")" : "") + ":";
    $("error-message").textContent = err.message || "";
    $("error-fix").textContent = err.fix || "—";
    $("error-fix").parentElement.hidden = !err.fix;
    $("error-box").dataset.field = err.field || "";
    $("error-box").hidden = false;
  }
  const hideError = () => { $("error-box").hidden = true; };
  const guard = (fn) => async (...a) => { try { await fn(...a); } catch (e) { showError(e); } };

  function loadImage(img, url) {
    if (!blobs.has(url)) blobs.set(url, api(url, { headers: { Accept: "image/*" } }).then((r) => r.blob()).then((b) => URL.createObjectURL(b)));
    blobs.get(url).then((u) => { img.src = u; }, (e) => { img.classList.add("broken"); img.alt = "image failed: " + e.message; });
    return img;
  }
  function image(ref, cls, caption) {
    const img = el("img", { class: cls, alt: caption || ref.sha256.slice(0, 12), title: ref.width + "×" + ref.height + " " + ref.mime, "data-testid": cls, "data-sha256": ref.sha256 });
    loadImage(img, ref.url);
    return el("figure", { class: "fig" }, img, caption ? el("figcaption", { text: caption }) : null);
  }

  // ---- pieces ------------------------------------------------------------------------------------
  function bars(box, list) {
    clear(box);
    for (const b of list || []) {
      const pct = b.limit > 0 ? Math.min(100, (100 * b.used) / b.limit) : (b.used > 0 ? 100 : 0);
      const level = b.used > b.limit ? "over" : pct >= 90 ? "high" : pct >= 60 ? "mid" : "low";
      box.append(el("div", { class: "bar " + level, "data-testid": "bar-" + b.name, dataset: { name: b.name, used: b.used, limit: b.limit } },
        el("div", { class: "bar-label" }, el("span", { class: "bar-name", text: b.name.replace(/_/g, " ") }),
          el("span", { class: "bar-num", text: fmt(b.used) + " / " + fmt(b.limit) })),
        el("div", { class: "bar-track" }, el("div", { class: "bar-fill", style: "width:" + pct.toFixed(1) + "%" }))));
    }
  }
  const entryLink = (id) => el("button", { class: "link entry-link mono", type: "button", "data-entry-id": id, text: id, onclick: () => openEntry(id) });
  const nodeLink = (id, label) => el("button", { class: "link node-link mono", type: "button", "data-node-id": id, text: label || id, title: id, onclick: () => openNode(id) });
  function syncLayout() {  // the detail column only while a chain or a node is open
    const open = !$("chain-panel").hidden || !$("node-panel").hidden;
    $("detail-col").hidden = !open;
    $("layout").classList.toggle("solo", !open);
  }
  const toggle = (ev) => ev.currentTarget.classList.toggle("open");
  const chip = (text, cls) => el("span", { class: "chip " + (cls || ""), text });

  // ---- namespaces ----------------------------------------------------------------------------------
  async function start() {
    hideError();
    const sel = $("ns-select");
    clear(sel).append(el("option", { value: "", text: "—" }));
    $("whoami").textContent = "";
    if (!S.key) { $("key-input").focus(); }
    const who = await getJSON("/v1/whoami");
    $("whoami").textContent = "key " + who.key_id + (who.label ? " (" + who.label + ")" : "") + " · " + who.namespaces.join(", ");
    const rows = await getJSON("/v1/namespaces");
    S.nsRows = rows;
    for (const r of rows) sel.append(el("option", { value: r.namespace, text: r.namespace + "  (" + r.sessions + " sessions)" }));
    const want = S.wantNs && rows.some((r) => r.namespace === S.wantNs) ? S.wantNs : rows.length === 1 ? rows[0].namespace : "";
    if (want) { sel.value = want; await pickNamespace(want); }
    else if (!rows.length) $("ns-stats").textContent = "This key sees no namespaces yet.";
  }

  async function pickNamespace(ns) {
    S.ns = ns; S.latest = null;
    for (const p of ["chain-panel", "node-panel", "trace"]) $(p).hidden = true;
    syncLayout();
    if (!ns) return;
    await loadIndex(null);
  }

  function renderStats(d) {
    const st = d.store || {};
    const box = clear($("ns-stats"));
    const item = (k, v) => el("div", { class: "stat", "data-testid": "stat-" + k }, el("div", { class: "stat-v", text: fmt(v) }), el("div", { class: "stat-k", text: k.replace(/_/g, " ") }));
    box.append(el("div", { class: "stat ns" }, el("div", { class: "stat-v mono", text: d.namespace }), el("div", { class: "stat-k", text: "namespace · " + d.method })));
    for (const k of ["sessions", "raw_nodes", "images", "derived_records", "redacted_nodes"]) if (k in st) box.append(item(k, st[k]));
    box.append(item("index_version", d.version), item("snapshots", (d.versions || []).length));
  }

  // ---- index -----------------------------------------------------------------------------------------
  async function loadIndex(version) {
    const seq = ++S.indexSeq;
    const d = await getJSON(nsPath("/index" + (version ? "?version=" + version : "")));
    if (seq !== S.indexSeq) return;
    S.index = d;
    if (S.latest === null) S.latest = d.version;
    renderStats(d);
    const vs = clear($("version-select"));
    for (const v of (d.versions || []).slice().reverse())
      vs.append(el("option", { value: v, text: "v" + v + (v === S.latest ? " (latest)" : ""), selected: v === d.version }));
    const desc = d.describe || {};
    $("index-meta").textContent = [desc.relation_head && "relation head: " + desc.relation_head, desc.reader && "reader: " + desc.reader,
      d.head !== undefined && "store head: " + d.head].filter(Boolean).join(" · ");
    bars($("index-usage"), d.usage);
    const box = clear($("index-pages"));
    if (!d.pages) {  // an unbounded method: show what it describes
      box.append(el("pre", { class: "describe", text: JSON.stringify(desc, null, 2) }));
      return;
    }
    const byId = new Map((d.entries || []).map((e) => [e.id, e]));
    for (const p of d.pages) {
      const ents = (p.entries || []).map((id) => byId.get(id)).filter(Boolean);
      box.append(el("div", { class: "page", "data-page-id": p.id, "data-testid": "page" },
        el("div", { class: "page-head" }, el("span", { class: "page-id mono", text: p.id }), el("span", { class: "page-summary", text: p.summary || "" }),
          el("span", { class: "muted small", text: ents.length + " entr" + (ents.length === 1 ? "y" : "ies") })),
        ents.map(renderEntry)));
    }
    if (!d.pages.length) box.append(el("p", { class: "muted", text: "The index is empty (no sessions yet)." }));
  }

  function renderEntry(e) {
    const labels = Object.entries(e.labels || {}).map(([k, v]) => chip(k + " " + v, "label"));
    const states = (e.chain || []).length;
    return el("div", { class: "entry", "data-entry-id": e.id, "data-testid": "entry" },
      el("div", { class: "entry-head" }, entryLink(e.id), chip(e.kind || "entry", "kind"),
        e.support !== undefined ? chip("support " + e.support, "support") : null,
        states ? chip(states + " states", "chain") : null, labels,
        el("span", { class: "muted small right", text: when(e.time) })),
      el("div", { class: "entry-text", text: e.text || "", title: "click to expand", onclick: toggle }),
      (e.nodes || []).length ? el("div", { class: "entry-nodes" }, (e.nodes || []).slice(0, 12).map((n) => nodeLink(n)),
        e.nodes.length > 12 ? el("span", { class: "muted small", text: "+" + (e.nodes.length - 12) + " more" }) : null) : null);
  }

  // ---- relation chain ------------------------------------------------------------------------------
  async function openEntry(id) {
    hideError();
    const h = await getJSON(nsPath("/entries/" + encodeURIComponent(id) + "/history"));
    $("chain-entry").textContent = h.entry_id;
    const meta = clear($("chain-meta"));
    meta.append(el("span", {}, chip(h.page, "page"), " ", chip(h.kind, "kind"), " ", Object.entries(h.labels || {}).map(([k, v]) => chip(k + " " + v, "label")),
      (h.links || []).length ? el("span", { class: "muted" }, " links: ", h.links.map((l) => [entryLink(l[0]), " " + l[1] + " " + score(l[2]) + " "])) : null));
    const tl = clear($("chain-timeline"));
    h.chain.forEach((s, i) => tl.append(el("li", { class: "chain-step" + (s.current ? " current" : ""), "data-testid": "chain-step", "data-current": s.current ? "true" : "false" },
      el("div", { class: "step-head" }, el("span", { class: "step-time", text: when(s.time) }),
        el("span", { class: "step-tag", text: s.current ? "current" : "state " + (i + 1) }),
        el("span", { class: "step-states" }, (s.states || []).map((x) => chip(x, "state")))),
      el("div", { class: "step-text", text: s.text }),
      el("div", { class: "step-nodes" }, s.nodes.map((n) => nodeLink(n))))));
    const log = clear($("chain-log"));
    for (const m of h.log) {
      const d = m.detail || {};
      log.append(el("li", { "data-testid": "log-line" }, el("span", { class: "mono", text: "v" + m.version }), " ",
        el("span", { class: "mono", text: m.session_id }), " ", chip(m.action, "action " + m.action),
        d.entry && d.entry !== h.entry_id ? ["→ ", entryLink(d.entry), " "] : null,
        d.candidate ? ["candidate ", d.candidate === h.entry_id ? el("span", { class: "mono", text: d.candidate }) : entryLink(d.candidate), " "] : null,
        d.relation ? chip(d.relation, "relation") : null,
        d.confidence !== undefined ? el("span", { class: "muted small", text: " conf " + score(d.confidence) }) : null,
        d.turns ? el("span", { class: "muted small", text: " turns " + d.turns.join(",") }) : null));
    }
    if (!h.log.length) log.append(el("li", { class: "muted", text: "no maintenance actions name this entry" }));
    $("chain-panel").hidden = false;
    syncLayout();
    $("chain-panel").scrollIntoView({ block: "nearest" });
  }

  // ---- provenance -------------------------------------------------------------------------------------
  async function openNode(id) {
    hideError();
    const n = await getJSON(nsPath("/nodes/" + encodeURIComponent(id)));
    const p = n.provenance || {};
    $("node-id").textContent = n.node_id;
    const meta = clear($("node-meta"));
    const row = (k, v) => [el("dt", { text: k }), el("dd", { "data-testid": "node-" + k.replace(/\W+/g, "-") }, v)];
    meta.append(...[row("role", n.role), row("turn", p.session_id + "#" + p.turn_index), row("time", when(p.time)),
      n.redacted ? row("redacted", "yes (forgotten)") : []].flat());
    $("node-text").textContent = n.text || (n.redacted ? "(redacted)" : "(no text)");
    const imgs = clear($("node-images"));
    for (const im of n.images || []) imgs.append(image(im, "node-image", im.width + "×" + im.height + " · " + im.mime + " · " + fmt(im.nbytes) + " B"));
    const per = clear($("node-perceptions"));
    for (const r of n.perceptions || []) {
      per.append(el("div", { class: "perception", "data-testid": "perception" },
        el("div", { class: "small muted", text: r.backend + " " + r.version }),
        el("div", { class: "caption", text: r.caption || "" }),
        r.crop ? el("div", { class: "crop-row" }, image(r.crop, "crop-image", "crop: " + (r.crop_phrase || "object")),
          el("div", { class: "small" }, el("div", {}, "phrase: ", el("b", { text: r.crop_phrase || "—" })),
            el("div", { class: "mono", text: "box " + JSON.stringify(r.crop_box) }))) : null,
        (r.anchors || []).length ? el("div", { class: "small muted", text: "anchors: " + r.anchors.map((a) => a.label || a.phrase || JSON.stringify(a)).join(", ") }) : null));
    }
    if (!(n.perceptions || []).length) per.append(el("p", { class: "muted small", text: "no derived records (perception off, or no images)" }));
    $("node-panel").hidden = false;
    syncLayout();
    $("node-panel").scrollIntoView({ block: "nearest" });
  }

  // ---- query trace -----------------------------------------------------------------------------------
  async function runTrace(ev) {
    if (ev) ev.preventDefault();
    hideError();
    if (!S.ns) throw new Error("pick a namespace first");
    const body = { question: $("query-input").value };
    const budget = {};
    for (const k of ["pages", "raw_nodes", "images", "text_tokens"]) {
      const v = $("budget-" + k).value;
      if (v !== "") budget[k] = Number(v);
    }
    if (Object.keys(budget).length) body.budget = budget;
    $("query-run").disabled = true;
    let t;
    try { t = await getJSON(nsPath("/trace"), { json: body }); } finally { $("query-run").disabled = false; }
    bars($("trace-budget"), t.budget);
    $("trace-notes").textContent = ["method " + t.method, "pool " + t.pool_size + " nodes", "scored " + t.scored,
      t.dropped_for_budget.length ? "dropped for budget: " + t.dropped_for_budget.length : "", ...(t.notes || [])].filter(Boolean).join(" · ");
    const stage = (id) => clear($(id).querySelector(".stage-body"));
    const sp = stage("stage-pages");
    for (const p of t.pages) sp.append(el("div", { class: "route-item", "data-testid": "route-page", "data-page-id": p.id },
      el("div", { class: "ri-head" }, el("span", { class: "mono", text: p.id }), el("span", { class: "score", text: score(p.score) })),
      el("div", { class: "ri-text", onclick: toggle, text: p.summary })));
    const se = stage("stage-entries");
    for (const e of t.entries) se.append(el("div", { class: "route-item", "data-testid": "route-entry", "data-entry-id": e.id },
      el("div", { class: "ri-head" }, entryLink(e.id), e.page ? el("span", { class: "muted small", text: e.page }) : null, el("span", { class: "score", text: score(e.score) })),
      el("div", { class: "ri-text", onclick: toggle, text: e.text })));
    const so = stage("stage-pool");
    for (const n of t.pool) so.append(el("div", { class: "route-item pool-node" + (n.chosen ? " chosen" : ""), "data-testid": "route-node", "data-node-id": n.node_id, "data-chosen": n.chosen ? "true" : "false" },
      el("div", { class: "ri-head" }, nodeLink(n.node_id, n.session_id !== null ? n.session_id + "#" + n.turn_index : n.node_id), n.chosen ? chip("chosen", "chosen") : null),
      el("div", { class: "ri-text", onclick: toggle, text: n.text })));
    if (t.pool_size > t.pool.length) so.append(el("div", { class: "muted small", text: "+" + (t.pool_size - t.pool.length) + " more in the pool" }));
    const sc = stage("stage-context");
    for (const it of t.context.items) {
      const p = it.provenance || {};
      sc.append(el("div", { class: "route-item ctx-item" + (it.status ? " " + it.status : ""), "data-testid": "ctx-item", "data-node-id": it.node_id, "data-status": it.status || "", "data-form": it.form },
        el("div", { class: "ri-head" }, nodeLink(it.node_id, p.session_id + "#" + p.turn_index), chip(it.form.replace(/_/g, " "), "form"),
          it.status ? chip(it.status + (it.superseded_at ? " " + when(it.superseded_at).slice(0, 10) : ""), "status " + it.status) : null,
          el("span", { class: "muted small", text: when(p.time) + " · " + it.role })),
        it.text ? el("div", { class: "ri-text", onclick: toggle, text: it.text }) : null,
        (it.images || []).length ? el("div", { class: "images" }, it.images.map((im) => image(im, "ctx-image"))) : null));
    }
    if (!t.context.items.length) sc.append(el("p", { class: "muted", text: "nothing chosen" }));
    for (const c of t.context.chains || []) {  // update chains over the chosen items, oldest state first
      sc.append(el("div", { class: "route-item chain-box", "data-testid": "ctx-chain" },
        el("div", { class: "ri-head" }, el("b", { text: "update chain: " + c.subject }), c.entry_id ? entryLink(c.entry_id) : null,
          chip(c.source, "relation")),
        el("div", { class: "small" }, (c.steps || []).map((st, i) => [i ? " → " : "",
          el("span", { class: "chip state", text: (st.states || []).join(", ") || "…" }), " ",
          el("span", { class: "muted", text: when(st.time).slice(0, 10) + (st.turns && st.turns.length ? " " + st.turns.join(" ") : "") })]))));
    }
    $("trace").hidden = false;
  }

  // ---- wiring ---------------------------------------------------------------------------------------
  function readFragment() {
    const h = new URLSearchParams(location.hash.replace(/^#/, ""));
    if (h.get("key")) { S.key = h.get("key"); sessionStorage.setItem(KEY_SLOT, S.key); }
    if (h.get("ns")) S.wantNs = h.get("ns");
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);  // the key leaves the address bar
  }
  document.addEventListener("DOMContentLoaded", () => {
    readFragment();
    $("key-input").value = S.key;
    $("key-form").addEventListener("submit", guard(async (ev) => {
      ev.preventDefault();
      S.key = $("key-input").value.trim();
      sessionStorage.setItem(KEY_SLOT, S.key);
      await start();
    }));
    $("ns-select").addEventListener("change", guard(async (ev) => { hideError(); await pickNamespace(ev.target.value); }));
    $("version-select").addEventListener("change", guard(async (ev) => loadIndex(Number(ev.target.value))));
    $("query-form").addEventListener("submit", guard(runTrace));
    $("error-close").addEventListener("click", hideError);
    for (const b of document.querySelectorAll("[data-close]")) b.addEventListener("click", () => {
      $(b.dataset.close).hidden = true;
      syncLayout();
    });
    // entry and node links call guard themselves through these wrappers
    openEntry = guard(openEntry); openNode = guard(openNode);
    guard(start)();
  });
})();
