#!/usr/bin/env node
// Trains the small byte-level BPE tokenizers under tests/data/tokenizers/<family>/ with
// the npm `tokenizers` package (the Rust library's Node binding), one per model family
// (GPT-2, Llama-3, Qwen2/3, DeepSeek-V3), each with that family's normalizer,
// pre-tokenizer, decoder, post-processor and special tokens as its published
// tokenizer.json declares them, and a vocabulary small enough (<= 2048 ids) for the
// shipped tiny model.
//
// Usage: NODE_PATH=<node_modules> node tools/tokenizers/train_tokenizers.js \
//          <training text file>... --out tests/data/tokenizers
// The binding's train() uses the default BPE trainer (vocab 30000), so the merges are
// truncated to the first kMerges (BPE training is greedy: the first K merges are what a
// K-merge training would learn) and the vocabulary is rebuilt as the 256-symbol
// byte-level alphabet followed by the merge results in merge order. Each file is then
// loaded back by both `tokenizers` and `@huggingface/tokenizers` as a check.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { Tokenizer, byteLevelAlphabet } = require('tokenizers');

const kMaxIds = 2048;

// Published pre-tokenizer regexes (as the families' tokenizer.json files spell them).
const kLlama3 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const kQwen2 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const kDeepSeekNum = '\\p{N}{1,3}';
const kDeepSeekCjk = '[一-龥぀-ゟ゠-ヿ]+';
const kDeepSeekMain =
  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const split = (re) => ({ type: 'Split', pattern: { Regex: re }, behavior: 'Isolated', invert: false });
const byteLevel = (prefix, trim, regex) => ({
  type: 'ByteLevel',
  add_prefix_space: prefix,
  trim_offsets: trim,
  use_regex: regex,
});
const bosTemplate = (bos, id) => ({
  type: 'TemplateProcessing',
  single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
  pair: [
    { SpecialToken: { id: bos, type_id: 0 } },
    { Sequence: { id: 'A', type_id: 0 } },
    { SpecialToken: { id: bos, type_id: 1 } },
    { Sequence: { id: 'B', type_id: 1 } },
  ],
  special_tokens: { [bos]: { id: bos, ids: [id], tokens: [bos] } },
});

// [content, special] in id order after the BPE vocabulary.
const kFamilies = {
  gpt2: {
    normalizer: null,
    pre_tokenizer: byteLevel(false, true, true),
    decoder: byteLevel(false, true, true),
    post_processor: () => byteLevel(true, false, true),
    ignore_merges: false,
    string_merges: true,  // GPT-2's file spells merges "a b"
    added: [['<|endoftext|>', true]],
    config: (c) => ({ ...c, bos_token: '<|endoftext|>', eos_token: '<|endoftext|>', unk_token: '<|endoftext|>',
      add_bos_token: false, tokenizer_class: 'GPT2Tokenizer' }),
  },
  llama3: {
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split(kLlama3), byteLevel(false, true, false)] },
    decoder: byteLevel(true, true, true),
    post_processor: (ids) => ({
      type: 'Sequence',
      processors: [byteLevel(true, false, true), bosTemplate('<|begin_of_text|>', ids['<|begin_of_text|>'])],
    }),
    ignore_merges: true,
    added: [
      ['<|begin_of_text|>', true], ['<|end_of_text|>', true], ['<|reserved_special_token_0|>', true],
      ['<|reserved_special_token_1|>', true], ['<|finetune_right_pad_id|>', true], ['<|step_id|>', true],
      ['<|start_header_id|>', true], ['<|end_header_id|>', true], ['<|eom_id|>', true], ['<|eot_id|>', true],
      ['<|python_tag|>', true],
    ],
    config: (c) => ({ ...c, bos_token: '<|begin_of_text|>', eos_token: '<|eot_id|>',
      tokenizer_class: 'PreTrainedTokenizerFast' }),
  },
  qwen2: {
    normalizer: { type: 'NFC' },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split(kQwen2), byteLevel(false, false, false)] },
    decoder: byteLevel(false, false, false),
    post_processor: () => byteLevel(false, false, false),
    ignore_merges: false,
    added: [
      ['<|endoftext|>', true], ['<|im_start|>', true], ['<|im_end|>', true], ['<|object_ref_start|>', true],
      ['<|object_ref_end|>', true], ['<|vision_start|>', true], ['<|vision_end|>', true],
      ['<tool_call>', false], ['</tool_call>', false], ['<|fim_prefix|>', false], ['<|fim_middle|>', false],
      ['<|fim_suffix|>', false], ['<think>', false], ['</think>', false],
    ],
    config: (c) => ({ ...c, bos_token: null, eos_token: '<|im_end|>', pad_token: '<|endoftext|>',
      add_bos_token: false, tokenizer_class: 'Qwen2Tokenizer' }),
  },
  deepseek_v3: {
    normalizer: { type: 'Sequence', normalizers: [] },
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [split(kDeepSeekNum), split(kDeepSeekCjk), split(kDeepSeekMain), byteLevel(false, true, false)],
    },
    decoder: byteLevel(true, true, true),
    post_processor: (ids) => bosTemplate('<｜begin▁of▁sentence｜>', ids['<｜begin▁of▁sentence｜>']),
    ignore_merges: false,
    added: [
      ['<｜begin▁of▁sentence｜>', true], ['<｜end▁of▁sentence｜>', true], ['<｜▁pad▁｜>', true],
      ['<｜User｜>', false], ['<｜Assistant｜>', false], ['<think>', false], ['</think>', false],
      ['<｜tool▁calls▁begin｜>', false], ['<｜tool▁calls▁end｜>', false], ['<｜tool▁sep｜>', false],
    ],
    config: (c) => ({ ...c, bos_token: { __type: 'AddedToken', content: '<｜begin▁of▁sentence｜>', lstrip: false,
      normalized: true, rstrip: false, single_word: false }, eos_token: '<｜end▁of▁sentence｜>',
      add_bos_token: true, add_eos_token: false, tokenizer_class: 'LlamaTokenizerFast' }),
  },
};

