// The Kubernetes manifests (deploy/kubernetes, deploy/kubeedge) and every rendering of the Helm
// chart (deploy/helm/pagoda with each ci/*.yaml) checked three ways:
//   - each object against the Kubernetes OpenAPI schema of its kind (the validators npm's
//     kubernetes-models compiles from Kubernetes' OpenAPI document, and the Prometheus
//     Operator's CRD schema for ServiceMonitor), unknown fields refused (strict_fields.mjs);
//   - the chart renders exactly the plain manifests (defaults: deploy/kubernetes/pagoda,
//     ci/kubeedge-values.yaml: deploy/kubeedge), so the two cannot drift apart;
//   - ports, probes, flags and shutdown timing against the real binary: every config key is an
//     option of `pagoda serve --help`, and a server started with the ConfigMap's own config.yaml
//     answers the probes' path on the containerPort and drains within the grace period.
// Run by CTest (tests/deploy/CMakeLists.txt) as `node --test` with PAGODA_BIN and
// PAGODA_NODE_MODULES set.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createRenderer } from "./helm_subset.mjs";
import { createFieldChecker } from "./strict_fields.mjs";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const nodeModules = process.env.PAGODA_NODE_MODULES ?? path.join(repo, "tests/node/node_modules");
const pagodaBin = process.env.PAGODA_BIN;
const importModule = (rel) => import(pathToFileURL(path.join(nodeModules, rel)).href);

const YAML = (await importModule("yaml/dist/index.js")).default;
const renderChart = createRenderer(YAML);
const chartDir = path.join(repo, "deploy/helm/pagoda");

// Each kind the manifests use: "group/version kind" → the compiled validator of its schema and the
// type declaration its field names are checked against (strict_fields.mjs).
const kKinds = {
  "v1 ConfigMap": ["kubernetes-models/_schemas/IoK8sApiCoreV1ConfigMap.js", "kubernetes-models/v1/ConfigMap.d.ts"],
  "v1 Secret": ["kubernetes-models/_schemas/IoK8sApiCoreV1Secret.js", "kubernetes-models/v1/Secret.d.ts"],
  "v1 Service": ["kubernetes-models/_schemas/IoK8sApiCoreV1Service.js", "kubernetes-models/v1/Service.d.ts"],
  "v1 PersistentVolumeClaim": [
    "kubernetes-models/_schemas/IoK8sApiCoreV1PersistentVolumeClaim.js",
    "kubernetes-models/v1/PersistentVolumeClaim.d.ts",
  ],
  "apps/v1 Deployment": ["kubernetes-models/_schemas/IoK8sApiAppsV1Deployment.js", "kubernetes-models/apps/v1/Deployment.d.ts"],
  "monitoring.coreos.com/v1 ServiceMonitor": [
    "@kubernetes-models/prometheus-operator/_schemas/ComGithubPrometheusOperatorPrometheusOperatorPkgApisMonitoringV1ServiceMonitor.js",
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.d.ts",
  ],
};
const unknownFields = createFieldChecker(nodeModules);

// Schema violations and unknown fields, as readable lines.
async function schemaErrors(object) {
  const key = `${object?.apiVersion} ${object?.kind}`;
  if (!kKinds[key]) return [`no schema for '${key}'`];
  const [schema, declaration] = kKinds[key];
  const { validate } = await importModule(schema);
  const errors = validate(object) ? [] : validate.errors.map((e) => `${e.instancePath || "/"} ${e.keyword} ${JSON.stringify(e.params)}`);
  return [...errors, ...unknownFields(object, declaration).map((f) => `${f}: unknown field`)];
}

function readManifests(file) {
  return YAML.parseAllDocuments(fs.readFileSync(file, "utf8"))
    .map((doc) => {
      if (doc.errors.length) throw new Error(`${file}: ${doc.errors[0].message}`);
      return doc.toJS();
    })
    .filter((o) => o !== null);
}

function yamlFilesUnder(dir) {
  return fs
    .readdirSync(dir, { recursive: true })
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .map((f) => path.join(dir, f));
}

const plainFiles = [...yamlFilesUnder(path.join(repo, "deploy/kubernetes")), ...yamlFilesUnder(path.join(repo, "deploy/kubeedge"))];
const chartValueFiles = fs.readdirSync(path.join(chartDir, "ci")).sort().map((f) => path.join(chartDir, "ci", f));
const renderings = chartValueFiles.map((f) => ({
  name: path.basename(f),
  objects: renderChart(chartDir, f).flatMap((r) => r.objects),
}));

