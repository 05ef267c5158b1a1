// The playground: a multi-turn chat with one model, or (compare mode) the same user turns
// sent to two models at once, each column keeping its own history. Every turn is an OpenAI
// chat request carrying the whole conversation, streamed from /console/playground/chat,
// which runs it as /v1/chat/completions does (quotas, admission, usage). Stop ends the
// replies in flight: what came so far stays on screen, marked stopped, out of the history.
"use strict";

(() => {
  const form = document.querySelector("form[data-playground]");
  if (!form) return;
  const conversation = form.querySelector("[data-conversation]");
  const message = form.elements.message;
  const compareToggle = form.elements.compare_on;
  const sendButton = form.querySelector("[data-send]");
  const stopButton = form.querySelector("[data-stop]");
  const columns = ["a", "b"].map((key) => {
    const element = form.querySelector(`[data-column="${key}"]`);
    return {
      key,
      element,
      select: form.elements[key === "a" ? "model" : "compare"],
      title: element.querySelector("[data-column-title]"),
      turns: element.querySelector("[data-turns]"),
      history: [], // this column's user and assistant messages, as the API takes them
    };
  });
  let chat = { id: 0, aborter: new AbortController(), busy: false };
  const DONE = Symbol("[DONE]"); // what sseChunks yields for the stream's last event

  const activeColumns = () => (compareToggle.checked ? columns : columns.slice(0, 1));

  /** The sampling settings the form holds; blank fields are left to the engine's defaults. */
  function sampling() {
    const settings = {};
    for (const name of ["temperature", "top_p", "max_tokens", "seed"]) {
      const raw = form.elements[name].value.trim();
      if (raw !== "") settings[name] = Number(raw);
    }
    return settings;
  }

  function systemMessages() {
    const text = form.elements.system.value.trim();
    return text ? [{ role: "system", content: text }] : [];
  }

  /** Append one turn (a user message or an assistant reply) to a column; return its parts. */
  function addTurn(column, role, who, text) {
    const item = document.createElement("li");
    item.className = `turn ${role}`;
    const label = document.createElement("span");
    label.className = "who";
    label.textContent = who;
    const bubble = document.createElement("div");
    bubble.className = "bubble";
    bubble.textContent = text;
    item.append(label, bubble);
    column.turns.append(item);
    return { item, bubble };
  }

  /** Show the chosen models in the column titles and in the address (a link to this setup). */
  function showChoice() {
    for (const column of columns) column.title.textContent = column.select.value;
    const comparing = compareToggle.checked;
    for (const element of form.querySelectorAll("[data-compare-only]")) element.hidden = !comparing;
    conversation.classList.toggle("comparing", comparing);
    const query = new URLSearchParams({ model: columns[0].select.value });
    if (comparing) query.set("compare", columns[1].select.value);
    // "@" reads better unescaped in a link to share, and is valid in a query string.
    history.replaceState(null, "", `${location.pathname}?${String(query).replaceAll("%40", "@")}`);
  }

  function newChat() {
    chat.aborter.abort();
    chat = { id: chat.id + 1, aborter: new AbortController(), busy: false };
    for (const column of columns) {
      column.history = [];
      column.turns.replaceChildren();
    }
    setBusy(false);
  }

  function setBusy(busy) {
    chat.busy = busy;
    sendButton.disabled = busy;
    stopButton.disabled = !busy;
    conversation.setAttribute("aria-busy", String(busy)); // screen readers read the finished turn
  }

  /** Send the typed message to every active column's model, the replies streaming in parallel. */
  async function send() {
    const text = message.value.trim();
    if (!text || chat.busy) return;
    const current = chat;
    const settings = sampling();
    const system = systemMessages();
    message.value = "";
    current.aborter = new AbortController(); // Stop aborts this turn's replies only
    setBusy(true);
    await Promise.all(activeColumns().map((column) => ask(column, text, system, settings, current)));
    if (current === chat) {
      setBusy(false);
      message.focus();
    }
  }

  /** One turn of one column: the request with this column's history, its reply streamed in. */
  async function ask(column, text, system, settings, current) {
    const model = column.select.value;
    column.history.push({ role: "user", content: text });
    const asked = addTurn(column, "user", "You", text);
    const { item, bubble } = addTurn(column, "assistant", model, "");
    bubble.dataset.reply = "";
    const stats = document.createElement("p");
    stats.className = "reply-stats";
    stats.dataset.stats = "";
    item.append(stats);
    const body = {
      model,
      messages: [...system, ...column.history],
      ...settings,
      stream: true,
      stream_options: { include_usage: true },
    };
    const outcome = await streamReply(body, bubble, stats, current.aborter.signal);
    if (current !== chat) return; // a new chat began meanwhile: this column's history is new
    if (outcome.ok) {
      column.history.push({ role: "assistant", content: outcome.text });
      bubble.dataset.done = "true";
    } else {
      // A failed or stopped turn is shown but not sent again: the next continues without it.
      column.history.pop();
      asked.item.classList.add(outcome.stopped ? "stopped" : "failed");
      bubble.dataset.done = outcome.stopped ? "stopped" : "error";
    }
  }

  /** POST the chat request and stream its SSE events into `bubble`; report how it ended. */
  async function streamReply(body, bubble, stats, signal) {
    const csrf = JSON.parse(document.body.getAttribute("hx-headers"))["x-csrftoken"];
    const started = performance.now();
    let response;
    try {
      response = await fetch(form.action, {
        method: "POST",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json", "x-csrftoken": csrf, "hx-request": "true" },
        signal,
      });
    } catch (error) {
      if (signal.aborted) return stopped(bubble);
      return failed(bubble, `the request failed: ${error.message}`);
    }
    if (response.headers.get("hx-redirect")) {
      location.assign(response.headers.get("hx-redirect")); // signed out: to the sign-in page
      return { ok: false };
    }
    if (!response.ok) return failed(bubble, await errorText(response));
    const timing = { started, firstToken: null, lastToken: null };
    let text = "";
    let error = null;
    let finished = false; // the server said [DONE]: the reply is whole
    try {
      for await (const chunk of sseChunks(response)) {
        if (chunk === DONE) {
          finished = true;
          continue;
        }
        if (chunk.error) {
          error = `stopped: ${chunk.error.code ?? "error"}: ${chunk.error.message}`;
          continue;
        }
        const delta = chunk.choices?.[0]?.delta?.content;
        if (delta) {
          timing.firstToken ??= performance.now();
          timing.lastToken = performance.now();
          text += delta;
          bubble.append(delta);
        }
        if (chunk.usage) showUsage(bubble, stats, chunk.usage, timing);
      }
    } catch (caught) {
      if (signal.aborted) return stopped(bubble, stats);
      error ??= `the stream broke off: ${caught.message}`;
    }
    // A stream that closes without [DONE] or an error event lost its end (a proxy, a crash).
    if (!error && !finished) error = "the stream ended early";
    if (error) return failed(bubble, error, stats);
    return { ok: true, text };
  }

  /** The SSE stream's JSON chunks, one at a time, then DONE if the server sent [DONE]
   * (heartbeat comments skipped). */
  async function* sseChunks(response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      pending += value;
      const events = pending.split("\n\n");
      pending = events.pop();
      for (const event of events) {
        const data = event
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trimStart())
          .join("\n");
        if (data === "[DONE]") yield DONE;
        else if (data) yield JSON.parse(data);
      }
    }
  }

  /** TTFT, decode speed and token counts under a reply; the numbers also as data-* hooks. */
  function showUsage(bubble, stats, usage, timing) {
    const ttft = timing.firstToken === null ? null : Math.round(timing.firstToken - timing.started);
    // Generation time runs from the first token to the last, so it excludes the TTFT shown
    // beside it; the first token's own time is in the TTFT, hence completion_tokens - 1.
    const seconds = timing.firstToken === null ? 0 : (timing.lastToken - timing.firstToken) / 1000;
    const rate = usage.completion_tokens > 1 && seconds > 0
      ? ((usage.completion_tokens - 1) / seconds).toFixed(1)
      : "–";
    bubble.dataset.promptTokens = usage.prompt_tokens;
    bubble.dataset.completionTokens = usage.completion_tokens;
    stats.textContent = `TTFT ${ttft ?? "–"} ms · ${rate} tokens/s · ` +
      `${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens`;
  }

  /** The message of an error answer: the console's fragment as text, or the status. */
  async function errorText(response) {
    const html = await response.text();
    const parsed = new DOMParser().parseFromString(html, "text/html").body.textContent.trim();
    return `error ${response.status}: ${parsed || response.statusText}`;
  }

  function failed(bubble, text, stats = null) {
    const note = document.createElement("p");
    note.className = "reply-error";
    note.setAttribute("role", "alert");
    note.textContent = text;
    (stats ?? bubble).after(note);
    bubble.classList.add("has-error");
    return { ok: false, stopped: false };
  }

  /** A reply ended by Stop: what came so far stays, with a note saying so. */
  function stopped(bubble, stats = null) {
    const note = document.createElement("p");
    note.className = "reply-stopped";
    note.textContent = "stopped";
    (stats ?? bubble).after(note);
    return { ok: false, stopped: true };
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  stopButton.addEventListener("click", () => {
    chat.aborter.abort();
    message.focus();
  });
  form.querySelector("[data-new-chat]").addEventListener("click", () => {
    newChat();
    message.focus();
  });
  compareToggle.addEventListener("change", () => {
    if (columns.some((column) => column.turns.children.length)) newChat();
    showChoice();
  });
  for (const column of columns) column.select.addEventListener("change", showChoice);
})();
