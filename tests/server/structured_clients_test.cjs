// Structured output through the client libraries people build agents with, against `pagoda serve`
// on a random-weight model (run by integration_test.cpp, which passes PAGODA_BASE_URL,
// PAGODA_API_KEY and NODE_PATH=tests/node/node_modules): LangChain JS `withStructuredOutput` in
// its jsonSchema and jsonMode methods and the Vercel AI SDK's `generateObject`, each with a zod
// schema. What they return must validate against that schema; the libraries parse and check
// the responses themselves, and so does this script, with zod. Exits non-zero on the first
// failed check.
'use strict';
const assert = require('node:assert/strict');
const { z } = require('zod');
const { ChatOpenAI } = require('@langchain/openai');
const { generateObject } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { closerBias } = require('./closer_bias.cjs');

const serverURL = process.env.PAGODA_BASE_URL;
const baseURL = serverURL + '/v1';
const apiKey = process.env.PAGODA_API_KEY;

// Bounded fields, as a schema for a model's answer usually has them.
const Person = z.object({
  name: z.string().max(8),
  age: z.number().int().min(0).max(120),
  role: z.enum(['admin', 'user', 'guest']),
  tags: z.array(z.string().max(4)).max(3),
  manager: z.string().max(6).nullable(),
});

async function main() {
  const models = await (await fetch(baseURL + '/models', { headers: { Authorization: `Bearer ${apiKey}` } })).json();
  const model = models.data[0].id;
  const bias = await closerBias(serverURL, apiKey);
  const prompt = 'Describe a person as JSON.';

  // LangChain, jsonSchema: the zod schema goes to the server as response_format json_schema,
  // and the reply is parsed and checked against it.
  const chatModel = (seed) =>
    new ChatOpenAI({
      model,
      apiKey,
      configuration: { baseURL },
      temperature: 1,
      maxTokens: 300,
      maxRetries: 0,
      logitBias: bias,
      modelKwargs: { seed },
    });
  for (const seed of [3, 4]) {
    const structured = chatModel(seed).withStructuredOutput(Person, {
      method: 'jsonSchema',
      name: 'person',
      strict: true,
    });
    const person = await structured.invoke(prompt);
    Person.parse(person);
    console.log(`langchain jsonSchema: ${JSON.stringify(person)}`);
  }

  // LangChain, jsonMode: response_format json_object, so the server guarantees a JSON object
  // but never sees the schema (the prompt alone asks for it, which a random model cannot
  // follow): the raw reply must be an object; what parses into the schema must validate.
  const jsonMode = chatModel(7).withStructuredOutput(Person, { method: 'jsonMode', includeRaw: true });
  const { raw, parsed } = await jsonMode.invoke(prompt);
  const content = typeof raw.content === 'string' ? raw.content : JSON.stringify(raw.content);
  const value = JSON.parse(content);
  assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), content);
  if (parsed) Person.parse(parsed);
  console.log(`langchain jsonMode: ${content}`);

  // Vercel AI SDK generateObject over chat completions: the schema as response_format
  // json_schema; the SDK throws if the reply does not validate.
  const openai = createOpenAI({ baseURL, apiKey });
  for (const seed of [5, 6]) {
    const { object, finishReason } = await generateObject({
      model: openai.chat(model),
      schema: Person,
      prompt,
      temperature: 1,
      seed,
      maxOutputTokens: 300,
      maxRetries: 0,
      providerOptions: { openai: { logitBias: bias, strictJsonSchema: true } },
    });
    assert.equal(finishReason, 'stop');
    Person.parse(object);
    console.log(`ai generateObject: ${JSON.stringify(object)}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
