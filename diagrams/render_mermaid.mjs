// Render Mermaid diagrams to SVG with mermaid-cli, in one browser: `node render_mermaid.mjs job.json`.
// job.json: {"browser": <puppeteer launch options>, "diagrams": [{"name", "definition", "output"}]}.
// Prints {name: why Mermaid refused it} as JSON (empty when every diagram rendered) and exits 1 if
// any was refused. diagrams/render_check.py writes the job and reads the answer.
import { readFile, writeFile } from "node:fs/promises";
import { renderMermaid } from "@mermaid-js/mermaid-cli";
import puppeteer from "puppeteer";

const job = JSON.parse(await readFile(process.argv[2], "utf-8"));
const refused = {};
const browser = await puppeteer.launch(job.browser);
try {
  // One page at a time: mermaid-cli opens a page per diagram, and the machine is small.
  for (const { name, definition, output } of job.diagrams) {
    try {
      const { data } = await renderMermaid(browser, definition, "svg");
      await writeFile(output, data);
    } catch (error) {
      // Errors thrown inside the page arrive with their class name as the message (YAMLException2).
      refused[name] = String(error?.message ?? error);
    }
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(refused) + "\n");
process.exitCode = Object.keys(refused).length ? 1 : 0;