test("every plain manifest matches its kind's Kubernetes schema", async () => {
  assert.ok(plainFiles.length >= 8, `found only ${plainFiles.length} manifest files`);
  for (const file of plainFiles) {
    for (const object of readManifests(file)) {
      assert.deepEqual(await schemaErrors(object), [], `${path.relative(repo, file)}: ${object.kind}`);
    }
  }
});

test("every rendering of the chart matches the Kubernetes schemas", async () => {
  assert.ok(renderings.length >= 3);
  for (const { name, objects } of renderings) {
    assert.ok(objects.length >= 3, `${name}: rendered only ${objects.length} objects`);
    for (const object of objects) {
      assert.deepEqual(await schemaErrors(object), [], `${name}: ${object.kind} ${object.metadata?.name}`);
    }
  }
});

test("the validators reject what Kubernetes would", async () => {
  // So that a passing test above means something: break one field of each kind.
  const deployment = readManifests(path.join(repo, "deploy/kubernetes/pagoda/deployment.yaml"))[0];
  const container = deployment.spec.template.spec.containers[0];
  const broken = [
    { ...deployment, spec: { ...deployment.spec, replicas: "1" } },
    { ...deployment, spec: { ...deployment.spec, selector: undefined } },
    structuredClone(deployment),
    structuredClone(deployment),
  ];
  delete broken[1].spec.selector;
  broken[2].spec.template.spec.containers[0] = { ...container, name: undefined };
  delete broken[2].spec.template.spec.containers[0].name;
  broken[3].spec.template.spec.containers[0].readinessProbe.periodSeconds = "5s";
  for (const object of broken) assert.notDeepEqual(await schemaErrors(object), []);
  // Unknown fields, as strict validation finds them: a misspelling deep in the pod, one at the top.
  const misspelt = structuredClone(deployment);
  misspelt.spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem = true;
  misspelt.spec.replica = 2;
  assert.deepEqual(await schemaErrors(misspelt), [
    "spec.replica: unknown field",
    "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem: unknown field",
  ]);
  const monitor = readManifests(path.join(repo, "deploy/kubernetes/servicemonitor.yaml"))[0];
  const badMonitor = structuredClone(monitor);
  badMonitor.spec.endpoints[0].authorization.credentials = "api-key";
  assert.notDeepEqual(await schemaErrors(badMonitor), []);
  const typoMonitor = structuredClone(monitor);
  typoMonitor.spec.endpoints[0].intervall = "15s";
  assert.deepEqual(await schemaErrors(typoMonitor), ["spec.endpoints[0].intervall: unknown field"]);
  assert.notDeepEqual(await schemaErrors({ apiVersion: "v1", kind: "Pod" }), []);
});

// The objects of a directory or a rendering, keyed by kind/name, with config.yaml parsed so that
// key order and quoting do not count.
function byKindAndName(objects) {
  const map = new Map();
  for (const o of objects) {
    const copy = structuredClone(o);
    if (copy.kind === "ConfigMap") copy.data["config.yaml"] = YAML.parse(copy.data["config.yaml"]);
    map.set(`${copy.kind}/${copy.metadata.name}`, copy);
  }
  return map;
}

function objectsIn(dir) {
  return yamlFilesUnder(path.join(repo, dir)).flatMap(readManifests);
}

test("the chart with its defaults renders deploy/kubernetes/pagoda", () => {
  const chart = byKindAndName(renderChart(chartDir, null).flatMap((r) => r.objects));
  const plain = byKindAndName(objectsIn("deploy/kubernetes/pagoda"));
  assert.deepEqual([...chart.keys()].sort(), [...plain.keys()].sort());
  for (const [key, object] of plain) assert.deepEqual(chart.get(key), object, key);
});

test("the chart with ci/kubeedge-values.yaml renders deploy/kubeedge", () => {
  const chart = byKindAndName(renderings.find((r) => r.name === "kubeedge-values.yaml").objects);
  const plain = byKindAndName(objectsIn("deploy/kubeedge"));
  assert.deepEqual([...chart.keys()].sort(), [...plain.keys()].sort());
  for (const [key, object] of plain) assert.deepEqual(chart.get(key), object, key);
});

