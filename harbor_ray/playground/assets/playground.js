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
  const state = { tasks: [], selected: null, agents: [], timer: null,
                  compare: new Set(), following: null, writesDatasets: false };

  // A refusal in the server's words; a server that cannot be reached, or answers with
  // something other than JSON, in the page's (never the browser's errno text).
  async function api(path, options) {
    let reply, data;
    try {
      reply = await fetch(path, Object.assign({ credentials: "same-origin" }, options));
    } catch (err) {
      throw new Error("the playground did not answer: is its server still running?");
    }
    try { data = await reply.json(); } catch (err) {
      throw new Error("the playground answered " + reply.status + " with no JSON");
    }
    if (!reply.ok) throw new Error(data.error || ("HTTP " + reply.status));
    return data;
  }

  // --- URLs ----------------------------------------------------------------------------
  // Each view has its path (/task/DATASET/NAME, /run/ID, /compare/ID,ID, /runs, /setup):
  // opening a view pushes it, so reload, Back and a shared link reach the same view.
  const part = encodeURIComponent;
  function go(path) {
    if (location.pathname !== path) history.pushState(null, "", path);
  }

  function route() {
    const [kind, ...rest] = location.pathname.split("/").filter(Boolean)
      .map(decodeURIComponent);
    if (kind === "task") {
      showTab("tasks", false);
      openTaskAt(rest);
    } else if (kind === "run" && rest.length) {
      showTab("runs", false);
      openRun(rest[0]);
    } else if (kind === "compare" && rest.length) {
      state.compare = new Set(rest[0].split(",").filter(Boolean));
      showTab("runs", false);
      openCompare();
    } else {
      showTab(kind === "runs" || kind === "setup" ? kind : "tasks", false);
    }
  }

  function showTab(name, push = true) {
    for (const button of document.querySelectorAll("#tabs button")) {
      button.classList.toggle("active", button.dataset.tab === name);
    }
    for (const tab of ["tasks", "runs", "setup"]) $("tab-" + tab).hidden = tab !== name;
    if (push) go(name === "tasks" ? "/" : "/" + name);
    if (name === "runs") {
      refreshRuns();
      // The list alone at /runs (pressed, reloaded or gone Back to), no run left open.
      if (location.pathname === "/runs") {
        state.following = null;
        $("run-detail").hidden = true;
        $("compare").hidden = true;
      }
    }
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

  // The task a path names (DATASET/NAME, or a NAME only one dataset holds); a path that
  // names none says what a task's path is, next to the list.
  function openTaskAt(parts) {
    const [first, second] = parts;
    const found = state.tasks.filter((t) => parts.length === 1 ? t.name === first
      : t.dataset === first && t.name === second);
    if (found.length === 1) { openTask(found[0], null, false); return; }
    const asked = parts.join("/") || "(nothing)";
    $("task-detail").replaceChildren(el("p", (found.length ? "Several datasets hold a task " +
        "named " + asked + ": " : "No task " + asked + " is served here: ") +
      "a task's link is /task/DATASET/NAME. Pick one from the list.", "error"));
  }

  async function openTask(task, preset, push = true) {
    state.selected = task.dataset + "\u0000" + task.name;
    if (push) go("/task/" + part(task.dataset) + "/" + part(task.name));
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
    pane.appendChild(runForm(task, preset));
    // On a phone the detail is below the list: bring it to the tap.
    if (window.matchMedia("(max-width: 700px)").matches) pane.scrollIntoView();
  }

  function field(form, label, input) {
    form.appendChild(el("label", label));
    form.appendChild(input);
    return input;
  }

  // `info`'s agents: those not wired to the capture proxy are listed greyed, with why;
  // the first chosen is terminus-2 when it can run, else the first that can.
  function fillAgents(select, chosen) {
    select.replaceChildren();
    for (const row of state.agents) {
      const option = new Option(row.agent + (row.wired ? "" : " (" + (row.note || "not wired") +
                                                              ")"), row.agent);
      option.disabled = !row.wired;
      select.appendChild(option);
    }
    const runnable = state.agents.filter((row) => row.wired).map((row) => row.agent);
    select.value = runnable.includes(chosen) ? chosen :
      runnable.includes("terminus-2") ? "terminus-2" : (runnable[0] || "");
  }

  function runForm(task, preset) {
    const given = preset || {};
    const form = el("form", null, "run");
    form.appendChild(el("h3", preset ? "Run it again, with changes" : "Run it"));
    form.appendChild(el("span"));
    const agent = field(form, "agent", el("select"));
    agent.name = "agent";
    fillAgents(agent, given.agent);
    const engine = field(form, "engine", el("select"));
    engine.name = "engine";
    engine.appendChild(new Option("the server's", "server"));
    engine.appendChild(new Option("a visitor's engine: my own URL (certified first)",
                                  "visitor"));
    const url = field(form, "engine URL", el("input"));
    url.name = "llm_url"; url.placeholder = "http://host:8000";
    // A URL is read only for a visitor's engine: otherwise the field is off, not ignored.
    const urlOn = () => { url.disabled = engine.value !== "visitor"; };
    engine.addEventListener("change", urlOn);
    if (given.engine && given.engine !== "the server's") {
      engine.value = "visitor";  // its URL is not sent back (its credentials hidden)
    }
    urlOn();
    const dataset = field(form, "write to dataset", el("input"));
    dataset.name = "write_to";
    dataset.placeholder = state.writesDatasets ? "a name (optional)" : "not on this server";
    dataset.disabled = !state.writesDatasets;
    const numbers = {};
    for (const [name, value, step] of [["attempts", 1, 1], ["budget", 20, 1],
                                        ["temperature", "", 0.1], ["max_tokens", "", 1]]) {
      const input = field(form, name, el("input"));
      input.type = "number"; input.name = name; input.step = step;
      input.value = given[name] === undefined || given[name] === null ? value : given[name];
      numbers[name] = input;
    }
    const start = el("button", "Start");
    start.type = "submit";
    form.appendChild(start);
    const said = el("span", "", "hint");
    form.appendChild(said);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (start.disabled) return;
      // Off until the server answers: a second press would start a second run.
      start.disabled = true;
      said.textContent = "starting…"; said.className = "hint";
      const body = { agent: agent.value, dataset: task.dataset, task: task.name,
                     engine: engine.value,
                     llm_url: engine.value === "visitor" ? url.value || null : null,
                     write_to: dataset.value || null };
      for (const [name, input] of Object.entries(numbers)) {
        body[name] = input.value === "" ? null : Number(input.value);
      }
      try {
        const run = await api("/api/runs", { method: "POST", body: JSON.stringify(body),
                                             headers: { "content-type": "application/json" } });
        said.textContent = "";
        showTab("runs", false);
        openRun(run.id, true);
      } catch (err) { said.textContent = err.message; said.className = "error"; }
      start.disabled = false;
    });
    return form;
  }

  // --- Runs --------------------------------------------------------------------------
  const reward = (value) => value === null || value === undefined ? "-" : value.toFixed(3);
  const live = (run) => run.status === "starting" || run.status === "running";

  async function refreshRuns() {
    let data;
    try { data = await api("/api/runs"); } catch (err) { return; }
    state.writesDatasets = data.writes_datasets;
    const body = $("run-list").querySelector("tbody");
    const rows = document.createDocumentFragment();
    for (const run of data.runs) {
      const row = el("tr");
      row.dataset.run = run.id;
      const pick = el("input");
      pick.type = "checkbox"; pick.checked = state.compare.has(run.id);
      pick.setAttribute("aria-label", "compare run " + run.id);
      pick.addEventListener("click", (event) => {
        event.stopPropagation();
        if (pick.checked) state.compare.add(run.id); else state.compare.delete(run.id);
        compareButton();
      });
      const cell = el("td", null, "pick"); cell.appendChild(pick); row.appendChild(cell);
      // Each cell names its column: on a phone the rows are cards, the head hidden.
      for (const [label, text, cls] of [
          ["run", run.id, "id"], ["agent", run.agent, "agent"],
          ["task", run.tasks.join(", "), "task"], ["status", run.status, "status-" + run.status],
          ["rollouts", run.rollouts.length + "/" + (run.planned || "?"), "rollouts"],
          ["calls", run.calls, "calls"], ["reward", reward(run.reward), "reward"],
          ["settings", samplingLine(run.settings), "settings"]]) {
        const td = el("td", text, cls);
        td.dataset.label = label;
        row.appendChild(td);
      }
      row.addEventListener("click", () => openRun(run.id, true));
      rows.appendChild(row);
    }
    body.replaceChildren(rows);
    $("runs-empty").hidden = data.runs.length > 0;
    compareButton();
    clearTimeout(state.timer);
    if (data.runs.some(live) && !$("tab-runs").hidden) state.timer = setTimeout(refreshRuns, 1000);
  }

  function compareButton() {
    const button = $("compare-runs");
    button.disabled = state.compare.size < 2 || state.compare.size > 4;
    button.textContent = "Compare side by side (" + state.compare.size + " of 2-4)";
  }

  // The calls of one run, read after a cursor: each read asks only for what is new.
  function callReader(runId) {
    return { runId, next: 0, calls: [], run: null,
      async read() {  // resolves with how many calls it added
        const before = this.calls.length;
        for (;;) {
          const page = await api("/api/calls?" + new URLSearchParams({ id: this.runId,
                                                                       after: this.next }));
          this.run = page.run; this.next = page.next;
          this.calls.push(...page.calls);
          if (!page.more) return this.calls.length - before;
        }
      } };
  }

  // One view at a time follows the server: a run (its calls appended as they arrive) or
  // a comparison; opening either stops the other's polling.
  function follow(step) {
    const token = {};
    state.following = token;
    const tick = async () => {
      if (state.following !== token) return;
      let again = false;
      try { again = await step(); } catch (err) { again = false; }
      if (again && state.following === token) setTimeout(tick, 1000);
    };
    tick();
  }

  function openRun(runId, push) {
    if (push) go("/run/" + part(runId));
    $("compare").hidden = true;
    const pane = $("run-detail");
    pane.hidden = false;
    const head = el("div");
    const outcomes = el("div");
    const list = el("div", null, "calls");
    list.id = "run-calls";
    const none = el("p", "No model calls yet.", "hint");
    pane.replaceChildren(head, outcomes, el("h3", "Model calls"), none, list);
    const reader = callReader(runId);
    follow(async () => {
      let fresh;
      try { fresh = await reader.read(); } catch (err) {
        if (reader.run) throw err;  // a missed beat of a run shown: the next poll is not
        head.replaceChildren(el("h2", "Run " + runId), el("p", err.message + ": a run is " +
          "seen only by the browser that started it, unless the server shares runs " +
          "(--share-runs).", "error"));
        return false;
      }
      const run = reader.run;
      const again = el("button", "Run again with changes");
      again.type = "button";
      again.addEventListener("click", () => runAgain(run));
      head.replaceChildren(el("h2", "Run " + run.id), el("p", runLine(run), "hint"),
                           stagesLine(run), settingsBox(run.settings, new Set()), again);
      if (run.error) head.appendChild(el("pre", run.error, "error"));
      outcomes.replaceChildren(renderOutcomes(run));
      appendCalls(list, reader.calls.slice(reader.calls.length - fresh));
      none.hidden = reader.calls.length > 0;
      none.textContent = stage(run);
      return live(run);
    });
  }

  // What each stage a run reaches is, in words: the run's own (queued, preparing, done,
  // failed) and its rollouts' trials' (harbor_ray.trials.stages.Stage), as the server
  // heard them.
  const STAGES = {
    queued: ["queued", "Queued: waiting for a free slot (a few runs go at once)."],
    preparing: ["preparing", "Preparing: checking the task and the engine."],
    sandbox: ["sandbox starting", "Starting the sandbox."],
    agent_setup: ["agent setup", "Setting up the agent (installing its harness)."],
    agent: ["agent running", "Agent running: waiting for its first model call."],
    verifying: ["verifying", "Verifying: the task's tests are running."],
    ended: ["rollout ended", "The rollout ended; its sandbox is torn down."],
    done: ["done", "No model calls."],
    failed: ["failed", "No model calls."],
  };
  const stageWords = (stage) => STAGES[stage] || [stage, stage];

  // Where a run is before its first model call: its last stage.
  function stage(run) {
    const last = run.stages[run.stages.length - 1];
    return last ? stageWords(last.stage)[1] : "No model calls yet.";
  }

  // Every stage the run reached, with the seconds it spent there (the last, while the
  // run is live, so far); a rollout's stages named by its attempt when there are several.
  function stagesLine(run) {
    const box = el("p", null, "stages");
    const rollouts = [...new Set(run.stages.map((m) => m.rollout).filter((r) => r))];
    run.stages.forEach((mark, i) => {
      const next = run.stages[i + 1];
      const end = next ? next.at : (live(run) ? Date.now() / 1000 : null);
      const who = mark.rollout && rollouts.length > 1
        ? "#" + (rollouts.indexOf(mark.rollout) + 1) + " " : "";
      box.appendChild(el("span", who + stageWords(mark.stage)[0] +
        (end === null ? "" : " " + Math.max(0, end - mark.at).toFixed(1) + " s"),
        next ? "" : "current"));
    });
    return box;
  }

  // The Tasks tab, the run's task open with its form filled from the run's settings.
  function runAgain(run) {
    const task = state.tasks.find((t) => t.dataset === run.dataset && t.name === run.tasks[0]);
    if (!task) return;
    showTab("tasks", false);
    openTask(task, run.settings);
  }

  const SETTINGS = [["model", "model"], ["engine", "engine"], ["agent", "agent"],
                    ["temperature", "temperature"], ["max_tokens", "max tokens"],
                    ["budget", "budget"], ["attempts", "attempts"]];
  const setting = (settings, key) => {
    const value = (settings || {})[key];
    return value === null || value === undefined ? (key === "model" ? "not known yet"
      : key === "budget" ? "none" : "the agent's") : String(value);
  };

  // A run's settings, one span each; those in `differs` marked (a comparison's).
  function settingsBox(settings, differs) {
    const box = el("p", null, "settings");
    for (const [key, label] of SETTINGS) {
      box.appendChild(el("span", label + " " + setting(settings, key),
                         differs.has(key) ? "differs" : ""));
    }
    return box;
  }

  const samplingLine = (settings) => ["temperature", "max_tokens", "budget"]
    .map((key) => key.replace("_", " ") + " " + setting(settings, key)).join(", ");

  const seconds = (s) => s < 90 ? s.toFixed(1) + " s" : (s / 60).toFixed(1) + " min";
  function duration(run) {
    const start = Date.parse(run.started_at);
    const end = run.ended_at ? Date.parse(run.ended_at) : Date.now();
    // Its times are in whole seconds: say less than a second rather than "0.0 s".
    const spent = (end - start) / 1000;
    return (run.ended_at ? "duration " : "running for ") +
      (spent < 1 ? "under 1 s" : seconds(spent));
  }

  // A few calls a frame: a long run's calls drawn at once would hold the page for the
  // whole layout (hundreds of ms for 200 calls), these keep each frame short.
  const CALLS_A_FRAME = 20;
  function appendCalls(list, calls) {
    const fragment = document.createDocumentFragment();
    for (const call of calls.slice(0, CALLS_A_FRAME)) fragment.appendChild(renderCall(call));
    list.appendChild(fragment);
    if (calls.length > CALLS_A_FRAME) {
      requestAnimationFrame(() => appendCalls(list, calls.slice(CALLS_A_FRAME)));
    }
  }

  function runLine(run) {
    return run.agent + " on " + run.tasks.join(", ") + " (" + run.dataset + "), " +
      run.status + ", " + run.calls + " model calls, started " + run.started_at + ", " +
      duration(run) + (run.writes_to ? ", written to dataset " + run.writes_to : "");
  }

  // Each rollout: pass or fail by its reward (ok only says nothing broke), why its calls
  // stopped, its budget stops, its phases' seconds, then the verifier's output.
  function renderOutcomes(run) {
    const box = el("div", null, "outcomes");
    for (const r of run.rollouts) {
      const item = el("div", null, "outcome");
      const head = el("p");
      head.appendChild(el("strong", r.verdict, "verdict-" + r.verdict.replace(" ", "-")));
      head.appendChild(document.createTextNode(" rollout " + r.rollout_id + ", reward " +
        reward(r.reward) + ", " + r.model_calls + " model calls" +
        (r.duration_s === null || r.duration_s === undefined ? ""
          : ", duration " + seconds(r.duration_s)) +
        (r.error_type ? ", " + r.error_type + ": " + (r.error || "") : "")));
      item.appendChild(head);
      const why = (r.finishes || []).map((f) => f.reason + " ×" + f.count +
                                              (f.label ? " (" + f.label + ")" : ""));
      if (r.budget_stops) why.push(r.budget_stops + " budget stop(s): the call budget was spent");
      if (why.length) item.appendChild(el("p", "calls ended: " + why.join(", "),
                                          r.truncated ? "truncated" : "hint"));
      const phases = Object.entries(r.timings || {});
      if (phases.length) {
        item.appendChild(el("p", "phases: " + phases.map(([k, v]) => k + " " + seconds(v))
          .join(", "), "hint"));
      }
      if (r.verifier_output) {
        const verifier = el("details");
        verifier.appendChild(el("summary", "verifier output"));
        verifier.appendChild(el("pre", r.verifier_output));
        item.appendChild(verifier);
      }
      box.appendChild(item);
    }
    return box;
  }

  // One model call: what the agent sent that the previous call did not, the reply, its
  // tool calls, then its token section.
  function renderCall(call) {
    const box = el("article", null, "call" + (call.auxiliary ? " auxiliary" : ""));
    box.dataset.seq = call.seq;
    box.appendChild(el("h4", "call " + (call.index + 1) + " · rollout " + call.rollout +
      " · " + call.finish_reason + " · " + call.prompt_tokens + " in / " +
      call.completion_tokens + " out" +
      (call.latency_s === null ? "" : " · " + call.latency_s.toFixed(2) + " s") +
      (call.auxiliary ? " · auxiliary" : "")));
    if (call.earlier) {
      box.appendChild(el("p", call.earlier + " earlier messages, as the previous call sent them",
                         "hint"));
    }
    for (const message of call.messages) box.appendChild(renderMessage(message, "sent"));
    box.appendChild(renderMessage(call.reply, "reply"));
    box.appendChild(renderCallTokens(call));
    return box;
  }

  // A sent message this long (a system prompt, a task's instruction) is folded: the
  // calls after it are what a reader came for.
  const FOLD_CHARS = 1200;
  function renderMessage(message, kind) {
    const box = el("div", null, "message " + kind);
    box.appendChild(el("span", (message.role || "?") + (kind === "reply" ? " (reply)" : ""),
                       "role"));
    const content = textOf(message.content);
    if (message.reasoning_content) box.appendChild(el("pre", message.reasoning_content, "reasoning"));
    if (content && kind === "sent" && content.length > FOLD_CHARS) {
      const fold = el("details", null, "fold");
      fold.appendChild(el("summary", content.length + " characters: open to read"));
      fold.appendChild(el("pre", content));
      box.appendChild(fold);
    } else if (content) box.appendChild(el("pre", content));
    for (const tool of message.tool_calls || []) {
      const fn = tool.function || {};
      box.appendChild(el("pre", "→ " + (fn.name || "?") + " " + (fn.arguments || ""), "tool-call"));
    }
    return box;
  }

  const textOf = (content) => typeof content === "string" ? content :
    Array.isArray(content) ? content.map((part) => part.text || "[" + part.type + "]").join("\n")
      : content === null || content === undefined ? "" : JSON.stringify(content);

  // A call's token section: its sampled ids as text (the report's token view, with its
  // toggle to the ids and logprob colours), drawn when opened (a long run draws none it
  // is not asked for). Without a tokenizer the view shows ids, and the summary says so.
  function renderCallTokens(call) {
    const section = el("details", null, "tokens");
    if (!call.token_ids) {
      section.appendChild(el("summary", "no token ids (recorded below the tokens level)"));
      return section;
    }
    section.appendChild(el("summary", call.token_ids.length + " sampled tokens" +
                           (call.pieces ? "" : " (" + (call.tokens_note || "ids") + ")")));
    section.addEventListener("toggle", () => {
      if (!section.open || section.childElementCount > 1) return;
      section.appendChild(HarborTokens.view({
        ids: call.token_ids, logprobs: call.logprobs, mask: null,
        table: call.pieces || null, role: "sampled"}));
    });
    return section;
  }

  // --- Side by side ------------------------------------------------------------------
  // Two to four runs in columns, one row per call index (on a phone each row's calls
  // stack, each labelled with its run).
  function openCompare(push) {
    const ids = [...state.compare].slice(0, 4);
    if (push) go("/compare/" + ids.map(part).join(","));
    $("run-detail").hidden = true;
    const pane = $("compare");
    pane.hidden = false;
    const readers = ids.map(callReader);
    let drawn = -1;
    follow(async () => {
      await Promise.all(readers.map((r) => r.read()));
      const total = readers.reduce((n, r) => n + r.calls.length + r.run.rollouts.length, 0);
      if (total !== drawn) { drawComparison(pane, readers); drawn = total; }
      return readers.some((r) => live(r.run));
    });
  }

  const callSays = (call) => JSON.stringify([textOf(call.reply.content),
    (call.reply.tool_calls || []).map((t) => t.function || {}), call.finish_reason]);

  function drawComparison(pane, readers) {
    const grid = el("div", null, "compare-grid");
    grid.style.setProperty("--columns", readers.length);
    // The settings that are not the same in every run compared, marked in each head.
    const differs = new Set(SETTINGS.map(([key]) => key).filter((key) =>
      new Set(readers.map((r) => setting(r.run.settings, key))).size > 1));
    for (const r of readers) {
      const head = el("div", null, "compare-head");
      head.appendChild(el("h3", "Run " + r.run.id));
      head.appendChild(el("p", runLine(r.run) + ", reward " + reward(r.run.reward), "hint"));
      head.appendChild(settingsBox(r.run.settings, differs));
      head.appendChild(renderOutcomes(r.run));
      grid.appendChild(head);
    }
    const rows = Math.max(...readers.map((r) => r.calls.length));
    for (let i = 0; i < rows; i++) {
      // A row whose calls did not all answer the same (reply, tool calls, finish) is
      // marked: where compared runs part ways is what a comparison is for.
      const said = new Set(readers.map((r) => i < r.calls.length ? callSays(r.calls[i]) : null));
      for (const r of readers) {
        const cell = el("div", null, "compare-cell" + (said.size > 1 ? " differs" : ""));
        cell.appendChild(el("p", "run " + r.run.id + ", call " + (i + 1), "compare-label"));
        if (said.size > 1) cell.appendChild(el("p", "differs between the runs", "differs-note"));
        cell.appendChild(i < r.calls.length ? renderCall(r.calls[i]) : el("p", "no call", "hint"));
        grid.appendChild(cell);
      }
    }
    pane.replaceChildren(el("h2", "Side by side: " + readers.length + " runs, calls aligned by index"),
                         grid);
  }

  // --- Setup -------------------------------------------------------------------------
  // A table whose rows become cards on a phone (each cell labelled by its column).
  function table(columns, rows) {
    const node = el("table", null, "cards");
    const head = el("tr", null, "head");
    for (const c of columns) head.appendChild(el("th", c));
    node.appendChild(head);
    for (const row of rows) {
      const tr = el("tr");
      for (const c of columns) {
        const v = row[c];
        const td = el("td", typeof v === "boolean" ? (v ? "yes" : "no") : v);
        td.dataset.label = c;
        tr.appendChild(td);
      }
      node.appendChild(tr);
    }
    const wrap = el("div", null, "table-wrap");
    wrap.appendChild(node);
    return wrap;
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
    $("compare-runs").addEventListener("click", () => openCompare(true));
    window.addEventListener("popstate", route);
    const data = await api("/api/tasks");
    state.tasks = data.tasks.map((t) => Object.assign(t, {
      haystack: (t.name + " " + t.summary + " " + t.dataset).toLowerCase() }));
    renderTaskList();
    try { state.writesDatasets = (await api("/api/runs")).writes_datasets; } catch (err) { }
    route();
    try { state.agents = (await api("/api/setup")).agents; } catch (err) { state.agents = []; }
    // A task opened before the agents were known has an empty list: fill it now.
    for (const select of document.querySelectorAll("form.run select[name=agent]")) {
      if (!select.options.length) fillAgents(select);
    }
  }
  start();
})();
