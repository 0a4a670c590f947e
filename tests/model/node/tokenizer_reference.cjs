// Reference encodings for tests/model/hf_tokenizer_reference_test.cc: encodes strings
// with two independent implementations of tokenizer.json, the npm `tokenizers` package
// (the Rust library's binding) and `@huggingface/tokenizers` (pure JavaScript).
//
// Usage: NODE_PATH=<node_modules> node tokenizer_reference.cjs STRINGS_JSON OUT_JSON DIR...
// Writes {"strings": [...], "<dir>": {"rust": [[ids]], "rust_plain": [[ids]], "js": ...,
// "js_plain": ..., "rust_decode": [text]}} where *_plain is without special tokens
// (add_special_tokens false). The strings are STRINGS_JSON's plus 1000 random strings
// (seeded) mixing ASCII, whitespace, Latin-1, CJK, kana, Hangul, emoji and combining marks.
'use strict';
const fs = require('fs');
const path = require('path');
const rust = require('tokenizers');
const js = require('@huggingface/tokenizers');

function randomStrings(n) {
  let state = 12345;
  const rand = (k) => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state % k;
  };
  const ranges = [
    [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x09, 0x0d], [0xa0, 0xff], [0x4e00, 0x4fff],
    [0x3040, 0x30ff], [0xac00, 0xac7f], [0x1f600, 0x1f64f], [0x0300, 0x036f], [0x0400, 0x04ff], [0x2000, 0x206f],
  ];
  const out = [];
  for (let i = 0; i < n; ++i) {
    let s = '';
    const len = 1 + rand(40);
    for (let k = 0; k < len; ++k) {
      const [lo, hi] = ranges[rand(ranges.length)];
      const cp = lo + rand(hi - lo + 1);
      s += String.fromCodePoint(cp);
      if (rand(8) === 0) s += ' ';
    }
    out.push(s);
  }
  return out;
}

async function main() {
  const [stringsPath, outPath, ...dirs] = process.argv.slice(2);
  const strings = JSON.parse(fs.readFileSync(stringsPath, 'utf8')).concat(randomStrings(1000));
  const result = { strings };
  for (const dir of dirs) {
    const text = fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8');
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
    const r = rust.Tokenizer.fromString(text);
    const j = new js.Tokenizer(JSON.parse(text), config);
    const fam = { rust: [], rust_plain: [], js: [], js_plain: [], rust_decode: [] };
    const withSpecial = await r.encodeBatch(strings, { addSpecialTokens: true });
    const plain = await r.encodeBatch(strings, { addSpecialTokens: false });
    fam.rust = withSpecial.map((e) => e.getIds());
    fam.rust_plain = plain.map((e) => e.getIds());
    fam.rust_decode = await r.decodeBatch(fam.rust_plain, true);
    for (const s of strings) {
      fam.js.push(Array.from(j.encode(s, { add_special_tokens: true }).ids));
      fam.js_plain.push(Array.from(j.encode(s, { add_special_tokens: false }).ids));
    }
    result[path.basename(dir)] = fam;
  }
  fs.writeFileSync(outPath, JSON.stringify(result));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