function trainFamily(name, fam, files, outDir) {
  const base = {
    version: '1.0', truncation: null, padding: null, added_tokens: [],
    normalizer: fam.normalizer, pre_tokenizer: fam.pre_tokenizer, post_processor: null, decoder: fam.decoder,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: fam.ignore_merges, vocab: {}, merges: [] },
  };
  const trainer = Tokenizer.fromString(JSON.stringify(base));
  trainer.train(files);
  const tmp = path.join(os.tmpdir(), `train_${name}_${process.pid}.json`);
  trainer.save(tmp, false);
  const trained = JSON.parse(fs.readFileSync(tmp, 'utf8'));
  fs.unlinkSync(tmp);
  const merges = trained.model.merges.map((m) => (Array.isArray(m) ? m : m.split(' ')));

  const vocab = {};
  let next = 0;
  for (const c of byteLevelAlphabet().sort()) vocab[c] = next++;
  const kept = [];
  const budget = kMaxIds - fam.added.length;
  for (const [a, b] of merges) {
    if (next >= budget) break;
    if (!(a in vocab) || !(b in vocab)) continue;
    kept.push([a, b]);
    if (!((a + b) in vocab)) vocab[a + b] = next++;
  }
  const ids = {};
  const added = fam.added.map(([content, special]) => {
    ids[content] = next;
    return { id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special };
  });
  const out = {
    ...base,
    added_tokens: added,
    post_processor: fam.post_processor(ids),
    model: { ...base.model, vocab, merges: fam.string_merges ? kept.map((m) => m.join(' ')) : kept },
  };
  const text = JSON.stringify(out, null, 1);
  Tokenizer.fromString(text);  // the Rust library accepts it
  const dir = path.join(outDir, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), text + '\n');
  const decoderMap = {};
  for (const t of added) {
    decoderMap[String(t.id)] = { content: t.content, lstrip: false, normalized: t.normalized, rstrip: false,
      single_word: false, special: t.special };
  }
  const config = fam.config({ added_tokens_decoder: decoderMap, clean_up_tokenization_spaces: false,
    model_max_length: 4096 });
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(config, null, 2) + '\n');
  console.log(`${name}: ${next} ids (${kept.length} merges of ${merges.length} trained, ${added.length} added)`);
}

function main() {
  const args = process.argv.slice(2);
  const o = args.indexOf('--out');
  if (o < 0 || o + 1 >= args.length) throw new Error('usage: train_tokenizers.js FILE... --out DIR');
  const outDir = args[o + 1];
  // A .json prompt set (ShareGPT [{conversations:[{value}]}] or Alpaca [{instruction,
  // input, output}]) contributes its texts; other files are read as they are.
  const files = args.filter((_, i) => i !== o && i !== o + 1).map((f) => {
    if (!f.endsWith('.json')) return f;
    const texts = [];
    for (const r of JSON.parse(fs.readFileSync(f, 'utf8'))) {
      for (const c of r.conversations || []) texts.push(c.value);
      for (const k of ['instruction', 'input', 'output']) if (r[k]) texts.push(r[k]);
    }
    const tmp = path.join(os.tmpdir(), `train_text_${process.pid}_${path.basename(f)}.txt`);
    fs.writeFileSync(tmp, texts.join('\n'));
    return tmp;
  });
  for (const [name, fam] of Object.entries(kFamilies)) trainFamily(name, fam, files, outDir);
}

main();
