// The official `openai` npm package against `moe serve`: a completion, a chat
// completion and a streamed chat completion, greedy. Prints one JSON object.
// Usage: NODE_PATH=<node_modules> node openai_client.cjs BASE_URL PROMPT MAX_TOKENS [API_KEY]
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
  const [baseURL, prompt, maxTokensText, apiKey] = process.argv.slice(2);
  const max_tokens = parseInt(maxTokensText, 10);
  const client = new OpenAI({
    baseURL: baseURL + '/v1', apiKey: apiKey || 'no-key', maxRetries: 0, timeout: 120000, ...nodeFetchWorkaround(),
  });
  const models = await client.models.list();
  const model = models.data[0].id;
  const completion = await client.completions.create({ model, prompt, max_tokens, temperature: 0 });
  const messages = [{ role: 'user', content: prompt }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens, temperature: 0 });
  const stream = await client.chat.completions.create({
    model, messages, max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let streamed = '';
  let chunks = 0;
  let streamFinish = null;
  let streamUsage = null;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) streamUsage = chunk.usage;
    for (const choice of chunk.choices) {
      streamed += (choice.delta && choice.delta.content) || '';
      if (choice.finish_reason) streamFinish = choice.finish_reason;
    }
  }
  // A bad request surfaces as the package's typed error with the server's status.
  let badStatus = null;
  try {
    await client.completions.create({ model, prompt, max_tokens: -1 });
  } catch (e) {
    badStatus = e.status;
  }
  console.log(JSON.stringify({
    model,
    completion: completion.choices[0].text,
    completion_finish: completion.choices[0].finish_reason,
    completion_usage: completion.usage,
    chat: chat.choices[0].message.content,
    chat_role: chat.choices[0].message.role,
    chat_finish: chat.choices[0].finish_reason,
    stream: streamed,
    stream_chunks: chunks,
    stream_finish: streamFinish,
    stream_usage: streamUsage,
    bad_request_status: badStatus,
  }));
}

main().catch((e) => {
  console.error('openai client failed:', e && e.stack ? e.stack : e);
  process.exit(1);
});