test("the chart's optional objects match the plain examples", () => {
  const chart = byKindAndName(renderings.find((r) => r.name === "monitoring-values.yaml").objects);
  const monitor = byKindAndName(objectsIn("deploy/kubernetes").filter((o) => o.kind === "ServiceMonitor"));
  const expected = structuredClone(monitor.get("ServiceMonitor/pagoda"));
  expected.spec.endpoints[0].interval = "30s";
  assert.deepEqual(chart.get("ServiceMonitor/pagoda"), expected);
  const secret = chart.get("Secret/pagoda-api-key");
  assert.equal(secret.stringData["api-key"], "test-key-0123456789abcdef");
  assert.equal(chart.get("PersistentVolumeClaim/pagoda-models").spec.storageClassName, "fast-ssd");
});

test("with modelKey.secretName the server reads its key from the mounted Secret", () => {
  const objects = renderings.find((r) => r.name === "encrypted-values.yaml").objects;
  const config = YAML.parse(objects.find((o) => o.kind === "ConfigMap").data["config.yaml"]);
  const pod = objects.find((o) => o.kind === "Deployment").spec.template.spec;
  const volume = pod.volumes.find((v) => v.secret?.secretName === "pagoda-model-key");
  assert.ok(volume, "no volume of the key's Secret");
  const mount = pod.containers[0].volumeMounts.find((m) => m.name === volume.name);
  assert.equal(path.dirname(config["model-key-file"]), mount.mountPath);
  assert.equal(mount.readOnly, true);
  // The file is named after the Secret's key; root owns it, the pod's group reads it.
  assert.equal(path.basename(config["model-key-file"]), "model.key");
  assert.equal(volume.secret.defaultMode, 0o440);
  assert.equal(pod.securityContext.fsGroup, 10001);
  // Without it, no key anywhere.
  const plain = renderChart(chartDir, null).flatMap((r) => r.objects);
  assert.doesNotMatch(JSON.stringify(plain), /model-key/);
});

test("the renderer refuses templates beyond its subset", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda-chart-"));
  fs.mkdirSync(path.join(dir, "templates"));
  fs.writeFileSync(path.join(dir, "Chart.yaml"), "name: c\nversion: 0.1.0\nappVersion: '1'\n");
  fs.writeFileSync(path.join(dir, "values.yaml"), "a: 1\n");
  const attempt = (template) => {
    fs.writeFileSync(path.join(dir, "templates", "t.yaml"), template);
    return () => renderChart(dir, null);
  };
  assert.throws(attempt("x: {{ .Values.b }}\n"), /no such value/);
  assert.throws(attempt("{{ range .Values.a }}x{{ end }}\n"), /beyond/);
  assert.throws(attempt("x: {{ .Values.a | upper }}\n"), /unknown function/);
  fs.writeFileSync(path.join(dir, "templates", "t.yaml"), "x:\n  {{- if .Values.a }}\n  y: {{ .Values.a | quote }}\n  {{- end }}\n");
  assert.deepEqual(renderChart(dir, null)[0].objects, [{ x: { y: "1" } }]);
  fs.rmSync(dir, { recursive: true });
});

// ---- Cross-checks against the binary ----

function serveHelp() {
  return execFileSync(pagodaBin, ["serve", "--help"], { encoding: "utf8" });
}

function longOptions(help) {
  return new Set([...help.matchAll(/^\s+(?:-\w,)?--([a-z0-9-]+)/gm)].map((m) => m[1]));
}

function defaultOf(help, option) {
  const m = new RegExp(`--${option} [A-Z:]+=(\\S+)`).exec(help);
  return m ? m[1] : null;
}

// Every Deployment there is to check: the plain ones and each rendering's, with its ConfigMap.
function deploymentsWithConfig() {
  const sets = [
    { name: "deploy/kubernetes/pagoda", objects: objectsIn("deploy/kubernetes/pagoda") },
    { name: "deploy/kubeedge", objects: objectsIn("deploy/kubeedge") },
    ...renderings,
  ];
  return sets.map(({ name, objects }) => {
    const deployment = objects.find((o) => o.kind === "Deployment");
    const configMap = objects.find((o) => o.kind === "ConfigMap");
    return { name, deployment, config: YAML.parse(configMap.data["config.yaml"]), objects };
  });
}

