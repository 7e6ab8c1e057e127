#!/usr/bin/env node
// Produces the reference ids for the tokenizer differential test (tests/tokenizer/
// tokenizer_differential_test.cpp) with Hugging Face's own `tokenizers` (Rust, Node bindings).
//
//   node tokenizer_reference.js --testdata DIR --out DIR [--seed N] [--count N]
//
// It generates a corpus deterministically from the seed (random Unicode across scripts, emoji with
// ZWJ, digit runs, whitespace runs, code, mixed CJK/Latin, the tokenizer's own special-token strings
// embedded in text), encodes it with and without special tokens, decodes the ids (with and without
// skip_special_tokens) and decodes random id sequences. It also writes variant tokenizer.json files
// that exercise components our real tokenizers do not use (Metaspace, Digits, NFKC, Lowercase,
// Replace, Split behaviours, added-token lstrip/rstrip/single_word). Output: OUT/manifest.json and
// one JSON-lines file per tokenizer. If the `tokenizers` package is not installed it writes
// nothing and exits 0; the C++ test then skips.
'use strict';

const fs = require('fs');
const path = require('path');

function parseArgs(argv) {
  const args = { seed: 20261130, count: 4000 };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    args[key] = argv[i + 1];
  }
  args.seed = Number(args.seed);
  args.count = Number(args.count);
  if (!args.testdata || !args.out) {
    console.error('usage: tokenizer_reference.js --testdata DIR --out DIR [--seed N] [--count N]');
    process.exit(2);
  }
  return args;
}

// mulberry32: a small deterministic PRNG, so the corpus depends only on the seed.
function makeRng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),  // inclusive
    pick: (list) => list[Math.floor(next() * list.length)],
  };
}

// Code point ranges across scripts and symbol blocks (surrogates excluded).
const RANGES = [
  [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x24f], [0x250, 0x2af], [0x300, 0x36f], [0x370, 0x3ff],
  [0x400, 0x4ff], [0x530, 0x58f], [0x5d0, 0x5ea], [0x600, 0x6ff], [0x900, 0x97f], [0x980, 0x9ff],
  [0xe00, 0xe7f], [0x1780, 0x17ff], [0x10a0, 0x10ff], [0x1100, 0x11ff], [0x1e00, 0x1eff],
  [0x2000, 0x206f], [0x20a0, 0x20bf], [0x2100, 0x214f], [0x2150, 0x218f], [0x2190, 0x21ff],
  [0x2200, 0x22ff], [0x2460, 0x24ff], [0x2500, 0x257f], [0x2580, 0x259f], [0x3000, 0x303f],
  [0x3040, 0x309f], [0x30a0, 0x30ff], [0x4e00, 0x9fa5], [0x9fa6, 0x9fff], [0xac00, 0xd7a3],
  [0xf900, 0xfaff], [0xfb00, 0xfb4f], [0xfe30, 0xfe4f], [0xff00, 0xffef], [0x1d400, 0x1d7ff],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f900, 0x1f9ff], [0x20000, 0x2a6df], [0xe0000, 0xe007f],
  [0x1, 0x1f], [0x7f, 0x9f], [0x180e, 0x180e], [0x200b, 0x200f], [0xfeff, 0xfeff], [0xfff0, 0xfffd],
];
const WORDS = [
  'the', 'The', 'hello', 'world', 'tokenizer', 'DeepSeek', 'model', "it's", "don't", "we'll",
  "I'M", "They'RE", "you've", "she'd", 'naïve', 'café', 'Zürich', 'straße', 'Ελλάδα', 'Москва',
  'مرحبا', 'שלום', 'नमस्ते', 'ภาษาไทย', 'ជំរាបសួរ', '한국어', 'こんにちは', 'カタカナ', '中文',
  '深度求索', '人工智能', '東京', 'ﬁnance', 'Ⅻ', '½', '²', '３', '٣٤٥', '१२३', 'ABC', 'xyz',
];
const EMOJI = [
  '😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇨🇳', '🇺🇸', '❤️', '🧑🏿‍💻', '👩‍❤️‍💋‍👨', '🫠', '✈︎', '🦀', '1️⃣', '©️',
];
const SPACES = [' ', '  ', '\t', '\n', '\r\n', '\n\n', '\u00a0', '\u3000', '\u2009', '\u0085', '\u000b',
  '\u000c', '\r', '\u2028', '\u200b', '\u180e'];
