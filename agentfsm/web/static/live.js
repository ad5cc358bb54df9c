// The live view: follows the run's event stream (#live's data-events), appends each event to the
// live log as text (never as markup), and redraws the run's status, diagram, forms and record from
// the run's page when its phase changes, it pauses, resumes or ends. The browser reconnects by
// itself, resuming after the last event it got. An event the server cannot read is a line of the
// log saying why (a "problem" event), and the log goes on.
const live = document.getElementById("live");
if (live !== null) {
  const log = document.getElementById("live-log");
  const state = document.getElementById("live-state");
  const KEPT = 300;
  const REDRAWN_ON = new Set(["transition", "paused", "resumed", "run_ended"]);
  const shown = (value) => (typeof value === "string" ? value : JSON.stringify(value));
  const chunkText = (event) => shown(((event.chunk || {}).data || {}).content || "");
  const describe = {
    run_started: (e) => (e.resumed ? "run resumed" : "run started"),
    transition: (e) => `${e.source} -> ${e.dest} (${e.trigger})` + (e.exit_reason ? `, exit reason ${e.exit_reason}` : ""),
    call_transition: (e) => `call ${e.call} (${e.tool}): ${e.source} -> ${e.dest} (${e.trigger})`,
    model_started: (e) => `model ${e.model} called with ${e.messages} messages`,
    model_chunk: (e) => "streamed: " + chunkText(e),
    model_ended: (e) => `model ${e.model} replied` + (e.finish_reasons.length ? ` (${e.finish_reasons.join(", ")})` : ""),
    model_failed: (e) => `model ${e.model} failed: ${e.error}`,
    tool_started: (e) => `${e.tool} (call ${e.call}) started with ${shown(e.arguments)}`,
    tool_progress: (e) => `${e.tool} (call ${e.call}) at ${e.progress}` + (e.total !== null ? ` of ${e.total}` : "") + (e.message ? `: ${e.message}` : ""),
    tool_ended: (e) => (e.error ? `${e.tool} (call ${e.call}) failed: ${e.error}` : `${e.tool} (call ${e.call}) returned ${shown(e.result)}`),
    hook: (e) => `hook ${e.hook} at ${e.point}` + (e.error ? ` failed: ${e.error}` : ""),
    decision: (e) => `decision on call ${e.call}: ` + (e.decision.execute ? "run it" : "do not run it"),
    paused: (e) => `paused: ${e.reason}`,
    resumed: (e) => `resumed into ${e.phase}`,
    run_ended: (e) => (e.error ? `run failed: ${e.error}` : `run ended: ${e.exit_reason}`),
    warning: (e) => `warning (${e.warning}): ${e.message}`,
  };
  function append(event, number) {
    const last = log.lastElementChild;
    if (event.kind === "model_chunk" && last !== null && last.dataset.kind === "model_chunk") {
      last.lastChild.textContent += chunkText(event);  // one line per streamed reply
      return;
    }
    let text;
    try { text = Object.hasOwn(describe, event.kind) ? describe[event.kind](event) : event.kind; } catch (error) { text = event.kind; }
    const item = document.createElement("li");
    item.dataset.kind = event.kind;
    item.dataset.number = number;
    const time = document.createElement("time");
    time.textContent = new Date(event.at * 1000).toLocaleTimeString();
    item.append(time, document.createTextNode(text));
    log.append(item);
    while (log.children.length > KEPT) log.firstElementChild.remove();
    log.scrollTop = log.scrollHeight;
  }
  let redrawing = false;
  let again = false;
  async function redraw() {
    if (redrawing) { again = true; return; }
    redrawing = true;
    try {
      const response = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) throw new Error(`the page answered ${response.status}`);
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const part of ["run-state", "run-record"]) {
        const now = document.getElementById(part);
        const next = fresh.getElementById(part);
        if (now !== null && next !== null) now.replaceWith(document.adoptNode(next));
      }
    } catch (error) {
      state.textContent = "Could not redraw the run: " + error.message;
    } finally {
      redrawing = false;
      if (again) { again = false; redraw(); }
    }
  }
  const source = new EventSource(live.dataset.events);
  source.onopen = () => { state.textContent = "Following the run: its events appear below as they happen."; };
  source.onerror = () => {
    state.textContent = source.readyState === EventSource.CLOSED ? "The live view stopped." : "Reconnecting...";
  };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    append(event, message.lastEventId);
    if (REDRAWN_ON.has(event.kind)) redraw();
  };
  source.addEventListener("end", () => {
    source.close();
    state.textContent = "The run ended.";
  });
  source.addEventListener("problem", (message) => {
    // An event that cannot be read is a line of the log; the stream goes on with the next one.
    const problem = JSON.parse(message.data);
    if (problem.number === null) { state.textContent = problem.error; return; }
    append({ kind: "problem", at: Date.now() / 1000 }, message.lastEventId);
    log.lastElementChild.lastChild.textContent = `event ${problem.number} cannot be read: ${problem.error}`;
    log.lastElementChild.classList.add("error");
  });
}
