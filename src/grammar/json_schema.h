// JSON Schema (as OpenAI's strict mode, pydantic and zod emit it) to the grammar IR, and the
// any-JSON grammar behind response_format json_object.
//
// Supported: type (one or a list), properties, required, additionalProperties, enum, const,
// anyOf, oneOf (as anyOf: the branches are assumed disjoint, as discriminated unions are),
// allOf of object schemas, items, prefixItems, minItems, maxItems, minLength, maxLength, pattern
// (JSON Schema's unanchored search), format (date, time, date-time, uuid, email, uri), minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, $ref into the document ($defs, definitions, "#"),
// recursion included. Annotations (title, description, default, examples, ...) are ignored; any
// other keyword is an error naming its JSON pointer. The grammar's language is a subset of the
// schema's: every document it produces validates (tests check this against ajv).
//
// Whitespace: by default bounded — no whitespace but one optional space after ',' and ':' (what
// json.dumps and JSON.stringify-with-spaces produce on one line); any_whitespace allows JSON's
// whitespace anywhere, as vLLM does unless disable_any_whitespace is set.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace pagoda::grammar {

struct JsonGrammarOptions {
  bool any_whitespace = false;
  // Absent additionalProperties means none and items past prefixItems are not generated (as in
  // xgrammar's strict mode); off follows the JSON Schema defaults (anything allowed).
  bool strict = true;
};

// Throws GrammarError naming the JSON pointer of the offending keyword.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema,
                            const JsonGrammarOptions& options);
// Parses `schema_text` first (a syntax error is a GrammarError too).
Grammar json_schema_grammar(std::string_view schema_text, const JsonGrammarOptions& options);
// Any JSON object (response_format json_object), or any JSON value.
Grammar any_json_grammar(const JsonGrammarOptions& options, bool object_only = true);

}  // namespace pagoda::grammar
