// Renders a Helm chart without Helm (which Debian does not ship), for the tests of
// deploy/helm/pagoda. It understands the part of Helm's template language that chart uses and
// throws on anything else, so a template that grows past it fails the tests instead of rendering
// differently from Helm:
//   {{ .Values.a.b }} {{ .Release.Name }} {{ .Chart.Name }} {{ .Chart.AppVersion }}
//   {{- if X }} {{- else }} {{- end }}, with `not X`; {{- define "n" }} and include "n" .
//   pipelines through quote, toYaml, indent N, nindent N, default D; {{/* comments */}}
//   {{- and -}} trimming whitespace on their side.
// A value the templates name but values.yaml lacks is an error here (Helm prints nothing), since
// it is almost always a typo. toYaml sorts keys and drops the final newline, as Helm's does.
import fs from "node:fs";
import path from "node:path";

export function createRenderer(YAML) {
  // Splits a template into text and actions, applying the trim markers.
  function lex(source, file) {
    const tokens = [];
    const re = /\{\{(-?)(\s*)([\s\S]*?)(\s*)(-?)\}\}/g;
    let last = 0;
    let m;
    while ((m = re.exec(source)) !== null) {
      tokens.push({ kind: "text", text: source.slice(last, m.index) });
      if (m[1] === "-") tokens[tokens.length - 1].text = tokens[tokens.length - 1].text.trimEnd();
      tokens.push({ kind: "action", text: m[3], file, trimRight: m[5] === "-" });
      last = re.lastIndex;
    }
    tokens.push({ kind: "text", text: source.slice(last) });
    for (let i = 1; i < tokens.length; i++) {
      if (tokens[i].kind === "text" && tokens[i - 1].trimRight) tokens[i].text = tokens[i].text.trimStart();
    }
    return tokens;
  }

  // Builds the tree: text, output, if (then/else bodies) and define nodes.
  function parse(tokens, file) {
    const root = { body: [] };
    const stack = [{ node: root, list: root.body }];
    for (const t of tokens) {
      const top = stack[stack.length - 1];
      if (t.kind === "text") {
        if (t.text) top.list.push({ kind: "text", text: t.text });
        continue;
      }
      const a = t.text;
      if (a.startsWith("/*")) {
        if (!a.endsWith("*/")) throw new Error(`${file}: unterminated comment`);
        continue;
      }
      let m;
      if ((m = /^if\s+(.+)$/s.exec(a))) {
        const node = { kind: "if", cond: m[1], then: [], else: [] };
        top.list.push(node);
        stack.push({ node, list: node.then });
      } else if (a === "else") {
        if (top.node.kind !== "if" || top.list !== top.node.then) throw new Error(`${file}: stray else`);
        top.list = top.node.else;
      } else if ((m = /^define\s+"([^"]+)"$/.exec(a))) {
        const node = { kind: "define", name: m[1], body: [] };
        top.list.push(node);
        stack.push({ node, list: node.body });
      } else if (a === "end") {
        if (stack.length === 1) throw new Error(`${file}: stray end`);
        stack.pop();
      } else if (/^(range|with|template|block|else if)\b/.test(a)) {
        throw new Error(`${file}: '${a}' is beyond what tests/deploy/helm_subset.mjs renders`);
      } else {
        top.list.push({ kind: "output", expr: a, file });
      }
    }
    if (stack.length !== 1) throw new Error(`${file}: missing end`);
    return root.body;
  }

  function splitOutside(text, sep) {
    const parts = [];
    let cur = "";
    let quoted = false;
    for (const ch of text) {
      if (ch === '"') quoted = !quoted;
      if (!quoted && sep.test(ch)) {
        if (cur) parts.push(cur);
        cur = "";
      } else cur += ch;
    }
    if (quoted) throw new Error(`unterminated string in '${text}'`);
    if (cur) parts.push(cur);
    return parts;
  }

  const kMissing = Symbol("missing");

  function lookup(ctx, ref) {
    if (ref === ".") return ctx;
    let v = ctx;
    for (const key of ref.slice(1).split(".")) {
      if (v === null || typeof v !== "object" || !(key in v)) return kMissing;
      v = v[key];
    }
    return v;
  }

  function truthy(v) {
    if (v === kMissing || v === null || v === undefined || v === false || v === 0 || v === "") return false;
    if (Array.isArray(v)) return v.length > 0;
    if (typeof v === "object") return Object.keys(v).length > 0;
    return true;
  }

  function scalarString(v, expr) {
    if (v === kMissing) throw new Error(`'${expr}': no such value`);
    if (typeof v === "string") return v;
    if (typeof v === "number" || typeof v === "boolean") return String(v);
    throw new Error(`'${expr}': cannot print a ${Array.isArray(v) ? "list" : typeof v}`);
  }

  function toYaml(v) {
    return YAML.stringify(v, { sortMapEntries: true, lineWidth: 0 }).replace(/\n$/, "");
  }

  function indentLines(text, n) {
    const pad = " ".repeat(n);
    return text.split("\n").map((line) => pad + line).join("\n");
  }

  // One command of a pipeline; `piped` (if any) is the previous command's result, which Go
  // templates pass as the last argument.
  function evalCommand(words, ctx, piped, state, expr) {
    const arg = (w) => {
      if (w.startsWith('"')) return JSON.parse(w);
      if (/^-?\d+$/.test(w)) return Number(w);
      if (w.startsWith(".")) return lookup(ctx, w);
      throw new Error(`'${expr}': cannot read '${w}'`);
    };
    const [head, ...rest] = words;
    const args = rest.map(arg);
    if (piped !== undefined) args.push(piped);
    const want = (n) => {
      if (args.length !== n) throw new Error(`'${expr}': ${head} takes ${n} arguments`);
    };
    switch (head) {
      case "include": {
        want(2);
        const body = state.defines.get(args[0]);
        if (!body) throw new Error(`'${expr}': no template "${args[0]}"`);
        return renderNodes(body, args[1], state);
      }
      case "toYaml":
        want(1);
        if (args[0] === kMissing) throw new Error(`'${expr}': no such value`);
        return toYaml(args[0]);
      case "nindent":
        want(2);
        return "\n" + indentLines(scalarString(args[1], expr), args[0]);
      case "indent":
        want(2);
        return indentLines(scalarString(args[1], expr), args[0]);
      case "quote":
        want(1);
        return JSON.stringify(scalarString(args[0], expr));
      case "default":
        want(2);
        return truthy(args[1]) ? args[1] : args[0];
      case "not":
        want(1);
        return !truthy(args[0]);
      default:
        if (words.length === 1 && piped === undefined) return arg(head);
        throw new Error(`'${expr}': unknown function '${head}'`);
    }
  }

  function evalPipeline(expr, ctx, state) {
    let value;
    for (const command of splitOutside(expr, /\|/)) {
      value = evalCommand(splitOutside(command.trim(), /\s/), ctx, value, state, expr);
    }
    return value;
  }

  function renderNodes(nodes, ctx, state) {
    let out = "";
    for (const n of nodes) {
      if (n.kind === "text") out += n.text;
      else if (n.kind === "output") out += scalarString(evalPipeline(n.expr, ctx, state), n.expr);
      else if (n.kind === "if") out += renderNodes(truthy(evalPipeline(n.cond, ctx, state)) ? n.then : n.else, ctx, state);
      // define nodes were collected before rendering and print nothing
    }
    return out;
  }

  function collectDefines(nodes, defines) {
    for (const n of nodes) {
      if (n.kind === "define") defines.set(n.name, n.body);
      if (n.kind === "if") {
        collectDefines(n.then, defines);
        collectDefines(n.else, defines);
      }
    }
  }

  // Helm's coalescing of a values file over the chart's values: maps merge, the rest replaces.
  function mergeValues(base, over) {
    if (over === null || typeof over !== "object" || Array.isArray(over)) return over;
    const out = base && typeof base === "object" && !Array.isArray(base) ? { ...base } : {};
    for (const [k, v] of Object.entries(over)) out[k] = mergeValues(out[k], v);
    return out;
  }

  // Renders the chart in `chartDir` with `valuesFile` (or none) over values.yaml. Returns
  // [{template, objects}] in template-file order, as `helm template` prints them.
  return function renderChart(chartDir, valuesFile, releaseName = "pagoda") {
    const chart = YAML.parse(fs.readFileSync(path.join(chartDir, "Chart.yaml"), "utf8"));
    let values = YAML.parse(fs.readFileSync(path.join(chartDir, "values.yaml"), "utf8"));
    if (valuesFile) values = mergeValues(values, YAML.parse(fs.readFileSync(valuesFile, "utf8")) ?? {});
    const ctx = {
      Values: values,
      Release: { Name: releaseName, Namespace: "default", Service: "Helm" },
      Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion },
    };
    const dir = path.join(chartDir, "templates");
    const files = fs.readdirSync(dir).sort();
    const parsed = files.map((f) => [f, parse(lex(fs.readFileSync(path.join(dir, f), "utf8"), f), f)]);
    const state = { defines: new Map() };
    for (const [, nodes] of parsed) collectDefines(nodes, state.defines);
    const rendered = [];
    for (const [file, nodes] of parsed) {
      if (file.startsWith("_")) continue;
      const text = renderNodes(nodes, ctx, state);
      const objects = YAML.parseAllDocuments(text).map((doc) => {
        if (doc.errors.length) throw new Error(`${file}: rendered YAML is invalid: ${doc.errors[0].message}`);
        return doc.toJS();
      });
      rendered.push({ template: file, text, objects: objects.filter((o) => o !== null) });
    }
    return rendered;
  };
}
