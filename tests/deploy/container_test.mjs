// What can be checked of deploy/container/Containerfile without a container engine (none runs on
// the development and CI machines):
//   - the runtime stage installs the Debian package of every shared library the built `pagoda`
//     links (readelf NEEDED, resolved by ldd, owned per dpkg -S), and those packages exist in
//     Debian 12 under those names (they are installed here, on Debian 12);
//   - the runtime stage has no compiler and no Python; it runs as a non-root user, stops with
//     SIGTERM and checks /health on the port it exposes, the port `pagoda serve` is told to use;
//   - nothing ties the recipe to one architecture.
// Run by CTest with PAGODA_BIN set. deploy/container/check_runtime_root.sh goes further (root,
// minutes): the runtime stage rebuilt in a debootstrap'ed Debian 12 root, pagoda served from it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const pagodaBin = process.env.PAGODA_BIN;
const recipe = fs.readFileSync(path.join(repo, "deploy/container/Containerfile"), "utf8");
// The instructions with their continuation lines joined and comments dropped.
const instructions = recipe
  .replace(/\\\n/g, " ")
  .split("\n")
  .filter((l) => l.trim() && !l.trimStart().startsWith("#"));

function stages() {
  const out = [];
  for (const line of instructions) {
    const from = /^FROM\s+\S+\s+AS\s+(\S+)/i.exec(line);
    if (from) out.push({ name: from[1], lines: [] });
    else if (out.length) out[out.length - 1].lines.push(line);
  }
  return out;
}

const runtime = stages().at(-1);

function runtimePackages() {
  const packages = new Set();
  for (const line of runtime.lines) {
    const m = /apt-get install ([^&]*)/.exec(line);
    if (!m) continue;
    for (const word of m[1].trim().split(/\s+/)) if (!word.startsWith("-")) packages.add(word);
  }
  return packages;
}

const sh = (cmd, args) => execFileSync(cmd, args, { encoding: "utf8" });

test("two stages, the last one the runtime", () => {
  assert.deepEqual(stages().map((s) => s.name), ["build", "runtime"]);
  assert.match(recipe, /^ARG DEBIAN_IMAGE=docker\.io\/library\/debian:12-slim$/m);
  assert.ok(runtime.lines.some((l) => /^COPY --from=build \/out\/ \/$/.test(l)));
});

test("the runtime packages cover every library pagoda links", { skip: !pagodaBin && "PAGODA_BIN not set" }, () => {
  const packages = runtimePackages();
  const ldd = sh("ldd", [pagodaBin]);
  assert.doesNotMatch(ldd, /not found/);
  const where = new Map([...ldd.matchAll(/^\s*(\S+) => (\/\S+)/gm)].map((m) => [m[1], m[2]]));
  const needed = [...sh("readelf", ["-d", pagodaBin]).matchAll(/\(NEEDED\)\s+Shared library: \[(.+)\]/g)].map((m) => m[1])
    // The dynamic loader (libc6's, in every image) has no "=>" line in ldd's output.
    .filter((lib) => !lib.startsWith("ld-linux"));
  assert.ok(needed.length >= 10, "readelf output not understood");
  // One dpkg call for all (each call reads the whole database). dpkg -S knows a library by the
  // path its package installed, which usrmerge may have moved from /lib to /usr/lib.
  const files = needed.map((lib) => fs.realpathSync(where.get(lib)));
  const candidates = files.flatMap((f) => [f, f.replace(/^\/usr\/lib\//, "/lib/")]);
  const owners = new Map();
  const search = spawnSync("dpkg", ["-S", ...new Set(candidates)], { encoding: "utf8" });
  for (const m of search.stdout.matchAll(/^([^:\s]+)(?::\w+)?: (\S+)$/gm)) owners.set(m[2], m[1]);
  needed.forEach((lib, i) => {
    const pkg = owners.get(files[i]) ?? owners.get(files[i].replace(/^\/usr\/lib\//, "/lib/"));
    assert.ok(pkg, `no Debian package owns ${files[i]}`);
    if (pkg === "libc6") return; // in every Debian image
    assert.ok(packages.has(pkg), `${lib} comes from ${pkg}, which the runtime stage does not install`);
  });
  const status = spawnSync("dpkg-query", ["-W", "-f=${Package} ${Status}\n", ...packages], { encoding: "utf8" }).stdout;
  for (const pkg of packages) {
    assert.match(status, new RegExp(`^${pkg.replace(/\+/g, "\\+")} install ok installed$`, "m"), `${pkg} is not a Debian 12 package installed here`);
  }
});

test("the runtime has no compiler or Python, and runs as a non-root user", () => {
  for (const pkg of runtimePackages()) {
    assert.doesNotMatch(pkg, /^(gcc|g\+\+|clang|cpp|build-essential|cmake|ninja-build|make|python3?)(-|$)|-dev$/, pkg);
  }
  const user = runtime.lines.filter((l) => /^USER /.test(l)).at(-1);
  assert.ok(user, "no USER");
  assert.doesNotMatch(user, /^USER\s+(0|root)(:|$)/);
  const uid = /useradd [^\n]*--uid (\d+)/.exec(recipe)[1];
  assert.match(user, new RegExp(`^USER ${uid}(:\\d+)?$`));
});

test("stop signal, health check and port agree with `pagoda serve`", { skip: !pagodaBin && "PAGODA_BIN not set" }, () => {
  const help = sh(pagodaBin, ["serve", "--help"]);
  assert.ok(runtime.lines.includes("STOPSIGNAL SIGTERM"));
  assert.match(help, /--shutdown-timeout FLOAT=\d+\s+Seconds running requests may take to finish after SIGTERM/);
  const port = Number(/^EXPOSE (\d+)$/m.exec(recipe)[1]);
  const health = runtime.lines.find((l) => l.startsWith("HEALTHCHECK"));
  assert.ok(health, "no HEALTHCHECK");
  assert.match(health, new RegExp(`http://127\\.0\\.0\\.1:${port}/health"`));
  assert.ok(runtimePackages().has("curl"), "the health check runs curl");
  const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(recipe)[1]);
  const entry = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(recipe)[1]);
  assert.deepEqual(entry, ["/usr/local/bin/pagoda"]);
  assert.equal(cmd[0], "serve");
  const flag = (name) => cmd[cmd.indexOf(name) + 1];
  assert.equal(Number(flag("--port")), port);
  assert.equal(flag("--host"), "0.0.0.0");
  for (const option of cmd.filter((w) => w.startsWith("--"))) assert.match(help, new RegExp(`\\s${option}\\s`), option);
  assert.ok(runtime.lines.some((l) => l.startsWith("COPY --from=build")) && /install -D [^\n]*\/out\/usr\/local\/bin\/pagoda/.test(recipe));
});

test("nothing ties the recipe to one architecture", () => {
  for (const line of instructions) {
    assert.doesNotMatch(line, /amd64|x86_64|arm64|aarch64|-march=|--platform/, line);
  }
});
