// The chat page's script: the official AG-UI client (bundled from node_modules) talks to /agent/.
import { HttpAgent } from "/ag-ui-client.js";

const log = document.getElementById("log");
const approvals = document.getElementById("approvals");
const status = document.getElementById("status");
const form = document.getElementById("ask");
const input = document.getElementById("text");
const agent = new HttpAgent({ url: "/agent/", threadId: crypto.randomUUID() });
const bubbles = new Map();

function line(kind, text) {
  const item = document.createElement("li");
  item.className = kind;
  item.textContent = text;
  log.append(item);
  return item;
}

const subscriber = {
  onTextMessageStartEvent({ event }) {
    bubbles.set(event.messageId, line("assistant", ""));
  },
  onTextMessageContentEvent({ event }) {
    bubbles.get(event.messageId).textContent += event.delta;
  },
  onToolCallEndEvent({ toolCallName, toolCallArgs }) {
    line("tool", `${toolCallName}(${JSON.stringify(toolCallArgs)})`);
  },
  onToolCallResultEvent({ event }) {
    line("tool", `→ ${event.content}`);
  },
  onRunFinishedEvent({ outcome, interrupts }) {
    status.textContent = outcome === "interrupt" ? "Waiting for your approval." : "Done.";
    if (outcome === "interrupt") showApprovals(interrupts);
  },
  onRunErrorEvent({ event }) {
    line("error", `Error: ${event.message}`);
    status.textContent = "The run failed.";
  },
};

function showApprovals(interrupts) {
  approvals.replaceChildren();
  const answers = new Map();
  for (const interrupt of interrupts) {
    const box = document.createElement("div");
    box.className = "approval";
    box.dataset.interrupt = interrupt.id;
    const question = document.createElement("p");
    question.textContent = interrupt.message;
    const approve = document.createElement("button");
    approve.textContent = "Approve";
    approve.className = "approve";
    const reject = document.createElement("button");
    reject.textContent = "Reject";
    reject.className = "reject";
    const decide = (approved) => {
      answers.set(interrupt.id, approved ? { approved: true } : { approved: false, feedback: "The user said no." });
      box.remove();
      if (answers.size === interrupts.length) resume(answers);
    };
    approve.addEventListener("click", () => decide(true));
    reject.addEventListener("click", () => decide(false));
    box.append(question, approve, reject);
    approvals.append(box);
  }
  approvals.hidden = false;
}

async function run(parameters) {
  status.textContent = "Running...";
  form.querySelector("button").disabled = true;
  try {
    await agent.runAgent(parameters, subscriber);
  } catch (error) {
    line("error", `Error: ${error.message}`);
  } finally {
    form.querySelector("button").disabled = false;
  }
}

function resume(answers) {
  approvals.hidden = true;
  const resumeEntries = [...answers].map(([interruptId, payload]) => ({ interruptId, status: "resolved", payload }));
  run({ resume: resumeEntries });
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  line("user", text);
  agent.addMessage({ id: crypto.randomUUID(), role: "user", content: text });
  run({});
});
