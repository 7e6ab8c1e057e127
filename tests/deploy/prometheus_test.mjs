// deploy/prometheus and deploy/grafana checked with promtool (Debian's prometheus package) and a
// live server:
//   - `promtool check config` passes on the shipped prometheus.yml whether or not an API key file
//     exists, and on prometheus-api-key.yml once its key file is in place (without it, it fails
//     naming the file, as Prometheus itself would);
//   - the alerting rules pass `promtool check rules` and their unit tests (`promtool test rules`);
//   - every metric that an alert or a dashboard panel queries is one a running `pagoda serve`
//     exports, with the labels the query selects on, and every panel's query parses as PromQL.
// promtool checks skip when it is missing (scripts/install_deps.sh --tests installs it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const havePromtool = spawnSync("promtool", ["--version"]).status === 0;

function checkConfig(file) {
  const r = spawnSync("promtool", ["check", "config", file], { encoding: "utf8" });
  return { ok: r.status === 0, output: r.stdout + r.stderr };
}

// A copy of a shipped config in a directory of its own, with or without a key file beside it.
function placed(name, withKey) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda-prometheus-"));
  const file = path.join(dir, "prometheus.yml");
  fs.copyFileSync(path.join(repo, "deploy/prometheus", name), file);
  fs.copyFileSync(path.join(repo, "deploy/prometheus/pagoda-alerts.yml"), path.join(dir, "pagoda-alerts.yml"));
  if (withKey) fs.writeFileSync(path.join(dir, "pagoda_api_key"), "0123456789abcdef\n", { mode: 0o600 });
  return { dir, file };
}

test("promtool accepts prometheus.yml as shipped, with and without a key file", { skip: !havePromtool && "promtool not installed" }, () => {
  assert.ok(checkConfig(path.join(repo, "deploy/prometheus/prometheus.yml")).ok);
  for (const withKey of [false, true]) {
    const { dir, file } = placed("prometheus.yml", withKey);
    const r = checkConfig(file);
    fs.rmSync(dir, { recursive: true });
    assert.ok(r.ok, r.output);
  }
});

test("prometheus-api-key.yml passes with its key file and names the file without it", { skip: !havePromtool && "promtool not installed" }, () => {
  const withKey = placed("prometheus-api-key.yml", true);
  const good = checkConfig(withKey.file);
  fs.rmSync(withKey.dir, { recursive: true });
  assert.ok(good.ok, good.output);

  const without = placed("prometheus-api-key.yml", false);
  const bad = checkConfig(without.file);
  fs.rmSync(without.dir, { recursive: true });
  assert.ok(!bad.ok);
  assert.match(bad.output, /pagoda_api_key/);
});

test("the alerting rules pass promtool check rules and their unit tests", { skip: !havePromtool && "promtool not installed" }, () => {
  const dir = path.join(repo, "deploy/prometheus");
  const check = spawnSync("promtool", ["check", "rules", "pagoda-alerts.yml"], { cwd: dir, encoding: "utf8" });
  assert.equal(check.status, 0, check.stdout + check.stderr);
  assert.match(check.stdout, /4 rules found/);
  const unit = spawnSync("promtool", ["test", "rules", "pagoda-alerts.test.yml"], { cwd: dir, encoding: "utf8" });
  assert.equal(unit.status, 0, unit.stdout + unit.stderr);
});

// ---- Queries against what a live server exports ----

function alertExpressions() {
  const text = fs.readFileSync(path.join(repo, "deploy/prometheus/pagoda-alerts.yml"), "utf8");
  // The rules file is plain enough to read its expressions without a YAML parser: `expr:` either
  // on one line or folded (`>`) over the more-indented lines below it.
  const out = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)expr:\s*(.*)$/.exec(lines[i]);
    if (!m) continue;
    if (m[2] !== ">") {
      out.push(m[2]);
      continue;
    }
    const parts = [];
    while (i + 1 < lines.length && /^\s*$/.test(lines[i + 1]) === false && lines[i + 1].search(/\S/) > m[1].length) parts.push(lines[++i].trim());
    out.push(parts.join(" "));
  }
  return out;
}

