// Drives an agentfsm AG-UI endpoint with the official client through a loop with an approval in the
// middle: a first run that ends with an interrupt, then a run whose resume[] approves it. Prints what
// the client saw as one JSON line; the Python test (test_js_client.py) checks it.
import { HttpAgent } from "@ag-ui/client";

const [url, token] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId: "thread-js", headers: { Authorization: `Bearer ${token}` } });
agent.addMessage({ id: "u1", role: "user", content: "Pay Ann 30 EUR." });

function recorder(into) {
  return {
    onEvent({ event }) {
      into.events.push(event.type);
    },
    onTextMessageContentEvent({ event }) {
      into.text += event.delta;
    },
    onRunFinishedEvent(params) {
      into.outcome = params.outcome;
      into.interrupts = params.interrupts ?? [];
      into.result = params.result ?? null;
    },
    onRunErrorEvent({ event }) {
      into.error = event.message;
    },
  };
}

const first = { events: [], text: "", outcome: null, interrupts: [], error: null };
await agent.runAgent({ runId: "run-1" }, recorder(first));
const pending = agent.pendingInterrupts.map((i) => ({ id: i.id, reason: i.reason, toolCallId: i.toolCallId }));

const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: { approved: true } }));
const second = { events: [], text: "", outcome: null, interrupts: [], error: null };
await agent.runAgent({ runId: "run-2", resume }, recorder(second));

const messages = agent.messages.map((m) => ({ role: m.role, content: m.content ?? null, toolCallId: m.toolCallId ?? null }));
console.log(JSON.stringify({ first, pending, second, messages, state: agent.state, left: agent.pendingInterrupts.length }));
