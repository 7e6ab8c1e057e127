// deploy/prometheus: `promtool check config` (Debian's prometheus package) passes on the shipped
// prometheus.yml whether or not an API key file exists, and on prometheus-api-key.yml once its
// key file is in place; without the key file the latter fails naming that file, as Prometheus
// itself would. Skips when promtool is missing (scripts/install_deps.sh --tests installs it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
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
