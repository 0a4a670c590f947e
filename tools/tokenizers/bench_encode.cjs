// Encode throughput of the two npm references on a prompt set, for `moe bench tokenizer`
// (which runs this between its own timings, interleaved).
// Usage: NODE_PATH=<node_modules> TOKENIZERS_PARALLELISM=false \
//          node bench_encode.cjs TOKENIZER_DIR PROMPTS_TXT_JSON
// PROMPTS_TXT_JSON is a JSON array of strings. After one warm-up pass each, times one
// pass of the Rust binding (encodeBatch; single-threaded when TOKENIZERS_PARALLELISM is
// false) and one of @huggingface/tokenizers (encode per string), and prints
// {"bytes": N, "rust_seconds": s, "js_seconds": s}.
'use strict';
const fs = require('fs');
const path = require('path');
const rust = require('tokenizers');
const js = require('@huggingface/tokenizers');

async function main() {
  const [dir, promptsPath] = process.argv.slice(2);
  const prompts = JSON.parse(fs.readFileSync(promptsPath, 'utf8'));
  const text = fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8');
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const r = rust.Tokenizer.fromString(text);
  const j = new js.Tokenizer(JSON.parse(text), config);
  const bytes = prompts.reduce((n, s) => n + Buffer.byteLength(s, 'utf8'), 0);
  const runRust = async () => {
    const t0 = process.hrtime.bigint();
    await r.encodeBatch(prompts, { addSpecialTokens: true });
    return Number(process.hrtime.bigint() - t0) / 1e9;
  };
  const runJs = () => {
    const t0 = process.hrtime.bigint();
    for (const s of prompts) j.encode(s, { add_special_tokens: true });
    return Number(process.hrtime.bigint() - t0) / 1e9;
  };
  await runRust();
  runJs();
  const rustSeconds = await runRust();
  const jsSeconds = runJs();
  console.log(JSON.stringify({ bytes, rust_seconds: rustSeconds, js_seconds: jsSeconds }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
