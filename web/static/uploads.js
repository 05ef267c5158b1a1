// Upload progress: a form with a <progress> shows how much of its body htmx has sent.
"use strict";

document.addEventListener("htmx:xhr:progress", (event) => {
  const bar = event.target.querySelector?.("progress");
  if (!bar || !event.detail.lengthComputable) return;
  bar.hidden = false;
  bar.value = (event.detail.loaded / event.detail.total) * 100;
});