const CODE = [
  'def f(x):\n    return x ** 2  # square\n',
  'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n',
  'const x = {"key": [1, 2.5, -3e10], "ok": true};',
  '#include <vector>\nint main() { return 0; }\n',
  'SELECT name, COUNT(*) FROM t WHERE id >= 42 GROUP BY name;',
  '    if a != b and not c:\n        raise ValueError(f"bad {a!r}")\n',
  '<div class="x">&amp; &lt;tag&gt;</div>',
  '$ ls -la | grep "*.cpp" && echo $HOME/.config',
  'x+=1;y-=2;z*=3;w/=4;v%=5;u<<=6;t>>=7;s&&=8;r||=9;',
  '```python\nprint("hi")\n```',
];

function randomCodePoint(rng) {
  const [lo, hi] = rng.pick(RANGES);
  return String.fromCodePoint(rng.int(lo, hi));
}

function fragment(rng, specials) {
  switch (rng.int(0, 11)) {
    case 0: {  // random Unicode across scripts
      let s = '';
      for (let n = rng.int(1, 24); n > 0; --n) s += randomCodePoint(rng);
      return s;
    }
    case 1: {  // emoji, with ZWJ sequences, skin tones, flags
      let s = '';
      for (let n = rng.int(1, 5); n > 0; --n) s += rng.pick(EMOJI) + (rng.next() < 0.3 ? ' ' : '');
      return s;
    }
    case 2: {  // digit runs, sometimes with separators and other numerals
      let s = rng.next() < 0.5 ? ' ' : '';
      for (let n = rng.int(1, 25); n > 0; --n) s += String(rng.int(0, 9));
      if (rng.next() < 0.3) s += rng.pick(['.', ',', '١٢', '３４', '²', '½']) + rng.int(0, 99999);
      return s;
    }
    case 3: {  // whitespace runs
      let s = '';
      for (let n = rng.int(1, 12); n > 0; --n) s += rng.pick(SPACES);
      return s;
    }
    case 4:  // code
      return rng.pick(CODE);
    case 5: {  // mixed CJK / Latin
      let s = '';
      for (let n = rng.int(2, 10); n > 0; --n) {
        s += rng.next() < 0.5 ? String.fromCodePoint(rng.int(0x4e00, 0x9fa5)) : rng.pick(WORDS);
        if (rng.next() < 0.3) s += rng.pick([' ', '，', '。', '、', ', ', '. ']);
      }
      return s;
    }
    case 6: case 7: {  // words and sentences
      let s = '';
      for (let n = rng.int(1, 12); n > 0; --n) {
        s += (rng.next() < 0.8 ? ' ' : '') + rng.pick(WORDS);
        if (rng.next() < 0.2) s += rng.pick(['.', ',', '!', '?', ';', ':', '...', '"', "'", '’']);
      }
      return s;
    }
    case 8: {  // special-token strings embedded in text, whole and broken
      if (specials.length === 0) return rng.pick(WORDS);
      const t = rng.pick(specials);
      const r = rng.next();
      if (r < 0.6) return t;
      if (r < 0.8) return t.slice(0, Math.max(1, t.length - rng.int(1, 3)));
      return ' ' + t + ' ';
    }
    case 9:  // punctuation and symbol runs
      return rng.pick(['!!!', '?!', '...', '---', '***', '==>', '<<<', '>>>', '##', '@@',
        '«»', '“”', '‘’', '【】', '——', '～～', '::', '\\\\', '//', '||']);
    case 10:  // ASCII word soup with apostrophes (contractions, case)
      return rng.pick(["'s", "'S", "'ll", "'LL", "'ve", "'d", "'m", "'re", "n't", "'t"]) +
             (rng.next() < 0.5 ? ' ' : '') + rng.pick(WORDS);
    default:  // combining marks and normalization-sensitive text
      return rng.pick(['e\u0301', 'A\u030a', '\u1e9b\u0323', 'ﬀ', '㍿', 'Å', 'Ω', 'K', 'ｶﾞ',
        '\u0130stanbul', 'ǅ', 'ﬆ', '①②', '⅓', 'x\u0336\u0336', 'Ⓐ']);
  }
}

function makeText(rng, specials) {
  let s = '';
  const n = rng.next() < 0.05 ? rng.int(20, 60) : rng.int(1, 8);
  for (let i = 0; i < n; ++i) s += fragment(rng, specials);
  return s;
}

// transformers' LlamaTokenizerFast (and kin) rebuild the post-processor from add_bos_token /
// add_eos_token; apply the same rule so add_special_tokens=true means what transformers means.
const REBUILDS = ['LlamaTokenizer', 'LlamaTokenizerFast', 'CodeLlamaTokenizer',
  'CodeLlamaTokenizerFast', 'GemmaTokenizer', 'GemmaTokenizerFast'];
