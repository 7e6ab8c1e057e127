// Validates documents against JSON schemas with ajv (draft 2020-12) and ajv-formats, for
// tests/grammar/grammar_ajv_test.cpp. Input: [{schema, documents: [text, ...]}, ...];
// output: [[{valid, error}, ...], ...]. Exits 77 when the packages are not installed.
'use strict';
const fs = require('fs');

let Ajv2020;
let addFormats;
try {
  Ajv2020 = require('ajv/dist/2020').default;
  addFormats = require('ajv-formats').default;
} catch (e) {
  process.exit(77);
}

const [inPath, outPath] = process.argv.slice(2);
const cases = JSON.parse(fs.readFileSync(inPath, 'utf8'));
const results = cases.map(({schema, documents}) => {
  const ajv = new Ajv2020({strict: false, allErrors: false});
  addFormats(ajv);
  // The $schema keyword of draft-07 schemas (zod) names a meta-schema ajv2020 does not load.
  const copy = {...schema};
  delete copy.$schema;
  const validate = ajv.compile(copy);
  return documents.map((text) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return {valid: false, error: 'not JSON: ' + e.message};
    }
    const valid = validate(value);
    return {valid, error: valid ? null : ajv.errorsText(validate.errors)};
  });
});
fs.writeFileSync(outPath, JSON.stringify(results));
