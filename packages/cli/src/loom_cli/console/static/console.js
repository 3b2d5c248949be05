// Loom console: live fragments over SSE, ticking times, confirmed actions. No build step, no dependencies.
"use strict";
(function () {
  const TOKEN = document.querySelector('meta[name="loom-console-token"]').content;
  const $ = (sel, root) => (root || document).querySelector(sel);

  // ---------------------------------------------------------------- times
  function span(s) {
    if (s < 1) return Math.max(0, Math.round(s * 1000)) + " ms";
    s = Math.round(s);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + String(s % 60).padStart(2, "0") + " s";
    if (s < 86400) return Math.floor(s / 3600) + " h " + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }
  function tick() {
    const now = Date.now();
    document.querySelectorAll("time[data-rel]").forEach((t) => {
      const d = (now - Date.parse(t.dateTime)) / 1000;
      t.textContent = Math.abs(d) < 1 ? "just now" : d > 0 ? span(d) + " ago" : "in " + span(-d);
    });
    document.querySelectorAll("time[data-left]").forEach((t) => {
      const d = (Date.parse(t.dateTime) - now) / 1000;
      t.textContent = d > 0 ? span(d) + " left" : "due now";
    });
  }
  setInterval(tick, 1000);

  // ---------------------------------------------------------------- banner and API calls
  function banner(kind, html) {
    const b = $("#banner");
    b.className = "banner " + kind;
    b.innerHTML = html;
    b.hidden = false;
    clearTimeout(banner.timer);
    if (kind === "ok") banner.timer = setTimeout(() => { b.hidden = true; }, 8000);
  }
  function esc(s) {
    return String(s === undefined || s === null ? "" : s).replace(/[&<>"']/g, (c) => (
      { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  function describeError(err) {
    const d = err.doc || {};
    // status 0: refused here before any request (or no answer): no HTTP status to name
    const http = err.status ? " (HTTP " + esc(err.status) + ")" : "";
    let text = "<b>" + esc(d.error || "error") + "</b>" + http + ": " + esc(d.message || err.message);
    if (d.execution_status) text += " · the execution is " + esc(d.execution_status);
    if (Array.isArray(d.problems) && d.problems.length) {
      // invalid_input: {"field", "problem", "type"} per field
      text += '<ul class="problems">' + d.problems.map((p) => "<li>" + esc(typeof p === "string" ? p :
        (p.field || "(input)") + ": " + (p.problem || p.message || JSON.stringify(p))) + "</li>").join("") + "</ul>";
    }
    return text;
  }
  async function api(method, path, body) {
    const opts = { method, headers: { "x-loom-console-token": TOKEN, accept: "application/json" } };
    if (body !== undefined) {
      opts.headers["content-type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch("/api" + path, opts);
    } catch (e) {
      const err = new Error("the console server is not answering: is `loom console` still running?");
      err.doc = { error: "unreachable", message: err.message };
      err.status = 0;
      throw err;
    }
    let doc = null;
    try { doc = await r.json(); } catch (e) { doc = null; }
    if (!r.ok) {
      const err = new Error(r.statusText);
      err.status = r.status;
      err.doc = doc || { error: "http_" + r.status, message: r.statusText };
      throw err;
    }
    return doc;
  }

  // ---------------------------------------------------------------- confirm dialog
  const dialog = $("#confirm");
  let pending = null;
  function confirmAction(title, bodyHtml, run) {
    $("#confirm-title").textContent = title;
    $("#confirm-body").innerHTML = bodyHtml;
    $("#confirm-error").hidden = true;
    $("#confirm-yes").disabled = false;
    pending = run;
    dialog.showModal();
    const first = $("input, textarea", $("#confirm-body"));
    if (first) first.focus(); else $("#confirm-yes").focus();
  }
  $("#confirm-back").addEventListener("click", () => dialog.close());
  // Enter in a dialog field confirms (a form with method=dialog would otherwise just close it)
  $("#confirm-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (ev.target.querySelector("textarea:focus")) return;
    $("#confirm-yes").click();
  });
  $("#confirm-yes").addEventListener("click", async () => {
    if (!pending) return;
    $("#confirm-yes").disabled = true;
    try {
      const message = await pending();
      dialog.close();
      if (message) banner("ok", message);
    } catch (err) {
      const box = $("#confirm-error");
      box.innerHTML = "Refused: " + describeError(err);
      box.hidden = false;
      banner("err", "Refused: " + describeError(err));
      $("#confirm-yes").disabled = false;
    }
  });

  // ---------------------------------------------------------------- execution actions
  function executionId() {
    const box = $("#execution");
    return box ? box.dataset.id : null;
  }
  function readJson(id) {
    const text = $(id).value.trim();
    if (!text) return {};
    let value;
    try { value = JSON.parse(text); } catch (e) { throw Object.assign(new Error(e.message), { status: 0, doc: { error: "invalid_json", message: "the data is not JSON: " + e.message } }); }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw Object.assign(new Error("not an object"), { status: 0, doc: { error: "invalid_request", message: "the data must be a JSON object, not " + (Array.isArray(value) ? "an array" : value === null ? "null" : "a " + typeof value) } });
    }
    return value;
  }
  const ACTIONS = {
    cancel: (id) => confirmAction("Cancel this execution?",
      "<p>It ends <b>CANCELLED</b>: a step that is running finishes, but nothing after it runs.</p>" +
      '<label class="field"><span>reason (optional, kept in its history)</span><input type="text" id="act-reason"></label>',
      async () => {
        const reason = $("#act-reason").value.trim();
        const e = await api("POST", "/executions/" + encodeURIComponent(id) + "/cancel", reason ? { reason } : undefined);
        if (e.cancel_requested) return "Cancel requested by " + esc(e.cancelled_by || "-") + ": it takes effect when the running attempt ends.";
        if (e.compensating && !e.cancelled_by) return "Not cancelled: it is already undoing its completed steps after a failure, and ends FAILED once they are undone; the cancel changes nothing.";
        return "Cancelled by " + esc(e.cancelled_by || "-") + ".";
      }),
    wake: (id, button) => confirmAction("Wake it now?", "<p>" + esc(button.dataset.say) + "</p>",
      async () => {
        await api("POST", "/executions/" + encodeURIComponent(id) + "/wake");
        return "Woken: " + esc(button.dataset.say);
      }),
    redrive: (id, button) => confirmAction("Redrive from the failed step?",
      "<p>It resumes from its failed step (" + esc(button.dataset.step || "?") + ") with fresh attempts, under the same id. " +
      "Fix the cause first.</p>",
      async () => {
        const e = await api("POST", "/executions/" + encodeURIComponent(id) + "/redrive");
        return "Redriven (redrive " + esc(e.redrives) + "): " + esc(e.status) + ".";
      }),
    send: (id, button) => confirmAction("Send an event",
      '<label class="field"><span>event name *</span><input type="text" id="act-event" value="' + esc(button.dataset.event || "") + '"></label>' +
      '<label class="field"><span>data (a JSON object)</span><textarea id="act-data" rows="4">{}</textarea></label>' +
      '<label class="field"><span>event id (optional: the same id is delivered once)</span><input type="text" id="act-event-id"></label>',
      async () => {
        const name = $("#act-event").value.trim();
        if (!name) throw Object.assign(new Error("name"), { status: 0, doc: { error: "invalid_request", message: "name the event" } });
        const body = { data: readJson("#act-data") };
        const eventId = $("#act-event-id").value.trim();
        if (eventId) body.event_id = eventId;
        const r = await api("POST", "/executions/" + encodeURIComponent(id) + "/events/" + encodeURIComponent(name), body);
        return "Event <b>" + esc(r.event || name) + "</b>: " + esc(r.outcome) + ".";
      }),
  };
  document.addEventListener("click", (ev) => {
    const button = ev.target.closest("button[data-action]");
    if (!button) return;
    const id = executionId();
    if (id && ACTIONS[button.dataset.action]) ACTIONS[button.dataset.action](id, button);
  });

  // ---------------------------------------------------------------- start form
  const form = $("#start-form");
  if (form) {
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (!form.reportValidity()) return;
      let input = {};
      try {
        const raw = $("[data-raw]", form);
        if (raw) input = readJson("#in-raw");
        form.querySelectorAll("[data-field]").forEach((el) => {
          const kind = el.dataset.kind, name = el.dataset.field;
          if (kind === "boolean") { input[name] = el.checked; return; }
          const text = el.value.trim();
          if (!text) return; // left empty: the workflow's default applies
          if (kind === "integer") input[name] = parseInt(text, 10);
          else if (kind === "number") input[name] = Number(text);
          else if (kind === "json") {
            try { input[name] = JSON.parse(text); } catch (e) {
              throw Object.assign(new Error(e.message), { status: 0, doc: { error: "invalid_json", message: name + " is not JSON: " + e.message } });
            }
          } else input[name] = el.value;
        });
      } catch (err) {
        banner("err", describeError(err));
        return;
      }
      const workflow = form.dataset.workflow;
      // the token as typed, as the CLI and the SDK send it: one token starts one execution on every surface
      const token = $("[data-token]", form).value;
      const body = { workflow, input };
      if (token) body.idempotency_token = token;
      const shown = token ? "<p>idempotency token: <code>" + esc(JSON.stringify(token)) + "</code></p>" : "";
      confirmAction("Start " + workflow + "?", "<pre>" + esc(JSON.stringify(input, null, 2)) + "</pre>" + shown, async () => {
        const e = await api("POST", "/executions", body);
        const href = "/executions/" + encodeURIComponent(e.execution_id);
        if (e.created !== false) {
          window.location.href = href;
          return "Started " + esc(e.execution_id) + ".";
        }
        return "Already started with this token and input: nothing new started. It is <a href=\"" + esc(href) + "\">" +
          esc(e.execution_id) + "</a> (" + esc(e.status) + ").";
      });
    });
  }

  // ---------------------------------------------------------------- filters and live fragments
  document.querySelectorAll("form.filters select").forEach((s) => s.addEventListener("change", () => s.form.submit()));
  const live = document.querySelector("[data-sse]");
  if (live && window.EventSource) {
    const dot = $("#live");
    const source = new EventSource(live.dataset.sse);
    source.addEventListener("open", () => { dot.className = "live on"; dot.title = "live: updates as it changes"; });
    source.addEventListener("error", () => { dot.className = "live off"; dot.title = "reconnecting…"; });
    // A click in progress is never split by an update: one that comes between a press and its release waits for
    // the release (replacing the pressed button would lose the click), or at most a second (a press held longer).
    let pressed = null, held = null;
    const release = () => {
      clearTimeout(pressed);
      pressed = null;
      setTimeout(() => { if (held && pressed === null) { const doc = held; held = null; apply(doc); } }, 0);
    };
    document.addEventListener("pointerdown", () => { clearTimeout(pressed); pressed = setTimeout(release, 1000); }, true);
    document.addEventListener("pointerup", release, true);
    document.addEventListener("pointercancel", release, true);
    source.addEventListener("update", (ev) => {
      const doc = JSON.parse(ev.data);
      if (pressed !== null) held = doc; else apply(doc);
    });
    function apply(doc) {
      const open = Array.from(live.querySelectorAll("details[open]")).map((d) => d.closest("[data-step]") ?
        d.closest("[data-step]").dataset.step + ":" + (d.querySelector("summary") || {}).textContent : null);
      live.innerHTML = doc.html;
      live.querySelectorAll("details").forEach((d) => {
        const key = d.closest("[data-step]") ? d.closest("[data-step]").dataset.step + ":" + (d.querySelector("summary") || {}).textContent : null;
        if (key && open.includes(key)) d.open = true;
      });
      if (doc.status) live.dataset.status = doc.status;
      live.dataset.updates = String(Number(live.dataset.updates || 0) + 1);
      tick();
    }
    source.addEventListener("problem", (ev) => {
      const d = JSON.parse(ev.data);
      banner("err", "Live view: <b>" + esc(d.error) + "</b>: " + esc(d.message));
    });
  }
})();