function dashboardExpressions() {
  const dashboard = JSON.parse(fs.readFileSync(path.join(repo, "deploy/grafana/pagoda-dashboard.json"), "utf8"));
  const out = [];
  const walk = (o) => {
    if (Array.isArray(o)) o.forEach(walk);
    else if (o && typeof o === "object") for (const [k, v] of Object.entries(o)) k === "expr" ? out.push(v) : walk(v);
  };
  walk(dashboard);
  return out;
}

// Each `metric{label=..., ...}` selector of an expression: the metric and the labels it names.
function selectors(expr) {
  return [...expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}/g)].map((m) => ({
    metric: m[1],
    labels: [...m[2].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)/g)].map((l) => l[1]),
  }));
}

// Series names and their label names, from a text exposition.
function exported(text) {
  const series = new Map();
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s/.exec(line);
    if (!m) continue;
    const labels = series.get(m[1]) ?? new Set();
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) labels.add(l[1]);
    series.set(m[1], labels);
  }
  return series;
}

async function scrapeLiveServer() {
  const port = await new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
  const child = spawn(process.env.PAGODA_BIN, ["serve", "--model", "demo", "--host", "127.0.0.1", "--port", String(port), "--kv-cache-space", "64MiB", "--threads", "1"], { stdio: "ignore" });
  try {
    const url = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 200; i++) {
      if ((await fetch(`${url}/health`).then((r) => r.status, () => 0)) === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // One request, so that every histogram has observations.
    const done = await fetch(`${url}/v1/completions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: "demo", prompt: "hello", max_tokens: 4 }),
    });
    assert.equal(done.status, 200);
    return await (await fetch(`${url}/metrics`)).text();
  } finally {
    child.kill("SIGTERM");
  }
}

// Labels Prometheus adds to every scraped series (target labels), which the server cannot export.
const kTargetLabels = new Set(["job", "instance"]);
// Series Prometheus makes itself.
const kSynthetic = new Set(["up"]);

test("every metric an alert or a panel queries is exported, with the labels it selects on", { skip: !process.env.PAGODA_BIN && "PAGODA_BIN not set", timeout: 60_000 }, async () => {
  const series = exported(await scrapeLiveServer());
  assert.ok(series.has("vllm:num_requests_running"), "scrape not understood");
  const queries = [...alertExpressions().map((e) => ["alert", e]), ...dashboardExpressions().map((e) => ["panel", e])];
  assert.ok(queries.length >= 30, `found ${queries.length} queries`);
  for (const [where, expr] of queries) {
    const found = selectors(expr);
    assert.ok(found.length > 0, `${where}: no metric in '${expr}'`);
    for (const { metric, labels } of found) {
      if (kSynthetic.has(metric)) continue;
      assert.ok(series.has(metric), `${where}: '${metric}' is not exported (in '${expr}')`);
      for (const label of labels) {
        if (kTargetLabels.has(label)) continue;
        assert.ok(series.get(metric).has(label), `${where}: '${metric}' has no label '${label}' (in '${expr}')`);
      }
    }
  }
});

test("every dashboard query parses as PromQL", { skip: !havePromtool && "promtool not installed" }, () => {
  // promtool parses expressions in rule files: the panels' queries as recording rules, with
  // Grafana's variables given values.
  const rules = dashboardExpressions().map((expr, i) => ({
    record: `pagoda:panel_${i}`,
    expr: expr.replaceAll("$__rate_interval", "5m").replace(/\$[a-z_]+/g, ".*"),
  }));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda-dashboard-"));
  const file = path.join(dir, "panels.yml");
  fs.writeFileSync(file, JSON.stringify({ groups: [{ name: "panels", rules }] }));
  const r = spawnSync("promtool", ["check", "rules", file], { encoding: "utf8" });
  fs.rmSync(dir, { recursive: true });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, new RegExp(`${rules.length} rules found`));
});