function tokenString(v) { return v == null ? null : typeof v === 'string' ? v : v.content; }
function applyConfig(spec, config) {
  if (!config || !REBUILDS.includes(config.tokenizer_class)) return spec;
  const addBos = config.add_bos_token ?? true;
  const addEos = config.add_eos_token ?? false;
  const bos = tokenString(config.bos_token), eos = tokenString(config.eos_token);
  const idOf = (t) => {
    const added = spec.added_tokens.find((a) => a.content === t);
    return added ? added.id : spec.model.vocab[t];
  };
  const single = [], pair = [], special = {};
  const add = (tok, list) => {
    list.push({ SpecialToken: { id: tok, type_id: 0 } });
    special[tok] = { id: tok, ids: [idOf(tok)], tokens: [tok] };
  };
  if (addBos) add(bos, single);
  single.push({ Sequence: { id: 'A', type_id: 0 } });
  if (addEos) add(eos, single);
  if (addBos) add(bos, pair);
  pair.push({ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } });
  spec.post_processor = { type: 'TemplateProcessing', single, pair, special_tokens: special };
  return spec;
}

// Variants that exercise components the real tokenizers do not use.
function variants(testdata) {
  const read = (p) => JSON.parse(fs.readFileSync(path.join(testdata, p), 'utf8'));
  const out = [];
  {
    const spec = read('models/stories260K-hf/tokenizer.json');
    spec.normalizer = null;
    spec.pre_tokenizer = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true };
    spec.decoder = { type: 'Sequence', decoders: [
      { type: 'ByteFallback' }, { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true }] };
    out.push({ name: 'variant-metaspace', spec });
  }
  {
    // prepend_scheme "first": only the piece at the very start of the input gets the '▁'.
    const spec = read('models/stories260K-hf/tokenizer.json');
    spec.normalizer = null;
    spec.pre_tokenizer = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false };
    spec.decoder = { type: 'Sequence', decoders: [
      { type: 'ByteFallback' }, { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false }] };
    out.push({ name: 'variant-metaspace-first', spec });
  }
  {
    const spec = read('tokenizers/llama3/tokenizer.json');
    spec.normalizer = { type: 'Sequence', normalizers: [
      { type: 'NFKC' }, { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' },
      { type: 'Lowercase' }, { type: 'Prepend', prepend: '~' }] };
    spec.pre_tokenizer = { type: 'Sequence', pretokenizers: [
      { type: 'Digits', individual_digits: true },
      { type: 'Split', pattern: { String: '-' }, behavior: 'MergedWithPrevious', invert: false },
      { type: 'Split', pattern: { Regex: '[\\p{P}]+' }, behavior: 'MergedWithNext', invert: false },
      { type: 'Split', pattern: { Regex: '\\s+$' }, behavior: 'Removed', invert: false },
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }] };
    spec.decoder = { type: 'Sequence', decoders: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
      { type: 'Replace', pattern: { String: '~' }, content: '' },
      { type: 'Strip', content: ' ', start: 2, stop: 0 }] };
    // (Strip with stop > 0 panics in tokenizers 0.23 on an empty token, so only start is used.)
    // Added-token flags: lstrip / rstrip / single_word / normalized on a few tokens.
    const flag = (id, f) => Object.assign(spec.added_tokens.find((t) => t.id === id), f);
    flag(128002, { lstrip: true });
    flag(128003, { rstrip: true });
    flag(128004, { lstrip: true, rstrip: true, special: false });
    flag(128005, { single_word: true });
    const wordId = spec.model.vocab['hello'];
    spec.added_tokens.push({ id: wordId, content: 'hello', single_word: true, lstrip: false,
      rstrip: false, normalized: true, special: false });
    spec.added_tokens.push({ id: spec.model.vocab['world'], content: 'world', single_word: false,
      lstrip: true, rstrip: false, normalized: false, special: false });
    out.push({ name: 'variant-llama3-components', spec });
  }
  {
    const spec = read('tokenizers/qwen3/tokenizer.json');
    spec.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'Strip', strip_left: true, strip_right: true }] };
    spec.pre_tokenizer = { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: '\\p{L}+' }, behavior: 'Contiguous', invert: true },
      { type: 'Digits', individual_digits: false },
      { type: 'Split', pattern: { Regex: '\\s' }, behavior: 'Isolated', invert: true },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] };
    out.push({ name: 'variant-qwen3-split-behaviours', spec });
  }
  return out;
}

