// Tool calls through the client libraries people build agents with, against `pagoda serve` on a
// random-weight model (run by integration_test.cpp, which passes PAGODA_BASE_URL,
// PAGODA_API_KEY and NODE_PATH=tests/node/node_modules): LangChain JS `bindTools(...).invoke()`
// and the Vercel AI SDK's `generateText` and `streamText`, each with zod tools. A random model
// only writes a valid call when the call is forced, so every case forces one (`required`, or a
// named function) and the server's grammar does the rest; the libraries parse the calls
// themselves, and this script checks that each names one of the tools and that its arguments
// validate against that tool's zod schema. Exits non-zero on the first failed check.
'use strict';
const assert = require('node:assert/strict');
const { z } = require('zod');
const { ChatOpenAI } = require('@langchain/openai');
const { tool: langchainTool } = require('@langchain/core/tools');
const { generateText, streamText, tool } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { closerBias } = require('./closer_bias.cjs');

const serverURL = process.env.PAGODA_BASE_URL;
const baseURL = serverURL + '/v1';
const apiKey = process.env.PAGODA_API_KEY;

// Two tools with bounded arguments, so that a forced call must pick between them and its
// arguments fit in max_tokens.
const schemas = {
  get_weather: z.object({
    city: z.string().max(8),
    unit: z.enum(['celsius', 'fahrenheit']),
  }),
  add: z.object({
    a: z.number().int().min(-100).max(100),
    b: z.number().int().min(-100).max(100),
  }),
};
const descriptions = {
  get_weather: 'Current weather in a city.',
  add: 'Sum of two integers.',
};

// One call: a known tool, arguments valid for it. Returns the parsed arguments.
function checkCall(name, args, where) {
  assert.ok(Object.hasOwn(schemas, name), `${where}: unknown tool ${name}`);
  assert.ok(args !== null && typeof args === 'object' && !Array.isArray(args), `${where}: ${JSON.stringify(args)}`);
  return schemas[name].parse(args);
}

async function langchain(model, bias) {
  const lcTools = Object.keys(schemas).map((name) =>
    langchainTool(async () => '', { name, description: descriptions[name], schema: schemas[name] }),
  );
  const chat = (seed) =>
    new ChatOpenAI({
      model,
      apiKey,
      configuration: { baseURL },
      temperature: 1,
      maxTokens: 200,
      maxRetries: 0,
      logitBias: bias,
      modelKwargs: { seed },
    });
  // "any" is LangChain's forced choice (sent as "required"); a bare tool name is sent as
  // {type: "function", function: {name}}.
  for (const [choice, seed] of [
    ['any', 11],
    ['required', 12],
    ['add', 13],
    ['get_weather', 14],
  ]) {
    const bound = chat(seed).bindTools(lcTools, { tool_choice: choice, parallel_tool_calls: false });
    const message = await bound.invoke('Use a tool.');
    assert.equal(message.tool_calls?.length, 1, JSON.stringify(message));
    assert.deepEqual(message.invalid_tool_calls ?? [], []);
    const call = message.tool_calls[0];
    if (choice in schemas) assert.equal(call.name, choice);
    checkCall(call.name, call.args, `langchain ${choice}`);
    assert.ok(call.id?.length > 0);
    assert.equal(message.response_metadata.finish_reason, 'tool_calls');
    console.log(`langchain tool_choice=${choice}: ${call.name} ${JSON.stringify(call.args)}`);
  }

  // Streamed: the chunks' tool_call_chunks, concatenated by LangChain, give the call.
  const stream = await chat(15)
    .bindTools(lcTools, { tool_choice: 'any', parallel_tool_calls: false })
    .stream('Use a tool.');
  let whole;
  for await (const chunk of stream) whole = whole === undefined ? chunk : whole.concat(chunk);
  assert.equal(whole.tool_calls?.length, 1, JSON.stringify(whole));
  assert.deepEqual(whole.invalid_tool_calls ?? [], []);
  checkCall(whole.tool_calls[0].name, whole.tool_calls[0].args, 'langchain stream');
  assert.equal(whole.response_metadata.finish_reason, 'tool_calls');
  console.log(`langchain stream: ${whole.tool_calls[0].name} ${JSON.stringify(whole.tool_calls[0].args)}`);
}

