// The playground: send one chat request and show the answer as its SSE events arrive.
// The request is OpenAI's, streamed; the console route runs it as /v1/chat/completions does.
"use strict";

document.addEventListener("submit", async (event) => {
  const form = event.target.closest("form[data-playground]");
  if (!form) return;
  event.preventDefault();
  const answer = document.getElementById("answer");
  const stats = document.getElementById("stats");
  const flash = document.getElementById("flash");
  answer.textContent = "";
  stats.textContent = "";
  flash.replaceChildren();
  delete answer.dataset.done;
  const data = new FormData(form);
  const body = {
    model: data.get("model"),
    messages: [{ role: "user", content: data.get("prompt") }],
    max_tokens: Number(data.get("max_tokens")),
    temperature: Number(data.get("temperature")),
    stream: true,
    stream_options: { include_usage: true },
  };
  const csrf = JSON.parse(document.body.getAttribute("hx-headers"))["x-csrftoken"];
  const started = performance.now();
  const response = await fetch(form.action, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json", "x-csrftoken": csrf, "hx-request": "true" },
  });
  if (!response.ok) {
    flash.innerHTML = await response.text(); // the server's escaped error fragment
    answer.dataset.done = "error";
    return;
  }
  let firstTokenMs = null;
  let pending = "";
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += value;
    const events = pending.split("\n\n");
    pending = events.pop();
    for (const event of events) {
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const chunk = JSON.parse(line.slice(6));
        if (chunk.error) {
          stats.textContent = `stopped: ${chunk.error.code}: ${chunk.error.message}`;
          continue;
        }
        const text = chunk.choices?.[0]?.delta?.content;
        if (text) {
          firstTokenMs ??= performance.now() - started;
          answer.append(text);
        }
        if (chunk.usage) {
          const u = chunk.usage;
          stats.textContent = `${u.prompt_tokens} prompt + ${u.completion_tokens} completion tokens` +
            ` · first token after ${Math.round(firstTokenMs ?? 0)} ms`;
        }
      }
    }
  }
  answer.dataset.done = "true";
});