async function main() {
  const args = parseArgs(process.argv);
  fs.rmSync(args.out, { recursive: true, force: true });
  let Tokenizer;
  try {
    ({ Tokenizer } = require('tokenizers'));
  } catch (e) {
    console.log(`SKIP: the npm package 'tokenizers' is not installed (run npm install in ${__dirname})`);
    return;
  }
  if (!fs.existsSync(path.join(args.testdata, 'models', 'stories260K-hf', 'tokenizer.json'))) {
    // No manifest is written, so the C++ differential test skips too.
    console.log(`SKIP: shared test data not found at ${args.testdata}`);
    return;
  }
  fs.mkdirSync(args.out, { recursive: true });

  const real = [
    ['deepseek-v3', 'tokenizers/deepseek-v3'],
    ['deepseek-llm', 'derived/deepseek-llm-tokenizer-from-gguf'],
    ['deepseek-coder', 'derived/deepseek-coder-tokenizer-from-gguf'],
    ['qwen3', 'tokenizers/qwen3'],
    ['llama3', 'tokenizers/llama3'],
    ['stories260K', 'models/stories260K-hf'],
  ];
  const jobs = [];
  for (const [name, dir] of real) {
    const jsonPath = path.join(args.testdata, dir, 'tokenizer.json');
    if (!fs.existsSync(jsonPath)) continue;
    const configPath = path.join(args.testdata, dir, 'tokenizer_config.json');
    const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, 'utf8')) : null;
    const spec = applyConfig(JSON.parse(fs.readFileSync(jsonPath, 'utf8')), config);
    jobs.push({ name, spec, tokenizer_json: jsonPath, tokenizer_config: config ? configPath : null });
  }
  for (const v of variants(args.testdata)) {
    const jsonPath = path.join(args.out, `${v.name}.tokenizer.json`);
    fs.writeFileSync(jsonPath, JSON.stringify(v.spec));
    // Relative paths in the manifest are relative to the manifest's directory.
    jobs.push({ name: v.name, spec: v.spec, tokenizer_json: path.basename(jsonPath), tokenizer_config: null });
  }

  const manifest = { seed: args.seed, count: args.count, tokenizers: [] };
  for (const job of jobs) {
    const tok = Tokenizer.fromString(JSON.stringify(job.spec));
    const specials = job.spec.added_tokens.map((t) => t.content).filter((c) => c.length < 40);
    const rng = makeRng(args.seed);
    const lines = [];
    for (let i = 0; i < args.count; ++i) {
      const text = makeText(rng, specials);
      const plain = await tok.encode(text, null, { addSpecialTokens: false });
      const withSpecial = await tok.encode(text, null, { addSpecialTokens: true });
      const ids = Array.from(plain.getIds());
      lines.push(JSON.stringify({
        text, ids, ids_special: Array.from(withSpecial.getIds()),
        decoded: await tok.decode(ids, false),
        decoded_skip: await tok.decode(Array.from(withSpecial.getIds()), true),
      }));
    }
    // Random id sequences: decoding arbitrary ids (partial UTF-8, specials, byte tokens).
    const vocabSize = tok.getVocabSize(true);
    const idLines = [];
    for (let i = 0; i < Math.max(1, args.count / 4); ++i) {
      const ids = [];
      for (let n = rng.int(1, 24); n > 0; --n) {
        ids.push(rng.next() < 0.1 ? rng.pick(job.spec.added_tokens).id : rng.int(0, vocabSize - 1));
      }
      idLines.push(JSON.stringify({ ids, decoded: await tok.decode(ids, false),
        decoded_skip: await tok.decode(ids, true) }));
    }
    const file = `${job.name}.jsonl`;
    fs.writeFileSync(path.join(args.out, file), lines.join('\n') + '\n');
    fs.writeFileSync(path.join(args.out, `${job.name}.ids.jsonl`), idLines.join('\n') + '\n');
    manifest.tokenizers.push({ name: job.name, tokenizer_json: job.tokenizer_json,
      tokenizer_config: job.tokenizer_config, texts: file, id_sequences: `${job.name}.ids.jsonl` });
    console.log(`${job.name}: ${lines.length} texts, ${idLines.length} id sequences`);
  }
  fs.writeFileSync(path.join(args.out, 'manifest.json'), JSON.stringify(manifest, null, 1));
}

main().catch((e) => { console.error(e); process.exit(1); });
