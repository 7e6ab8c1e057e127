// Shared by the client-library tests (structured_clients_test.cjs, tool_clients_test.cjs).
// A random model rarely draws the one token that closes a string or a structure among the
// hundreds the grammar allows inside it; favouring those few keeps answers within max_tokens.
// The bias changes which allowed token is drawn, never what the grammar allows.
'use strict';
const assert = require('node:assert/strict');

// logit_bias {token id: 4} for the tokens of `"`, `,`, `}` and `]`, found with /tokenize.
async function closerBias(serverURL, apiKey) {
  const bias = {};
  for (const text of ['"', ',', '}', ']']) {
    const res = await fetch(serverURL + '/tokenize', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ prompt: text, add_special_tokens: false }),
    });
    assert.equal(res.status, 200);
    const { tokens } = await res.json();
    assert.equal(tokens.length, 1, `'${text}' is one token`);
    bias[tokens[0]] = 4;
  }
  return bias;
}

module.exports = { closerBias };