function vercelTools() {
  const tools = {};
  for (const name of Object.keys(schemas)) {
    tools[name] = tool({ description: descriptions[name], inputSchema: schemas[name] });
  }
  return tools;
}

async function vercelGenerate(openai, model, bias) {
  for (const [toolChoice, seed] of [
    ['required', 21],
    ['required', 22],
    [{ type: 'tool', toolName: 'get_weather' }, 23],
  ]) {
    const { toolCalls, finishReason, text } = await generateText({
      model: openai.chat(model),
      tools: vercelTools(),
      toolChoice,
      prompt: 'Use a tool.',
      temperature: 1,
      seed,
      maxOutputTokens: 200,
      maxRetries: 0,
      providerOptions: { openai: { logitBias: bias, parallelToolCalls: false } },
    });
    assert.equal(finishReason, 'tool-calls');
    assert.equal(text, '');
    assert.equal(toolCalls.length, 1, JSON.stringify(toolCalls));
    const call = toolCalls[0];
    assert.ok(!call.invalid, JSON.stringify(call));
    if (typeof toolChoice === 'object') assert.equal(call.toolName, toolChoice.toolName);
    checkCall(call.toolName, call.input, 'ai generateText');
    assert.ok(call.toolCallId.length > 0);
    console.log(`ai generateText ${JSON.stringify(toolChoice)}: ${call.toolName} ${JSON.stringify(call.input)}`);
  }
}

// Streamed, the SDK assembles each call from its argument deltas: the input deltas put
// together must be the call's arguments, and the call must be a valid one.
async function vercelStream(openai, model, bias) {
  for (const [toolChoice, seed] of [
    ['required', 31],
    [{ type: 'tool', toolName: 'add' }, 32],
  ]) {
    const result = streamText({
      model: openai.chat(model),
      tools: vercelTools(),
      toolChoice,
      prompt: 'Use a tool.',
      temperature: 1,
      seed,
      maxOutputTokens: 200,
      maxRetries: 0,
      providerOptions: { openai: { logitBias: bias, parallelToolCalls: false } },
      onError: ({ error }) => {
        throw error;
      },
    });
    const calls = [];
    const inputs = new Map();
    for await (const part of result.fullStream) {
      if (part.type === 'error') throw part.error;
      if (part.type === 'tool-input-start') inputs.set(part.id, { name: part.toolName, text: '' });
      if (part.type === 'tool-input-delta') inputs.get(part.id).text += part.delta;
      if (part.type === 'tool-call') calls.push(part);
    }
    assert.equal(await result.finishReason, 'tool-calls');
    assert.equal(calls.length, 1, JSON.stringify(calls));
    const call = calls[0];
    assert.ok(!call.invalid, JSON.stringify(call));
    if (typeof toolChoice === 'object') assert.equal(call.toolName, toolChoice.toolName);
    checkCall(call.toolName, call.input, 'ai streamText');
    const streamed = inputs.get(call.toolCallId);
    assert.ok(streamed, `no input deltas for ${call.toolCallId}`);
    assert.equal(streamed.name, call.toolName);
    assert.deepEqual(JSON.parse(streamed.text), call.input);
    assert.deepEqual(await result.toolCalls, calls);
    console.log(`ai streamText ${JSON.stringify(toolChoice)}: ${call.toolName} ${streamed.text}`);
  }
}

async function main() {
  const models = await (await fetch(baseURL + '/models', { headers: { Authorization: `Bearer ${apiKey}` } })).json();
  const model = models.data[0].id;
  const bias = await closerBias(serverURL, apiKey);
  await langchain(model, bias);
  const openai = createOpenAI({ baseURL, apiKey });
  await vercelGenerate(openai, model, bias);
  await vercelStream(openai, model, bias);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
