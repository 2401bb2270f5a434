// The playground's page: reads /api/* and writes every served string with textContent,
// never as HTML, so nothing a task or a rollout holds can become markup.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const el = (tag, text, cls) => {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  };
  const state = { tasks: [], selected: null, agents: [], openRun: null, timer: null };

  async function api(path, options) {
    const reply = await fetch(path, Object.assign({ credentials: "same-origin" }, options));
    const data = await reply.json();
    if (!reply.ok) throw new Error(data.error || ("HTTP " + reply.status));
    return data;
  }

  function showTab(name) {
    for (const button of document.querySelectorAll("#tabs button")) {
      button.classList.toggle("active", button.dataset.tab === name);
    }
    for (const tab of ["tasks", "runs", "setup"]) $("tab-" + tab).hidden = tab !== name;
    if (name === "runs") refreshRuns();
    if (name === "setup") loadSetup();
  }

  // --- Tasks -------------------------------------------------------------------------
  function renderTaskList() {
    const words = $("task-filter").value.toLowerCase().split(/\s+/).filter(Boolean);
    const list = $("task-list");
    const shown = state.tasks.filter((t) => words.every((w) => t.haystack.includes(w)));
    const fragment = document.createDocumentFragment();
    for (const task of shown.slice(0, 500)) {
      const item = el("li");
      item.dataset.key = task.dataset + "\u0000" + task.name;
      item.appendChild(el("div", task.name));
      item.appendChild(el("div", task.summary, "summary"));
      if (state.selected === item.dataset.key) item.classList.add("selected");
      item.addEventListener("click", () => openTask(task));
      fragment.appendChild(item);
    }
    list.replaceChildren(fragment);
    $("task-count").textContent = shown.length + " of " + state.tasks.length + " tasks" +
      (shown.length > 500 ? " (first 500 listed)" : "");
  }

  async function openTask(task) {
    state.selected = task.dataset + "\u0000" + task.name;
    renderTaskList();
    const pane = $("task-detail");
    const query = new URLSearchParams({ dataset: task.dataset, task: task.name });
    let detail;
    try { detail = await api("/api/task?" + query); } catch (err) {
      pane.replaceChildren(el("p", err.message, "error")); return;
    }
    pane.replaceChildren(el("h2", detail.name), el("p", "dataset " + detail.dataset, "hint"));
    pane.appendChild(el("h3", "Instruction"));
    pane.appendChild(el("pre", detail.instruction));
    pane.appendChild(el("h3", "Settings (task.toml)"));
    pane.appendChild(el("pre", detail.settings_text));
    pane.appendChild(el("h3", "Files"));
    const files = el("div", null, "files");
    const shown = el("pre", "");
    shown.hidden = true;
    for (const path of detail.files) {
      const link = el("a", path);
      link.addEventListener("click", async () => {
        const q = new URLSearchParams({ dataset: task.dataset, task: task.name, path });
        try { shown.textContent = (await api("/api/file?" + q)).text; } catch (err) {
          shown.textContent = err.message;
        }
        shown.hidden = false;
      });
      files.appendChild(link);
    }
    pane.appendChild(files);
    pane.appendChild(shown);
    pane.appendChild(runForm(task));
  }

  function field(form, label, input) {
    form.appendChild(el("label", label));
    form.appendChild(input);
    return input;
  }

  function runForm(task) {
    const form = el("form", null, "run");
    form.appendChild(el("h3", "Run it"));
    form.appendChild(el("span"));
    const agent = field(form, "agent", el("select"));
    agent.name = "agent";
    for (const name of state.agents) agent.appendChild(new Option(name, name));
    const engine = field(form, "engine", el("select"));
    engine.name = "engine";
    engine.appendChild(new Option("the server's", "server"));
    engine.appendChild(new Option("my own URL (certified first)", "visitor"));
    const url = field(form, "engine URL", el("input"));
    url.name = "llm_url"; url.placeholder = "http://host:8000";
    const numbers = {};
    for (const [name, value, step] of [["attempts", 1, 1], ["budget", 20, 1],
                                        ["temperature", "", 0.1], ["max_tokens", "", 1]]) {
      const input = field(form, name, el("input"));
      input.type = "number"; input.name = name; input.value = value; input.step = step;
      numbers[name] = input;
    }
    const go = el("button", "Start");
    go.type = "submit";
    form.appendChild(go);
    const said = el("span", "", "hint");
    form.appendChild(said);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = { agent: agent.value, dataset: task.dataset, task: task.name,
                     engine: engine.value, llm_url: url.value || null };
      for (const [name, input] of Object.entries(numbers)) {
        body[name] = input.value === "" ? null : Number(input.value);
      }
      try {
        const run = await api("/api/runs", { method: "POST", body: JSON.stringify(body),
                                             headers: { "content-type": "application/json" } });
        state.openRun = run.id;
        showTab("runs");
      } catch (err) { said.textContent = err.message; said.className = "error"; }
    });
    return form;
  }

  // --- Runs --------------------------------------------------------------------------
  const reward = (value) => value === null || value === undefined ? "-" : value.toFixed(3);

  async function refreshRuns() {
    let data;
    try { data = await api("/api/runs"); } catch (err) { return; }
    const body = $("run-list").querySelector("tbody");
    const rows = document.createDocumentFragment();
    for (const run of data.runs) {
      const row = el("tr");
      row.dataset.run = run.id;
      for (const text of [run.id, run.agent, run.tasks.join(", ")]) row.appendChild(el("td", text));
      row.appendChild(el("td", run.status, "status-" + run.status));
      row.appendChild(el("td", run.rollouts.length + "/" + (run.planned || "?")));
      row.appendChild(el("td", reward(run.reward)));
      row.addEventListener("click", () => { state.openRun = run.id; renderRun(run); });
      rows.appendChild(row);
      if (run.id === state.openRun) renderRun(run);
    }
    body.replaceChildren(rows);
    $("runs-empty").hidden = data.runs.length > 0;
    const busy = data.runs.some((r) => r.status === "starting" || r.status === "running");
    clearTimeout(state.timer);
    if (busy && !$("tab-runs").hidden) state.timer = setTimeout(refreshRuns, 1000);
  }

  function renderRun(run) {
    const pane = $("run-detail");
    pane.replaceChildren(el("h2", "Run " + run.id),
      el("p", run.agent + " on " + run.tasks.join(", ") + " (" + run.dataset + "), " +
              run.status + ", started " + run.started_at, "hint"));
    if (run.error) pane.appendChild(el("pre", run.error, "error"));
    const table = el("table");
    const head = el("tr");
    for (const name of ["rollout", "ok", "reward", "model calls", "error"]) {
      head.appendChild(el("th", name));
    }
    table.appendChild(head);
    for (const r of run.rollouts) {
      const row = el("tr");
      for (const text of [r.rollout_id, r.ok ? "yes" : "no", reward(r.reward), r.model_calls,
                          r.error_type ? r.error_type + ": " + (r.error || "") : ""]) {
        row.appendChild(el("td", text));
      }
      table.appendChild(row);
    }
    pane.appendChild(table);
  }

  // --- Setup -------------------------------------------------------------------------
  function table(columns, rows) {
    const node = el("table");
    const head = el("tr");
    for (const c of columns) head.appendChild(el("th", c));
    node.appendChild(head);
    for (const row of rows) {
      const tr = el("tr");
      for (const c of columns) {
        const v = row[c];
        tr.appendChild(el("td", typeof v === "boolean" ? (v ? "yes" : "no") : v));
      }
      node.appendChild(tr);
    }
    return node;
  }

  let setupLoaded = false;
  async function loadSetup() {
    if (setupLoaded) return;
    const pane = $("setup");
    let data;
    try { data = await api("/api/setup"); } catch (err) {
      pane.replaceChildren(el("p", err.message, "error")); return;
    }
    setupLoaded = true;
    pane.replaceChildren(el("h2", "Agents"),
      table(["agent", "runs", "needs_model", "dialect", "wired", "note"], data.agents),
      el("h2", "Agent CLIs installed"),
      table(["agent", "package", "version", "installed"], data.installed_agents),
      el("h2", "Sandbox backends"), table(["name", "usable", "reason"], data.sandboxes),
      el("h2", "Engine"));
    const engine = data.engine;
    pane.appendChild(el("p", engine === null ? "No engine configured (--llm-url)." :
      engine.certified ? "certified: serves " + engine.served_model + ", logprobs " +
        engine.logprobs_mode + ", tool calling " + (engine.tool_calling ? "yes" : "no")
        : "refused: " + engine.error));
  }

  // --- start ---------------------------------------------------------------------------
  async function start() {
    const session = await api("/api/session");
    if (!session.admitted) { $("login").hidden = false; return; }
    $("main").hidden = false;
    for (const button of document.querySelectorAll("#tabs button")) {
      button.addEventListener("click", () => showTab(button.dataset.tab));
    }
    $("task-filter").addEventListener("input", renderTaskList);
    const data = await api("/api/tasks");
    state.tasks = data.tasks.map((t) => Object.assign(t, {
      haystack: (t.name + " " + t.summary + " " + t.dataset).toLowerCase() }));
    renderTaskList();
    try {
      state.agents = (await api("/api/setup")).agents.map((a) => a.agent);
    } catch (err) { state.agents = []; }
  }
  start();
})();
