// Checks the decisions in the browser before the form is sent: a choice for every call; modified
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
