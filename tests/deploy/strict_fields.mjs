// Unknown fields in Kubernetes objects — what `kubectl apply --validate=strict` and kubeconform's
// -strict reject, and the OpenAPI schemas alone accept (they do not forbid extra properties). A
// misspelt field (`readOnlyRootFileSystem`) is silently dropped by the API server, so the tests
// want it caught. The field names come from the type declarations npm's kubernetes-models
// generates from the same OpenAPI document as its validators: each object's interface lists its
// properties, and a property whose type is another declared interface (or an array of one) is
// followed into it. Maps and inline object types are not descended into.
import fs from "node:fs";
import path from "node:path";

export function createFieldChecker(nodeModules) {
  const cache = new Map();

  function resolveImport(fromFile, spec) {
    const base = spec.startsWith(".") ? path.resolve(path.dirname(fromFile), spec) : path.join(nodeModules, spec);
    return base.replace(/\.js$/, "") + ".d.ts";
  }

  // The first interface of a declaration file: its properties (name → type text) and the
  // interfaces it extends, with the files that declare the types it names.
  function parse(file) {
    if (cache.has(file)) return cache.get(file);
    const text = fs.readFileSync(file, "utf8");
    const imports = new Map();
    for (const m of text.matchAll(/^import \{ ([^}]+) \} from "([^"]+)";$/gm)) {
      for (const name of m[1].split(",").map((s) => s.trim())) imports.set(name, resolveImport(file, m[2]));
    }
    const head = /^export interface \w+(?: extends ([\w, ]+))? \{$/m.exec(text);
    if (!head) throw new Error(`${file}: no interface`);
    const body = text.slice(head.index + head[0].length, text.indexOf("\n}", head.index));
    const props = new Map();
    for (const m of body.matchAll(/^ {4}"([^"]+)"\??: (.*)$/gm)) props.set(m[1], m[2].endsWith(";") ? m[2].slice(0, -1) : null);
    const parsed = { file, imports, props, bases: (head[1] ?? "").split(",").map((s) => s.trim()).filter(Boolean) };
    cache.set(file, parsed);
    return parsed;
  }

  // All properties of an interface, its bases' included; TypeMeta brings apiVersion and kind.
  function properties(file) {
    const t = parse(file);
    const all = new Map(t.props);
    for (const base of t.bases) {
      if (base === "TypeMeta") {
        all.set("apiVersion", "string");
        all.set("kind", "string");
      } else if (t.imports.has(base)) {
        for (const [k, v] of properties(t.imports.get(base)).all) all.set(k, v);
      }
    }
    return { all, imports: t.imports };
  }

  function walk(value, file, where, unknown) {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return;
    const { all, imports } = properties(file);
    for (const [key, child] of Object.entries(value)) {
      if (!all.has(key)) {
        unknown.push(`${where}.${key}`);
        continue;
      }
      const type = all.get(key);
      const array = type && /^Array<(\w+)>$/.exec(type);
      if (array && imports.has(array[1]) && Array.isArray(child)) {
        child.forEach((item, i) => walk(item, imports.get(array[1]), `${where}.${key}[${i}]`, unknown));
      } else if (type && imports.has(type)) {
        walk(child, imports.get(type), `${where}.${key}`, unknown);
      }
    }
  }

  // The paths of the fields of `object` that its kind's declaration (a .d.ts path under
  // node_modules) does not have, e.g. ["spec.template.spec.containers[0].readOnlyRootFileSystem"].
  return function unknownFields(object, declaration) {
    const unknown = [];
    walk(object, path.join(nodeModules, declaration), "", unknown);
    return unknown.map((p) => p.slice(1)).sort();
  };
}
