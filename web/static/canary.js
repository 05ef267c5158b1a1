// The canary slider: says the alias's traffic split in words while the slider moves
// ("prod v1 80% · canary v2 20%"); saving posts the form as any other htmx form. Weight 0
// or no version chosen reads "no canary": saving that removes the canary.
"use strict";

function describeSplit(form) {
  const weight = Number(form.elements.weight.value);
  const canary = form.elements.version.value;
  const target = `${form.dataset.alias} v${form.dataset.version}`;
  const hasCanary = canary && weight > 0;
  const split = hasCanary
    ? `${target} ${100 - weight}% · canary v${canary} ${weight}%`
    : `${target} 100% · no canary`;
  form.querySelector("output[data-split]").value = split;
  form.elements.weight.setAttribute(
    "aria-valuetext",
    hasCanary ? `${weight}% to the canary` : "no canary",
  );
}

for (const type of ["input", "change"]) {
  document.addEventListener(type, (event) => {
    const form = event.target.closest?.("form.canary");
    if (form) describeSplit(form);
  });
}
