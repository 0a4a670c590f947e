// The official `openai` npm package against `moe serve` with these request parameters:
// n, logprobs (completions and chat), penalties, the JSON response format, and a
// streamed chat with n = 2 and usage. Prints one JSON object for the C++ test to check.
// Usage: NODE_PATH=<node_modules> node openai_params.cjs BASE_URL
const openai = require('openai');
const OpenAI = openai.OpenAI || openai;

// openai@4 fetches with node-fetch@2 by default. On Node.js 18 (Debian 12's nodejs) that
// fails every streamed response on a kept-alive connection with "Premature close" after the
// last chunk: node-fetch takes the socket's parser 'data' listener, which Node 18 leaves
// attached until the socket is freed, for an unfinished body (node-fetch issue #1767). The
// server's stream is complete (curl and Node's own fetch read it whole), so on Node < 20 the
// client is given Node's built-in fetch, as a user of that Node would have to.
function nodeFetchWorkaround() {
  const major = parseInt(process.versions.node.split('.')[0], 10);
  return major < 20 && typeof globalThis.fetch === 'function' ? { fetch: globalThis.fetch } : {};
}

async function main() {
  const [baseURL] = process.argv.slice(2);
  const client = new OpenAI({
    baseURL: baseURL + '/v1', apiKey: 'no-key', maxRetries: 0, timeout: 120000, ...nodeFetchWorkaround(),
  });
  const model = (await client.models.list()).data[0].id;
  const prompt = 'ROMEO:\nWhat light';
  const messages = [{ role: 'user', content: 'Give me a JSON object.' }];

  const n = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 1, seed: 7, n: 3 });
  const cmplLogprobs = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, logprobs: 2 });
  const chatLogprobs = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  const base = await client.completions.create({ model, prompt, max_tokens: 40, temperature: 0 });
  const penalized = await client.completions.create({
    model, prompt, max_tokens: 40, temperature: 0, presence_penalty: 2, frequency_penalty: 2,
  });
  const jsonChat = await client.chat.completions.create({
    model, messages, max_tokens: 64, temperature: 0.7, seed: 3, response_format: { type: 'json_object' },
  });
  let jsonOk = false;
  try {
    const v = JSON.parse(jsonChat.choices[0].message.content);
    jsonOk = v !== null && typeof v === 'object' && !Array.isArray(v);
  } catch (e) {
    jsonOk = false;
  }

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 1, seed: 11, n: 2, stream: true,
    stream_options: { include_usage: true },
  });
  const streamed = {};
  const finishes = {};
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      streamed[c.index] = (streamed[c.index] || '') + ((c.delta && c.delta.content) || '');
      if (c.finish_reason) finishes[c.index] = c.finish_reason;
    }
  }
  const whole = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 1, seed: 11, n: 2 });

  let badN = null;
  try {
    await client.completions.create({ model, prompt, n: 1000 });
  } catch (e) {
    badN = { status: e.status, param: e.param };
  }
  console.log(JSON.stringify({
    n_texts: n.choices.map((c) => c.text),
    n_indexes: n.choices.map((c) => c.index),
    completion_logprobs: cmplLogprobs.choices[0].logprobs,
    completion_text: cmplLogprobs.choices[0].text,
    chat_logprobs: chatLogprobs.choices[0].logprobs,
    chat_completion_tokens: chatLogprobs.usage.completion_tokens,
    base: base.choices[0].text,
    penalized: penalized.choices[0].text,
    json_text: jsonChat.choices[0].message.content,
    json_ok: jsonOk,
    stream_texts: streamed,
    stream_finishes: finishes,
    stream_usage: usage,
    whole_texts: whole.choices.map((c) => c.message.content),
    whole_usage: whole.usage,
    bad_n: badN,
  }));
}

main().catch((e) => {
  console.error('openai client failed:', e && e.stack ? e.stack : e);
  process.exit(1);
});
