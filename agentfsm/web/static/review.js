// The page's behaviour. First, it checks the decisions in the browser before the form is sent: a choice for every call; modified
// arguments JSON, an object, with the schema's required keys and property types. The server checks
// them again, against the whole schema. It listens on the document, so a form the live view brings
// in later is checked too.
const types = {
  string: (v) => typeof v === "string", integer: Number.isInteger, number: (v) => typeof v === "number",
  boolean: (v) => typeof v === "boolean", array: Array.isArray,
  object: (v) => typeof v === "object" && v !== null && !Array.isArray(v),
};
function problemWith(text, schema) {
  let value;
  try { value = JSON.parse(text); } catch (error) { return "The new arguments are not JSON: " + error.message; }
  if (!types.object(value)) return "The new arguments must be a JSON object.";
  for (const key of schema.required || []) if (!(key in value)) return `"${key}" is required.`;
  for (const [key, property] of Object.entries(schema.properties || {})) {
    const check = types[property.type];
    if (key in value && check && !check(value[key])) return `"${key}" must be of type ${property.type}.`;
  }
  return null;
}
document.addEventListener("submit", (event) => {
  if (event.target.id !== "decisions") return;
  for (const call of document.querySelectorAll(".call")) {
    const shown = call.querySelector(".problem");
    const chosen = Array.from(call.querySelectorAll("input[type=radio]")).find((radio) => radio.checked);
    const problem = chosen === undefined ? "Choose approve, reject or modify for this call."
      : chosen.value === "modify" ? problemWith(call.querySelector("textarea").value, JSON.parse(call.dataset.schema))
      : null;
    shown.hidden = problem === null;
    shown.textContent = problem || "";
    if (problem !== null) event.preventDefault();
  }
});

// The timeline's phase filter: the select, or a click (Enter, Space) on a phase of the diagram,
// sets body's data-phase, and the style sheet hides the timeline's entries of other phases. It
// listens on the document and marks the diagram's phases as they come (the live view redraws them).
const PHASES = new Set(["IDLE", "LLM_CALL", "TOOL_PENDING", "CONFIRM", "TOOL_RUN", "EXIT_CHECK", "DONE", "PAUSED", "FAILED"]);
function choosePhase(phase) {
  if (phase) document.body.dataset.phase = phase; else delete document.body.dataset.phase;
  const select = document.getElementById("phase-filter");
  if (select !== null) select.value = phase;
  for (const node of document.querySelectorAll(".diagram g.node[data-phase]")) {
    node.classList.toggle("chosen", node.dataset.phase === phase);
    node.setAttribute("aria-pressed", String(node.dataset.phase === phase));
  }
}
function markPhases() {
  for (const node of document.querySelectorAll(".diagram g.node:not([data-phase])")) {
    const title = node.querySelector("title");
    const phase = title === null ? "" : title.textContent.trim();
    if (!PHASES.has(phase)) continue;
    node.dataset.phase = phase;
    node.setAttribute("tabindex", "0");
    node.setAttribute("role", "button");
    node.setAttribute("aria-label", `show ${phase} in the timeline`);
  }
  choosePhase(document.body.dataset.phase || "");
}
markPhases();
new MutationObserver(markPhases).observe(document.body, { childList: true, subtree: true });
document.addEventListener("change", (event) => {
  if (event.target.id === "phase-filter") choosePhase(event.target.value);
});
function phaseOf(event) {
  const node = event.target.closest && event.target.closest(".diagram g.node[data-phase]");
  return node === null || node === undefined ? null : node.dataset.phase;
}
document.addEventListener("click", (event) => {
  const phase = phaseOf(event);
  if (phase !== null) choosePhase(document.body.dataset.phase === phase ? "" : phase);
});
document.addEventListener("keydown", (event) => {
  const phase = phaseOf(event);
  if (phase === null || (event.key !== "Enter" && event.key !== " ")) return;
  event.preventDefault();
  choosePhase(document.body.dataset.phase === phase ? "" : phase);
});
