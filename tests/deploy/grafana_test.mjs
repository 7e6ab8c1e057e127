// deploy/grafana/pagoda-dashboard.json against Grafana's dashboard schema: the TypeScript types
// Grafana generates from it (npm @grafana/schema, the `Dashboard` of raw/dashboard/x), checked by
// the TypeScript compiler with the dashboard as an object literal, so that a wrong type or an
// unknown field anywhere the schema types it (panels, grid positions, field configs, targets,
// templating) fails. `__inputs` is left out: Grafana's import dialog consumes it. The queries
// themselves are checked against a live server in prometheus_test.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const nodeModules = process.env.PAGODA_NODE_MODULES ?? path.join(repo, "tests/node/node_modules");
const tsc = path.join(nodeModules, "typescript/bin/tsc");
const types = path.join(nodeModules, "@grafana/schema/dist/types/raw/dashboard/x/types.gen");

// Type-checks each dashboard in one compiler run (its start-up is most of the time); returns the
// compiler's error lines per dashboard.
function typeErrors(dashboards) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda-grafana-"));
  const files = dashboards.map((dashboard, i) => {
    const file = path.join(dir, `dashboard${i}.ts`);
    const { __inputs, ...importable } = dashboard;
    fs.writeFileSync(
      file,
      `import type { Dashboard } from ${JSON.stringify(types)};\n` +
        `const dashboard: Dashboard = ${JSON.stringify(importable, null, 1)};\nexport default dashboard;\n`,
    );
    return file;
  });
  const r = spawnSync(process.execPath, [tsc, "--noEmit", "--strict", "--skipLibCheck", "--target", "es2020", "--moduleResolution", "node", ...files], { encoding: "utf8" });
  fs.rmSync(dir, { recursive: true });
  const lines = (r.stdout + r.stderr).split("\n").filter(Boolean);
  return files.map((f) => lines.filter((l) => l.includes(path.basename(f))).join("\n"));
}

const dashboard = JSON.parse(fs.readFileSync(path.join(repo, "deploy/grafana/pagoda-dashboard.json"), "utf8"));

test("the dashboard type-checks as Grafana's Dashboard, and a broken one does not", () => {
  const broken = structuredClone(dashboard);
  broken.panels[0].gridPos.hh = 1;
  const [errors, brokenErrors] = typeErrors([dashboard, broken]);
  assert.equal(errors, "");
  assert.match(brokenErrors, /'"?hh"?' does not exist in type 'GridPos'/);
});

test("the dashboard is one Grafana imports: a uid, a schema version, a Prometheus input", () => {
  assert.match(dashboard.uid, /^[a-zA-Z0-9_-]{1,40}$/);
  assert.ok(Number.isInteger(dashboard.schemaVersion) && dashboard.schemaVersion >= 36, `schemaVersion ${dashboard.schemaVersion}`);
  assert.ok(dashboard.__inputs.some((i) => i.type === "datasource" && i.pluginId === "prometheus"));
  const ids = dashboard.panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, "panel ids repeat");
});
