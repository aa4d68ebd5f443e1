// The official OpenAI client (npm "openai") against pdserve's HTTP front on a real cluster:
// chat and completions, whole and streamed (the same greedy text both ways), usage counts,
// a stop string, errors with their status and parameter, the model list.
// Usage: node openai_client_check.mjs NODE_MODULES_DIR BASE_URL MODEL
// Prints "ok: ..." per check and exits 1 at the first failure.
import path from 'path';
import { pathToFileURL } from 'url';

const [nodeModules, baseUrl, model] = process.argv.slice(2);
const { default: OpenAI } = await import(
  pathToFileURL(path.join(nodeModules, 'openai', 'index.mjs')).href);
const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'not-checked', maxRetries: 0 });

function check(condition, what, detail = '') {
  if (!condition) {
    console.log(`FAIL: ${what} ${detail}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Name three colours.' }];
const greedy = { model, temperature: 0, max_tokens: 12, ignore_eos: true };

// Chat, whole.
const whole = await client.chat.completions.create({ ...greedy, messages });
check(whole.object === 'chat.completion' && whole.id.startsWith('chatcmpl-'), 'chat completion shape', JSON.stringify(whole));
check(whole.choices.length === 1 && whole.choices[0].message.role === 'assistant', 'one assistant message');
check(whole.choices[0].finish_reason === 'length', 'finish_reason length at max_tokens', whole.choices[0].finish_reason);
const u = whole.usage;
check(u.completion_tokens === 12 && u.prompt_tokens > 5 && u.total_tokens === u.prompt_tokens + 12, 'usage counts', JSON.stringify(u));
check(['local', 'offload'].includes(whole.pdserve?.placement?.mode), 'pdserve placement in the response', JSON.stringify(whole.pdserve));

// Chat, streamed: the same greedy text, the role first, then the finish, then usage.
const stream = await client.chat.completions.create({ ...greedy, messages, stream: true, stream_options: { include_usage: true } });
let text = '', role = null, finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (!choice) continue;
  if (choice.delta.role) role = role ?? choice.delta.role;
  text += choice.delta.content ?? '';
  if (choice.finish_reason) finish = choice.finish_reason;
}
check(text === whole.choices[0].message.content, 'streamed chat text equals the whole one', JSON.stringify([text, whole.choices[0].message.content]));
check(role === 'assistant' && finish === 'length' && chunks >= 3, 'stream has role, finish and several chunks');
check(usage && usage.completion_tokens === 12 && usage.prompt_tokens === u.prompt_tokens, 'stream usage chunk', JSON.stringify(usage));

// Completions, whole and streamed.
const prompt = 'The quick brown fox';
const completion = await client.completions.create({ model, prompt, temperature: 0, max_tokens: 16, ignore_eos: true });
check(completion.object === 'text_completion' && completion.choices[0].text.length > 0, 'completion shape');
let streamed = '';
for await (const chunk of await client.completions.create({ model, prompt, temperature: 0, max_tokens: 16, ignore_eos: true, stream: true })) {
  streamed += chunk.choices[0]?.text ?? '';
}
check(streamed === completion.choices[0].text, 'streamed completion equals the whole one', JSON.stringify([streamed, completion.choices[0].text]));

// A stop string taken from the greedy text: generation ends just before it.
const full = completion.choices[0].text;
let stop = null, at = -1;
for (let k = 1; k + 2 <= full.length && stop === null; k++) {
  const candidate = full.slice(k, k + 2);
  if (full.indexOf(candidate) === k && candidate.trim().length === 2) { stop = candidate; at = k; }
}
check(stop !== null, 'found a stop string in the greedy text', JSON.stringify(full));
const stopped = await client.completions.create({ model, prompt, temperature: 0, max_tokens: 16, ignore_eos: true, stop: [stop] });
check(stopped.choices[0].text === full.slice(0, at) && stopped.choices[0].finish_reason === 'stop',
      'stop string ends the text before it', JSON.stringify([stop, stopped.choices[0].text, full.slice(0, at)]));

// Errors: the client raises with the status, type and parameter.
try {
  await client.chat.completions.create({ ...greedy, messages, n: 2 });
  check(false, 'n=2 refused');
} catch (e) {
  check(e.status === 400 && e.param === 'n' && e.type === 'invalid_request_error', 'n=2 is a 400 naming n', `${e.status} ${e.param} ${e.type}`);
}
try {
  await client.chat.completions.create({ ...greedy, messages, model: 'no-such-model' });
  check(false, 'unknown model refused');
} catch (e) {
  check(e.status === 404 && e.code === 'model_not_found', 'unknown model is a 404 model_not_found', `${e.status} ${e.code}`);
}
try {
  await client.chat.completions.create({ ...greedy, messages, temperature: -1 });
  check(false, 'negative temperature refused');
} catch (e) {
  check(e.status === 400 && e.param === 'temperature', 'negative temperature is a 400 naming temperature (router check)', `${e.status} ${e.param}`);
}

const models = [];
for await (const m of client.models.list()) models.push(m.id);
check(models.includes(model), 'model list', JSON.stringify(models));
console.log('all checks passed');