test("ports, probes, flags and timing agree with `pagoda serve --help`", { skip: !pagodaBin && "PAGODA_BIN not set" }, () => {
  const help = serveHelp();
  const options = longOptions(help);
  assert.ok(options.has("shutdown-timeout") && options.has("config"), "help text not understood");
  for (const { name, deployment, config, objects } of deploymentsWithConfig()) {
    const pod = deployment.spec.template.spec;
    const container = pod.containers[0];
    for (const key of Object.keys(config)) assert.ok(options.has(key), `${name}: config key '${key}' is no serve option`);
    assert.deepEqual(container.args, ["serve", "--config", "/etc/pagoda/config.yaml"], name);
    const mount = container.volumeMounts.find((m) => m.mountPath === "/etc/pagoda");
    assert.equal(pod.volumes.find((v) => v.name === mount.name).configMap.name, objects.find((o) => o.kind === "ConfigMap").metadata.name);

    // The API key reaches the server through the environment variable it reads.
    assert.match(help, /--api-key TEXT \(Env:PAGODA_API_KEY\)/);
    assert.equal(container.env.find((e) => e.name === "PAGODA_API_KEY").valueFrom.secretKeyRef.key, "api-key", name);

    const port = container.ports.find((p) => p.name === "http");
    assert.equal(port.containerPort, config.port, `${name}: containerPort`);
    assert.equal(config.host, "0.0.0.0", `${name}: the server must listen beyond the pod's loopback`);
    for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      assert.deepEqual(container[probe].httpGet, { path: "/health", port: "http" }, `${name}: ${probe}`);
    }
    const annotations = deployment.spec.template.metadata.annotations;
    assert.equal(annotations["prometheus.io/port"], String(config.port), name);
    assert.equal(annotations["prometheus.io/path"], "/metrics", name);
    const service = objects.find((o) => o.kind === "Service");
    assert.deepEqual(service.spec.ports[0], { name: "http", port: config.port, targetPort: "http", protocol: "TCP" });
    assert.deepEqual(service.spec.selector, deployment.spec.selector.matchLabels, name);

    // SIGTERM comes after preStop; the drain takes up to --shutdown-timeout; then the process
    // needs a moment to exit before the kubelet's SIGKILL.
    const shutdown = Number(config["shutdown-timeout"] ?? defaultOf(help, "shutdown-timeout"));
    const preStop = Number(container.lifecycle.preStop.exec.command[1]);
    assert.equal(container.lifecycle.preStop.exec.command[0], "sleep");
    assert.ok(pod.terminationGracePeriodSeconds >= preStop + shutdown + 5, `${name}: grace ${pod.terminationGracePeriodSeconds} < ${preStop} + ${shutdown} + 5`);

    // Guaranteed QoS (the CPU manager's static policy pins only such pods) and huge pages, which
    // Kubernetes requires to have equal requests and limits.
    assert.deepEqual(container.resources.requests, container.resources.limits, name);
    assert.match(String(container.resources.limits.cpu), /^\d+$/, `${name}: whole CPUs`);
    assert.ok(container.resources.limits["hugepages-2Mi"], name);

    // The image's user (deploy/container/Containerfile) is the one the pod runs as.
    const containerfile = fs.readFileSync(path.join(repo, "deploy/container/Containerfile"), "utf8");
    const uid = Number(/useradd [^\n]*--uid (\d+)/.exec(containerfile)[1]);
    assert.equal(pod.securityContext.runAsUser, uid, name);
    assert.match(containerfile, new RegExp(`^EXPOSE ${config.port}$`, "m"));
  }
});

