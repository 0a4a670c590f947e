// The reference renderer for tests/jinja: @huggingface/jinja (NODE_PATH must hold it).
// Usage: node render.cjs CASES.json  where CASES.json is [{"template": "...", "context": {...}}, ...]
// Prints a JSON array, one entry per case: {"text": "..."} or {"error": "..."}.
const fs = require("fs");
const { Template } = require("@huggingface/jinja");

const cases = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = cases.map((c) => {
  try {
    return { text: new Template(c.template).render(c.context) };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify(out));
