// The official OpenAI Node SDK against `pagoda serve` (run by integration_test.cpp, which passes
// PAGODA_BASE_URL, PAGODA_API_KEY and NODE_PATH=tests/node/node_modules). Exits non-zero on the
// first failed check. Greedy (temperature 0) so streamed and whole responses can be compared.
'use strict';
const assert = require('node:assert/strict');
const mod = require('openai');
const OpenAI = mod.OpenAI || mod.default || mod;

const baseURL = process.env.PAGODA_BASE_URL + '/v1';
const apiKey = process.env.PAGODA_API_KEY;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });

async function expectError(promise, status, check) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, `expected an APIError, got ${err}`);
    assert.equal(err.status, status, `status of ${err.message}`);
    if (check) check(err);
    return;
  }
  assert.fail(`expected HTTP ${status}`);
}

async function main() {
  const models = await client.models.list();
  const model = models.data[0].id;
  assert.ok(model.length > 0);
  console.log(`model: ${model}`);

  // Completions: whole, then streamed with usage; the same greedy text.
  const base = { model, prompt: 'The quick brown fox', max_tokens: 12, temperature: 0 };
  const whole = await client.completions.create(base);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices.length, 1);
  assert.equal(typeof whole.choices[0].text, 'string');
  assert.ok(['length', 'stop'].includes(whole.choices[0].finish_reason));
  assert.ok(whole.usage.prompt_tokens > 0);
  assert.ok(whole.usage.completion_tokens > 0 && whole.usage.completion_tokens <= 12);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);

  const stream = await client.completions.create({ ...base, stream: true, stream_options: { include_usage: true } });
  let streamed = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      streamed += choice.text;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(streamed, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage, whole.usage);

  // n > 1 and a list of prompts.
  const multi = await client.completions.create({ model, prompt: ['a', 'b'], n: 2, max_tokens: 3, temperature: 0 });
  assert.equal(multi.choices.length, 4);
  assert.deepEqual(multi.choices.map((c) => c.index).sort(), [0, 1, 2, 3]);

  // echo + logprobs: the prompt's tokens come first in the logprobs, the first one unscored.
  const echoed = await client.completions.create({ ...base, max_tokens: 3, echo: true, logprobs: 2 });
  const elp = echoed.choices[0].logprobs;
  assert.ok(echoed.choices[0].text.startsWith(base.prompt));
  assert.equal(elp.tokens.length, echoed.usage.prompt_tokens + echoed.usage.completion_tokens);
  assert.equal(elp.token_logprobs[0], null);
  assert.equal(elp.top_logprobs[0], null);
  assert.ok(elp.token_logprobs.slice(1).every((v) => typeof v === 'number' && v <= 0));
  assert.equal(elp.text_offset[0], 0);

  // Chat: whole, streamed (role first, then content), usage, logprobs.
  const messages = [{ role: 'user', content: 'Say hello.' }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.equal(typeof chat.choices[0].message.content, 'string');
  assert.ok(chat.usage.completion_tokens > 0);

  const chatStream = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let content = '';
  let sawRole = false;
  let chatUsage = null;
  for await (const chunk of chatStream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) chatUsage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) sawRole = true;
      if (choice.delta.content) content += choice.delta.content;
    }
  }
  assert.ok(sawRole);
  assert.equal(content, chat.choices[0].message.content);
  assert.deepEqual(chatUsage, chat.usage);

  const withLogprobs = await client.chat.completions.create({
    model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  const lp = withLogprobs.choices[0].logprobs.content;
  assert.equal(lp.length, withLogprobs.usage.completion_tokens);
  assert.ok(lp[0].logprob <= 0);
  assert.equal(lp[0].top_logprobs.length, 2);

  // Tool calls forced by tool_choice required: a well-formed call, finish_reason tool_calls;
  // streamed, the SDK's own accumulator (chat.completions.stream) rebuilds the same call.
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['celsius', 'fahrenheit'] } },
        required: ['city', 'unit'],
        additionalProperties: false,
      },
    },
  }];
  const weatherMessages = [{ role: 'user', content: 'Weather in Oslo?' }];
  const toolRequest = {
    model, messages: weatherMessages, tools, tool_choice: 'required', parallel_tool_calls: false,
    max_tokens: 100, temperature: 0,
  };
  const called = await client.chat.completions.create(toolRequest);
  const calledChoice = called.choices[0];
  assert.equal(calledChoice.finish_reason, 'tool_calls');
  assert.equal(calledChoice.message.content, null);
  assert.equal(calledChoice.message.tool_calls.length, 1);
  const call = calledChoice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.match(call.id, /^chatcmpl-tool-/);
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(Object.keys(args).sort(), ['city', 'unit']);
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit));

  const toolStream = client.chat.completions.stream(toolRequest);
  const streamedCompletion = await toolStream.finalChatCompletion();
  const streamedChoice = streamedCompletion.choices[0];
  assert.equal(streamedChoice.finish_reason, 'tool_calls');
  assert.equal(streamedChoice.message.tool_calls.length, 1);
  assert.deepEqual(streamedChoice.message.tool_calls[0].function, call.function);

  // The named form, streamed by hand: the first delta names the function, the rest append.
  const named = await client.chat.completions.create({
    ...toolRequest, tool_choice: { type: 'function', function: { name: 'get_weather' } }, stream: true,
  });
  let namedArgs = '';
  let namedName = null;
  let namedFinish = null;
  for await (const chunk of named) {
    for (const choice of chunk.choices) {
      for (const delta of choice.delta.tool_calls || []) {
        assert.equal(delta.index, 0);
        if (delta.function.name) namedName = delta.function.name;
        namedArgs += delta.function.arguments || '';
      }
      if (choice.finish_reason) namedFinish = choice.finish_reason;
    }
  }
  assert.equal(namedName, 'get_weather');
  assert.equal(namedFinish, 'tool_calls');
  assert.deepEqual(Object.keys(JSON.parse(namedArgs)).sort(), ['city', 'unit']);

  // The call and its result go back into the history, rendered by the chat template.
  const followUp = await client.chat.completions.create({
    model, tools, tool_choice: 'none', max_tokens: 5, temperature: 0,
    messages: [...weatherMessages, calledChoice.message, { role: 'tool', tool_call_id: call.id, content: '-3 C' }],
  });
  assert.equal(typeof followUp.choices[0].message.content, 'string');
  assert.ok(!followUp.choices[0].message.tool_calls || followUp.choices[0].message.tool_calls.length === 0);
  await expectError(client.chat.completions.create({
    ...toolRequest, tool_choice: { type: 'function', function: { name: 'nope' } },
  }), 400, (err) => assert.equal(err.param, 'tool_choice.function.name'));

  // Errors: the SDK's typed errors with OpenAI's fields.
  await expectError(client.completions.create({ ...base, temperature: -1 }), 400, (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError);
    assert.equal(err.param, 'temperature');
  });
  await expectError(client.completions.create({ ...base, max_tokens: 100000000 }), 400, (err) => {
    assert.match(err.message, /over the limit/);
  });
  await expectError(client.chat.completions.create({ model, messages: [], max_tokens: 2 }), 400);
  await expectError(client.completions.create({ ...base, model: 'no-such-model' }), 404, (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError);
  });
  await expectError(client.completions.create({ ...base, bogus_field: 1 }), 400, (err) => {
    assert.equal(err.param, 'bogus_field');
  });

  // Auth.
  const intruder = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await expectError(intruder.models.list(), 401, (err) => assert.ok(err instanceof OpenAI.AuthenticationError));
  await expectError(intruder.completions.create(base), 401);

  console.log('openai sdk checks passed');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
