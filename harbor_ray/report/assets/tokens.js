// The token view: a turn's ids as text, coloured by logprob, with a toggle to the ids.
// Self-contained (its own style), for any page that has the ids and a pieces table
// (harbor_ray/report/token_text.py: {"id": [kind, value]}, kind t text, s special, b
// the bytes in hex). Display only: the ids are the record, and each id stays one span,
// never merged with its neighbours or split. Text is decoded as a stream, like the
// tokenizer decodes the whole sequence: an id holding part of a UTF-8 character shows
// its bytes, and the id that completes it shows the character.
// Stored text is written with textContent only, never as HTML.
"use strict";

window.HarborTokens = (function () {
  const STYLE = `
.token-view .tokens { font-family: ui-monospace, monospace; font-size: 0.8em; line-height: 1.9;
  overflow-wrap: anywhere; }
.token-view .token-bar { display: flex; flex-wrap: wrap; gap: 0.6em; align-items: center;
  font-size: 0.8em; color: #555; }
.token-view .token-bar button { font-size: 1em; }
.token-view .token-inspect { font-family: ui-monospace, monospace; min-height: 1.3em;
  overflow-wrap: anywhere; }
.tok { display: inline-block; padding: 0 0.2em; margin: 0 1px; border-radius: 2px;
  white-space: pre; cursor: default; }
.tok.prompt { color: #555; background: #f4f4f4; }
.tok.sampled.m1 { border-bottom: 2px solid #222; }
.tok.sampled.m0 { opacity: 0.6; border-bottom: 2px dashed #999; }
.tok.sampled.nolp { background: repeating-linear-gradient(45deg, #ddd, #ddd 3px, #fff 3px, #fff 6px); }
.tok.special { font-style: italic; outline: 1px solid #7a5cc0; }
.tok.partial, .tok.unknown { color: #a33; }
.tok .ws { color: #999; }
.token-view.ids .tok { white-space: normal; }
.token-scale { display: inline-block; width: 8em; height: 0.8em; vertical-align: middle;
  border: 1px solid #ccc; }`;

  // Sequential, colour-blind-safe enough: p=1 pale blue, p=0 orange; lightness keeps text readable.
  function colour(logprob) {
    const p = Math.min(1, Math.max(0, Math.exp(logprob)));
    return `hsl(${Math.round(25 + 185 * p)}, 80%, ${Math.round(72 + 14 * p)}%)`;
  }

  function installStyle() {
    if (document.getElementById("harbor-tokens-style")) return;
    const style = document.createElement("style");
    style.id = "harbor-tokens-style";
    style.textContent = STYLE;
    document.head.append(style);
  }

  const hexBytes = (hex) => Uint8Array.from(hex.match(/../g) || [], (h) => parseInt(h, 16));
  const encoder = new TextEncoder();

  // Each id's piece: what it shows, its share of the decoded text, its kind.
  function pieces(ids, table) {
    const decoder = new TextDecoder("utf-8");
    const out = new Array(ids.length);
    for (let k = 0; k < ids.length; k++) {
      const entry = table[ids[k]];
      if (!entry) {  // outside the tokenizer's vocab: an id, and the end of any character
        out[k] = { kind: "unknown", label: "#" + ids[k], text: decoder.decode() };
        continue;
      }
      const [code, value] = entry;
      const bytes = code === "b" ? hexBytes(value) : encoder.encode(value);
      const text = decoder.decode(bytes, { stream: true });
      if (code === "s") out[k] = { kind: "special", label: value, text };
      else if (code === "t") out[k] = { kind: "text", label: text, text };
      else out[k] = { kind: "partial", label: text || byteLabel(bytes), text, bytes: value };
    }
    if (ids.length) out[ids.length - 1].text += decoder.decode();
    return out;
  }

  function byteLabel(bytes) {
    return Array.from(bytes, (b) => (b > 0x20 && b < 0x7f ? String.fromCharCode(b)
      : "\\x" + b.toString(16).padStart(2, "0"))).join("");
  }

  // Whitespace made visible: a space is a faint dot, a tab an arrow, a newline ↵ and a break.
  function fill(span, label) {
    const parts = label.split(/([ \t\n\r])/);
    for (const part of parts) {
      if (!part) continue;
      const mark = { " ": "·", "\t": "→", "\n": "↵", "\r": "␍" }[part];
      if (mark) {
        const ws = document.createElement("span");
        ws.className = "ws";
        ws.textContent = mark;
        span.append(ws);
      } else span.append(part);
    }
  }

  const fmtLp = (lp) => (lp === null ? "none" : `${lp.toFixed(4)} (p=${Math.exp(lp).toFixed(3)})`);

  // opts: ids, logprobs (null for prompt ids), mask (null: unknown), table (the pieces
  // table, null: no tokenizer), role "sampled" or "prompt", mode "text" or "ids".
  function view(opts) {
    const { ids, table } = opts;
    const logprobs = opts.logprobs || null, mask = opts.mask || null;
    const role = opts.role || "sampled";
    const hasText = !!table;
    let mode = hasText ? (opts.mode || HarborTokens.mode) : "ids";
    const shown = hasText ? pieces(ids, table) : null;
    const root = document.createElement("div");
    root.className = "token-view";
    const tokens = document.createElement("div");
    tokens.className = `tokens ${role}-ids`;
    const inspect = document.createElement("div");
    inspect.className = "token-inspect hint";
    inspect.setAttribute("aria-live", "polite");

    function describe(k) {
      const lp = logprobs ? logprobs[k] : null;
      const m = mask ? mask[k] : null;
      const p = shown && shown[k];
      return [`id ${ids[k]}`, p ? `${p.kind} ${JSON.stringify(p.kind === "partial" && !p.text ? p.label : p.text)}` : null,
        p && p.bytes ? `bytes ${p.bytes}` : null,
        role === "sampled" ? `logprob ${fmtLp(lp)}` : "prompt",
        `mask ${role === "prompt" ? 0 : m === null ? "unknown" : m}`, `${role} #${k}`]
        .filter(Boolean).join(" · ");
    }

    function draw() {
      const frag = document.createDocumentFragment();
      for (let k = 0; k < ids.length; k++) {
        const span = document.createElement("span");
        const lp = logprobs ? logprobs[k] : null;
        const m = mask ? mask[k] : null;
        let cls = `tok ${role}`;
        if (role === "sampled") {
          cls += ` m${m === 1 ? 1 : 0}` + (lp === null ? " nolp" : "");
          span.dataset.logprob = lp === null ? "none" : lp;
          span.dataset.mask = m === null ? "unknown" : m;
          if (lp !== null) span.style.background = colour(lp);
        }
        span.dataset.k = k;
        span.dataset.id = ids[k];
        span.title = describe(k);
        if (mode === "text") {
          const p = shown[k];
          cls += " " + p.kind;
          fill(span, p.label);
          span.className = cls;
          frag.append(span);
          if (p.label.endsWith("\n")) frag.append(document.createElement("br"));
        } else {
          span.className = cls;
          span.textContent = ids[k];
          frag.append(span);
        }
      }
      tokens.replaceChildren(frag);
      root.classList.toggle("ids", mode === "ids");
      if (toggle) {
        toggle.textContent = mode === "text" ? "show ids" : "show text";
        toggle.setAttribute("aria-pressed", mode === "ids");
      }
    }

    const bar = document.createElement("div");
    bar.className = "token-bar";
    let toggle = null;
    if (hasText) {
      toggle = document.createElement("button");
      toggle.type = "button";
      toggle.className = "token-toggle";
      toggle.addEventListener("click", () => {
        mode = mode === "text" ? "ids" : "text";
        HarborTokens.mode = mode;  // the next views open the same way
        draw();
      });
      bar.append(toggle);
    }
    if (role === "sampled" && logprobs) {
      const scale = document.createElement("span");
      scale.className = "token-scale";
      scale.style.background = `linear-gradient(to right, ${colour(Math.log(1e-4))}, ${colour(Math.log(0.5))}, ${colour(0)})`;
      scale.setAttribute("role", "img");
      scale.setAttribute("aria-label", "colour scale: orange is p near 0, blue p near 1");
      bar.append("p 0", scale, "1 · tap a token for its logprob");
    }
    // A tap or click names the token (a phone shows no title); the line is read aloud.
    tokens.addEventListener("click", (event) => {
      const span = event.target.closest(".tok");
      if (span && tokens.contains(span)) inspect.textContent = describe(+span.dataset.k);
    });
    draw();
    root.append(bar, tokens, inspect);
    return root;
  }

  installStyle();
  return { view, colour, pieces, mode: "text" };
})();
