// The report's page: plots and the trace viewer, drawn from the embedded document.
// Stored text (messages, errors, ids) is written with textContent only, never as HTML.
// In a live page (served by `harbor-ray view`) the document is re-fetched when the
// dataset's version changes, and everything is redrawn with filters and selection kept.
"use strict";

(function () {
  let doc = JSON.parse(document.getElementById("report-data").textContent);
  let selected = null;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const fmt = (v) => (v === null || v === undefined ? "-" : typeof v === "number" ? +v.toFixed(4) : String(v));
  const time = (s) => (s ? new Date(s * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z" : "-");

  // ---- header and plots ----------------------------------------------------------
  function drawHeader() {
    document.getElementById("report-title").textContent = "harbor_ray report: " + doc.source;
    const m = doc.manifest, t = doc.totals;
    const parts = [
      `${t.rollouts} rollouts, ${t.ok} ok, ${t.turns} model calls`,
      `mean reward ${fmt(t.mean_reward)} over ${t.rewarded}`,
      m.agent ? `agent ${m.agent}` : null, doc.model ? `model ${doc.model}` : null,
      m.sandbox ? `sandbox ${m.sandbox}` : null, m.run ? `run ${m.run}` : null,
      `started ${time(m.started_at)}`, m.ended_at ? `ended ${time(m.ended_at)}` : "not ended",
    ];
    const envs = t.environments || {};
    const ran = Object.keys(envs).sort().map((k) => `${envs[k]} ${k}`).join(", ");
    if (ran) parts.push(`environment: ${ran}`);
    document.getElementById("report-summary").textContent = parts.filter(Boolean).join(" · ");
    // Rows run on the host's userland in place of their task's image (--host-userland):
    // their rewards describe the host, which the page must not let pass as the task's.
    const warning = document.getElementById("report-warning");
    const overridden = envs.host_override || 0;
    warning.hidden = !overridden;
    warning.textContent = overridden ? `${overridden} rollouts ran on the host's userland in ` +
      "place of their task's own image (--host-userland): their rewards are not the tasks'." : "";
  }

  function drawPlots() {
    const section = document.getElementById("plots");
    for (const plot of doc.plots) {
      let box = document.getElementById("plot-" + plot.id);
      if (!box) {
        box = el("div", { class: "plot", id: "plot-" + plot.id },
          el("h2", { text: plot.title }), el("p", { class: "caption" }),
          el("div", { class: "figure" }));
        section.append(box);
      }
      box.querySelector(".caption").textContent = plot.caption;
      const config = { responsive: true, displaylogo: false };
      Plotly.react(box.querySelector(".figure"), plot.figure.data, plot.figure.layout, config);
    }
  }

  // ---- filters and the rollout list ----------------------------------------------
  function fillSelect(id, values) {
    const select = document.getElementById(id);
    const keep = select.value;
    while (select.options.length > 1) select.remove(1);
    for (const v of values) select.append(el("option", { value: v, text: v }));
    select.value = values.includes(keep) ? keep : "";
  }

  function filtered() {
    const task = document.getElementById("filter-task").value;
    const ok = document.getElementById("filter-ok").value;
    const error = document.getElementById("filter-error").value;
    const lo = document.getElementById("filter-reward-min").value;
    const hi = document.getElementById("filter-reward-max").value;
    return doc.rollouts.filter((r) => {
      if (task && r.task !== task) return false;
      if (ok && r.ok !== (ok === "yes")) return false;
      if (error && (r.error_type || "none") !== error) return false;
      // A reward bound keeps only rollouts with a reward: unknown is not in any range.
      if (lo !== "" && (r.reward === null || r.reward < +lo)) return false;
      if (hi !== "" && (r.reward === null || r.reward > +hi)) return false;
      return true;
    });
  }

  function drawList() {
    const uniq = (xs) => [...new Set(xs)].sort();
    fillSelect("filter-task", uniq(doc.rollouts.map((r) => r.task)));
    fillSelect("filter-error", uniq(doc.rollouts.map((r) => r.error_type || "none")));
    const rows = filtered();
    const body = document.querySelector("#rollout-list tbody");
    body.replaceChildren(...rows.map((r) => el("tr",
      { "data-rollout-id": r.rollout_id, class: r.rollout_id === selected ? "selected" : null,
        onclick: () => select(r.rollout_id) },
      el("td", { text: r.rollout_id }), el("td", { text: r.ok ? "yes" : "no" }),
      el("td", { text: r.error_type || "" }), el("td", { text: fmt(r.reward) }),
      el("td", { text: fmt(r.turns) }), el("td", {}, captureBadge(r.capture_level)))));
    document.getElementById("rollout-count").textContent =
      `${rows.length} of ${doc.rollouts.length} rollouts`;
  }

  function select(id) {
    selected = id;
    history.replaceState(null, "", "#rollout=" + encodeURIComponent(id));
    for (const tr of document.querySelectorAll("#rollout-list tbody tr"))
      tr.classList.toggle("selected", tr.dataset.rolloutId === id);
    drawTrace();
  }

  // ---- one rollout's trace -------------------------------------------------------
  function drawTrace() {
    const pane = document.getElementById("trace");
    const trace = selected && doc.traces[selected];
    if (!trace) {
      pane.replaceChildren(el("p", { class: "hint", text: "Pick a rollout on the left." }));
      return;
    }
    const turns = el("div", { id: "trace-turns" });
    pane.replaceChildren(
      header(trace), findings(trace), graph(trace),
      el("h3", { text: `Turns (${trace.turns.length})` }),
      tokenNote(), legend(), turns);
    drawTurns(turns, trace);
  }

  // A long rollout's turns are drawn a slice at a time, each slice its own task, so the
  // page keeps answering while a 200-turn trace fills in; `data-drawn` marks the end.
  const TURN_SLICE = 8;
  let drawing = 0;
  function drawTurns(box, trace) {
    const ticket = ++drawing;
    let next = 0;
    const step = () => {
      if (ticket !== drawing) return;  // another rollout was picked meanwhile
      const end = Math.min(trace.turns.length, next + TURN_SLICE);
      box.append(...trace.turns.slice(next, end).map((t) => turn(t, trace)));
      next = end;
      if (next < trace.turns.length) setTimeout(step, 0);
      else box.dataset.drawn = "all";
    };
    step();
  }

  function kv(rows) {
    return el("table", { class: "kv" }, ...rows.filter((r) => r).map(([k, v]) =>
      el("tr", {}, el("td", { text: k }), el("td", { text: typeof v === "string" ? v : fmt(v) }))));
  }

  // Below `tokens` a rollout is an evaluation: no ids, never trained on.
  function captureBadge(level) {
    if (!level) return "-";
    return el("span", { class: "badge capture-" + level, text: level });
  }

  function header(trace) {
    const policy = Object.entries(trace.policy).map(([k, v]) => [k, v]);
    const rewards = Object.entries(trace.rewards).map(([k, v]) => `${k}=${fmt(v)}`).join(", ");
    const timings = Object.entries(trace.timings).map(([k, v]) => `${k} ${fmt(v)} s`).join(", ");
    const c = trace.counts || {};
    return el("div", { id: "trace-header" }, el("h3", { text: trace.rollout_id }), kv([
      ["task", `${trace.task} (attempt ${trace.attempt})`], ["agent", trace.agent],
      ["model", trace.model || "-"], ["ok", trace.ok ? "yes" : "no"],
      ["capture", trace.capture_level && trace.capture_level !== "tokens"
        ? `${trace.capture_level}: an evaluation, not trainable` : (trace.capture_level || "-")],
      trace.error_type ? ["error", `${trace.error_type}: ${trace.error}`] : null,
      ["reward", trace.reward === null ? "none (unknown, not 0)" : `${fmt(trace.reward)} (key ${trace.reward_key})`],
      ["rewards", rewards || "-"],
      ["counts", `${c.model_calls} calls, ${fmt(c.turns)} turns, ${fmt(c.roots)} roots ` +
        `(${fmt(c.agent_roots)} agent), ${fmt(c.sequences)} sequences, ${fmt(c.discarded)} discarded, ` +
        `${fmt(c.engine_errors)} engine errors, ${fmt(c.budget_stops)} budget stops`],
      ["timings", timings || "-"], ...policy,
      policy.length ? null : ["policy versions", "none recorded (offline run)"],
      ["trial dir", trace.trial_dir || "-"],
    ]));
  }

  function findings(trace) {
    const list = el("ul", {}, ...trace.findings.map((f) => el("li", {},
      el("span", { class: "badge " + f.severity, text: f.severity }), " ",
      el("code", { text: f.code }), f.turn === null ? "" : ` (turn ${f.turn})`, ": ", f.message)));
    return el("div", { id: "trace-findings" },
      el("h3", { text: `Findings (${trace.findings.length})` }),
      trace.findings.length ? list : el("p", { class: "hint", text: "none" }));
  }

  function badges(t, siblings) {
    const out = [];
    if (t.root === null) out.push("unlinked");
    else if (t.parent === null) out.push("root");
    if (t.parent !== null && siblings > 1) out.push("fork");
    if (t.role !== "agent") out.push(t.role);
    if (t.capture_level && t.capture_level !== "tokens") out.push(t.capture_level + " only");
    return out.map((b) => el("span", { class: "badge " + b, text: b }));
  }

  function graph(trace) {
    const children = new Map();
    for (const t of trace.turns) {
      const key = t.parent === null ? "roots" : t.parent;
      if (!children.has(key)) children.set(key, []);
      children.get(key).push(t);
    }
    const item = (t, siblings, forks) => el("li", { "data-turn": t.index },
      el("a", { text: `turn ${t.index}`, onclick: () => {
        const node = document.getElementById("turn-" + t.index);  // null while it is drawn
        if (node) node.scrollIntoView();
      } }),
      ` · ${t.dialect} · ${t.finish_reason} · ${t.token_ids ? t.token_ids.length : 0} sampled`,
      ...badges(t, siblings), forks);
    // A chain (one child each) stays at its parent's level and only a fork indents, so
    // a 200-turn agent loop is a list, not 200 nested ones wider than the page.
    const branch = (turns) => {
      const items = [];
      for (const first of turns) {
        let t = first, siblings = turns.length;
        for (;;) {
          const next = children.get(t.index) || [];
          items.push(item(t, siblings, next.length > 1 ? branch(next) : null));
          if (next.length !== 1) break;
          t = next[0];
          siblings = 1;
        }
      }
      return el("ul", {}, ...items);
    };
    const seqs = trace.sequences.map((s) => el("li", {},
      `sequence ${s.sequence} (${s.role}): turns ${s.turns.join(" → ")}, ${s.length} ids, ` +
      `${s.trained} trained`));
    return el("div", { id: "trace-graph" }, el("h3", { text: "Rollout graph" }),
      children.has("roots") ? branch(children.get("roots")) : el("p", { class: "hint", text: "no turns" }),
      el("p", { class: "hint", text: "Sequences (root-to-leaf paths, as sequences/ stores them):" }),
      el("ul", {}, ...seqs));
  }

  function legend() {
    const colour = HarborTokens.colour;
    return el("p", { class: "legend token-view" },
      el("span", { class: "tok prompt", text: "prompt" }),
      el("span", { class: "tok sampled m1", style: `background:${colour(-0.05)}`, text: "sampled, p≈0.95, trained" }),
      el("span", { class: "tok sampled m1", style: `background:${colour(-2.3)}`, text: "sampled, p≈0.1, trained" }),
      el("span", { class: "tok sampled m0", style: `background:${colour(-0.05)}`, text: "sampled, mask 0" }),
      el("span", { class: "tok sampled nolp m0", text: "no logprob" }),
      doc.tokens && doc.tokens.tokenizer ? el("span", { class: "tok special", text: "special token" }) : null);
  }

  // The pieces table when the report has token text (null: ids only, and the page says why).
  const pieceTable = () => (doc.tokens && doc.tokens.tokenizer ? doc.tokens.pieces : null);

  function tokenNote() {
    const tokens = doc.tokens;
    return el("p", { class: "note", id: "token-note" }, doc.notes.token_text + " ",
      tokens ? el("strong", { id: "tokenizer-note", text: tokens.note }) : null);
  }

  function messageNode(m) {
    if (typeof m !== "object" || m === null) return el("div", { class: "message" }, el("pre", { text: String(m) }));
    let content = m.content;
    if (Array.isArray(content))
      content = content.map((p) => (p && p.type === "text" ? p.text : JSON.stringify(p))).join("\n");
    else if (content !== null && content !== undefined && typeof content !== "string")
      content = JSON.stringify(content, null, 1);
    const calls = (m.tool_calls || []).map((c) => el("div", { class: "tool-call" },
      el("span", { class: "badge", text: "tool call" }), " ",
      el("code", { text: (c.function && c.function.name) || c.type || "?" }), c.id ? ` (${c.id})` : "",
      el("pre", { text: c.function ? c.function.arguments : JSON.stringify(c) })));
    const extra = m.reasoning_content || m.reasoning;
    return el("div", { class: "message " + (m.role || "") },
      el("span", { class: "role", text: m.role || "?" }),
      m.tool_call_id ? el("span", { class: "badge", text: "result of " + m.tool_call_id }) : null,
      extra ? el("pre", { class: "reasoning", text: "[reasoning] " + extra }) : null,
      content ? el("pre", { text: content }) : null, ...calls);
  }

  function promptTokens(t) {
    const details = el("details", { class: "prompt-ids" }, el("summary", {
      text: t.prompt_delta === null ? "prompt: the engine sent no prompt ids"
        : `prompt: ${t.prompt_delta.length} ids after the parent's prompt and reply` +
          (t.parent === null ? " (the whole prompt: a root)" : "") }));
    // Drawn on first open: a root's prompt can hold thousands of ids.
    details.addEventListener("toggle", () => {
      if (!details.open || details.dataset.drawn || !t.prompt_delta) return;
      details.dataset.drawn = "1";
      details.append(HarborTokens.view({ ids: t.prompt_delta, table: pieceTable(), role: "prompt" }));
    });
    return details;
  }

  function sampledTokens(t) {
    if (!t.token_ids) return el("p", { class: "hint", text: "the engine sent no sampled ids" });
    return HarborTokens.view({ ids: t.token_ids, logprobs: t.logprobs, mask: t.mask,
      table: pieceTable(), role: "sampled" });
  }

  function turn(t, trace) {
    const maskNote = t.mask === null && t.token_ids
      ? el("p", { class: "note", text: "No sequence holds this turn's ids: mask unknown." }) : null;
    const policy = Object.entries(t.policy).map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
    const messages = t.messages.map(messageNode);
    return el("div", { class: "turn " + t.role, id: "turn-" + t.index, "data-index": t.index },
      el("h3", {}, `turn ${t.index}`, ...badges(t, 1)),
      el("p", { class: "hint", text: [
        t.parent === null ? "no parent" : `continues turn ${t.parent}`, `dialect ${t.dialect}`,
        `finish ${t.finish_reason}`, `model ${t.request_model}`,
        `${fmt(t.ended_at - t.started_at)} s`, policy || null,
      ].filter(Boolean).join(" · ") }),
      el("details", { class: "messages", open: trace.turns.length <= 12 },
        el("summary", { text: `request: ${t.messages.length} messages` +
          (t.messages_skipped ? ` (after the ${t.messages_skipped} of the parent's request)` : "") }),
        ...messages),
      el("div", { class: "response" }, el("span", { class: "hint", text: "reply (chat-completions form):" }),
        messageNode(t.response)),
      ...tokenView(t), maskNote);
  }

  function tokenView(t) {
    if (t.capture_level && t.capture_level !== "tokens") {
      return [el("p", { class: "hint capture-note", text:
        `captured at the ${t.capture_level} level: no token view (the engine sent no ids); ` +
        `${fmt(t.prompt_tokens)} prompt and ${fmt(t.completion_tokens)} completion tokens ` +
        "by the engine's usage count" })];
    }
    return [promptTokens(t), el("div", { class: "hint", text: "sampled tokens:" }), sampledTokens(t)];
  }

  // ---- start, and the live view ----------------------------------------------------
  function drawAll() {
    drawHeader();
    drawPlots();
    drawList();
    if (selected && !doc.traces[selected]) selected = null;
    drawTrace();
  }

  // Selects redraw on change, number boxes on each keystroke: a box's own change event
  // (on blur) would redraw the list under the click that blurred it, and lose the click.
  for (const id of ["filter-task", "filter-ok", "filter-error"])
    document.getElementById(id).addEventListener("change", drawList);
  for (const id of ["filter-reward-min", "filter-reward-max"])
    document.getElementById(id).addEventListener("input", drawList);
  const hash = decodeURIComponent(location.hash.replace(/^#rollout=/, ""));
  if (hash && doc.traces[hash]) selected = hash;
  drawAll();
  // When the first full draw ended (ms since navigation): what benchmarks and tests read.
  const renderedMs = performance.now();

  const live = window.HARBOR_REPORT_LIVE;
  if (live) {
    const status = document.getElementById("live-status");
    status.hidden = false;
    status.textContent = "live: watching the dataset";
    const poll = async () => {
      try {
        const version = await (await fetch("version", { cache: "no-store" })).text();
        if (version !== doc.version) {
          doc = await (await fetch("data.json", { cache: "no-store" })).json();
          drawHeader(); drawPlots(); drawList();
          // The open trace is redrawn only if it changed: re-rendering would close its details.
          if (selected && !doc.traces[selected]) { selected = null; drawTrace(); }
        }
        status.textContent = `live: ${doc.totals.rollouts} rollouts, checked ${new Date().toLocaleTimeString()}`;
      } catch (err) {
        status.textContent = "live: the server is not answering (" + err + ")";
      }
      setTimeout(poll, live.poll_ms);
    };
    setTimeout(poll, live.poll_ms);
  }
  window.harborReport = { get doc() { return doc; }, select, renderedMs };
})();