test("KubeEdge variants stay on edge nodes and run offline", () => {
  for (const { name, deployment } of deploymentsWithConfig().filter((d) => /kubeedge/.test(d.name))) {
    const pod = deployment.spec.template.spec;
    const terms = pod.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms;
    assert.deepEqual(terms, [{ matchExpressions: [{ key: "node-role.kubernetes.io/edge", operator: "Exists" }] }], name);
    const tolerated = new Set(pod.tolerations.map((t) => `${t.key}:${t.effect}`));
    for (const t of ["node-role.kubernetes.io/edge:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"]) assert.ok(tolerated.has(t), `${name}: ${t}`);
    for (const t of pod.tolerations) assert.equal(t.tolerationSeconds, undefined, `${name}: ${t.key} evicts after a while`);
    const container = pod.containers[0];
    assert.equal(container.imagePullPolicy, "IfNotPresent", name);
    assert.doesNotMatch(container.image, /:latest$|^[^:]+$/, `${name}: a moving tag is pulled again`);
    assert.ok(pod.volumes.find((v) => v.name === "models").hostPath, name);
  }
});

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("a server started with the ConfigMap's config.yaml answers the probes and drains in time", { skip: !pagodaBin && "PAGODA_BIN not set", timeout: 60_000 }, async () => {
  const { deployment, config } = deploymentsWithConfig()[0];
  const container = deployment.spec.template.spec.containers[0];
  // The shipped file, with only what cannot be the same here changed: the demo model, a port of
  // our own on the loopback, a small KV cache, no pinning on a shared machine.
  const port = await freePort();
  const local = { ...config, model: "demo", host: "127.0.0.1", port, "kv-cache-space": "64MiB", "cpu-bind": "none", threads: 1 };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda-configmap-"));
  const file = path.join(dir, "config.yaml");
  fs.writeFileSync(file, YAML.stringify(local));
  const key = "deploy-test-key";
  const args = container.args.map((a) => (a === "/etc/pagoda/config.yaml" ? file : a));
  const child = spawn(pagodaBin, args, { env: { ...process.env, PAGODA_API_KEY: key }, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  try {
    const probe = container.readinessProbe.httpGet;
    const url = (p) => `http://127.0.0.1:${port}${p}`;
    let status = 0;
    for (let i = 0; i < 200 && status !== 200; i++) {
      status = await fetch(url(probe.path)).then((r) => r.status, () => 0);
      if (status !== 200) await sleep(100);
    }
    assert.equal(status, 200, `no 200 on ${probe.path}: ${stderr}`);
    // What the ServiceMonitor and the scrape annotations do: /metrics with the key, 401 without.
    assert.equal((await fetch(url("/metrics"))).status, 401);
    const metrics = await fetch(url("/metrics"), { headers: { Authorization: `Bearer ${key}` } });
    assert.equal(metrics.status, 200);
    assert.match(await metrics.text(), /^vllm:num_requests_running/m);

    const start = Date.now();
    child.kill("SIGTERM");
    const { code } = await exited;
    const seconds = (Date.now() - start) / 1000;
    assert.equal(code, 0, stderr);
    assert.ok(seconds < Number(config["shutdown-timeout"]), `took ${seconds} s to stop`);
  } finally {
    child.kill("SIGKILL");
    fs.rmSync(dir, { recursive: true });
  }
});

test("a server started with the encrypted rendering's config.yaml loads encrypted weights", { skip: !pagodaBin && "PAGODA_BIN not set", timeout: 60_000 }, async () => {
  const objects = renderings.find((r) => r.name === "encrypted-values.yaml").objects;
  const config = YAML.parse(objects.find((o) => o.kind === "ConfigMap").data["config.yaml"]);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pagoda-encrypted-"));
  const run = (args) => execFileSync(pagodaBin, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  let child;
  try {
    run(["make-model", "--preset", "tiny", "--out", path.join(dir, "plain")]);
    run(["encrypt", "--model", path.join(dir, "plain"), "--out", path.join(dir, "model"), "--new-key-file", path.join(dir, "model.key")]);
    const port = await freePort();
    const local = { ...config, model: path.join(dir, "model"), "model-key-file": path.join(dir, "model.key"), host: "127.0.0.1", port, "kv-cache-space": "64MiB", "cpu-bind": "none", threads: 1 };
    fs.writeFileSync(path.join(dir, "config.yaml"), YAML.stringify(local));
    let stderr = "";
    child = spawn(pagodaBin, ["serve", "--config", path.join(dir, "config.yaml")], { env: { ...process.env, PAGODA_API_KEY: "k" }, stdio: ["ignore", "ignore", "pipe"] });
    child.stderr.on("data", (d) => (stderr += d));
    let status = 0;
    for (let i = 0; i < 200 && status !== 200; i++) {
      status = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status, () => 0);
      if (status !== 200) await sleep(100);
    }
    assert.equal(status, 200, stderr);
  } finally {
    child?.kill("SIGKILL");
    fs.rmSync(dir, { recursive: true });
  }
});
