// nsbox/agents without nsbox serve: the manifest's host sources (local_file, local_dir,
// git_repo) and bucket mounts as the create request carries them — the sources' bytes and
// modes, the mounts with their credentials — what is refused (symlinks, paths outside the
// base, special files, the bounds, mount fields nsbox cannot serve), and the session's
// state without a credential. Where the request itself is looked at, a small HTTP server
// answers for nsbox serve.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";

import {
  Manifest,
  SandboxGitCloneError,
  SandboxGitSubpathError,
  SandboxLocalDirReadError,
  SandboxLocalFileReadError,
  SandboxMountConfigError,
  SandboxUnsupportedFeatureError,
  azureBlobMount,
  boxMount,
  dir,
  dockerVolumeMountStrategy,
  gcsMount,
  gitRepo,
  inContainerMountStrategy,
  localBindMountStrategy,
  localDir,
  localFile,
  mount,
  r2Mount,
  s3FilesMount,
  s3Mount,
} from "@openai/agents/sandbox";
import { NsboxSandboxClient } from "nsbox/agents";
import { INLINE_BYTES, LocalSources } from "../dist/esm/agents/local-sources.js";
import { serverManifest } from "../dist/esm/agents/manifest.js";
import { mountRequests, strategyOf, withoutMountCredentials } from "../dist/esm/agents/mounts.js";

const SECRET = "sEcReT-unit-8c1d";
const KEY_ID = "AKIA-UNIT-3f9e";

let base; // a fresh directory of sources per file run, removed after

/** Files under `base`: {"a/b.txt": "text" | Buffer | [content, mode]}. */
function files(spec) {
  for (const [rel, value] of Object.entries(spec)) {
    const [content, mode] = Array.isArray(value) ? value : [value, 0o644];
    const p = path.join(base, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, content);
    fs.chmodSync(p, mode);
  }
}

function git(cwd, ...args) {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], { cwd, encoding: "utf8" }).trim();
}

const b64 = (text) => Buffer.from(text).toString("base64");
const nsboxManifest = (init) => new Manifest(init);
const read = (manifest, options = {}) => LocalSources.read(manifest, { baseDir: base, ...options });
const clones = () => fs.readdirSync(os.tmpdir()).filter((n) => n.startsWith("nsbox-git-")).sort();

before(() => {
  base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-sources-unit-")));
});

after(() => {
  fs.rmSync(base, { recursive: true, force: true });
});

test("local_file, local_dir and git_repo become file and dir entries with their bytes and modes, without .git", async () => {
  files({
    "project/README.md": "# readme\n",
    "project/bin/run.sh": ["#!/bin/sh\necho run\n", 0o755],
    "project/data.bin": Buffer.from([0, 255, 1]),
    "notes.txt": ["kept private\n", 0o640],
    "repo/hello.txt": "one\n",
    "repo/sub/inner.txt": "inner one\n",
  });
  git(path.join(base, "repo"), "init", "-q", "-b", "main");
  git(path.join(base, "repo"), "add", ".");
  git(path.join(base, "repo"), "commit", "-qm", "one");
  const first = git(path.join(base, "repo"), "rev-parse", "HEAD");
  fs.writeFileSync(path.join(base, "repo/hello.txt"), "two\n");
  fs.writeFileSync(path.join(base, "repo/sub/inner.txt"), "inner two\n");
  git(path.join(base, "repo"), "commit", "-qam", "two");
  const before = clones();

  const manifest = nsboxManifest({
    root: "/home/user/proj",
    entries: {
      project: localDir({ src: "project", ephemeral: true, description: "the app" }),
      "docs/notes.txt": localFile({ src: path.join(base, "notes.txt") }),
      "tight.txt": localFile({ src: "notes.txt", permissions: 0o600 }),
      code: gitRepo({ repo: "./repo", ref: "main" }),
      old: gitRepo({ repo: `file://${base}/repo`, ref: first.slice(0, 12), subpath: "sub" }),
      nested: dir({ children: { bin: localDir({ src: "project/bin" }) } }),
    },
  });
  const sources = await read(manifest);
  try {
    assert.deepEqual(sources.deferred, [], "a few bytes ride in the create request");
    const doc = serverManifest(manifest, sources);
    const runSh = { type: "file", content_b64: b64("#!/bin/sh\necho run\n"), permissions: 0o755 };
    assert.deepEqual(doc.entries["project"], {
      type: "dir", description: "the app", ephemeral: true,
      children: {
        "README.md": { type: "file", content_b64: b64("# readme\n"), permissions: 0o644 },
        bin: { type: "dir", children: { "run.sh": runSh } },
        "data.bin": { type: "file", content_b64: Buffer.from([0, 255, 1]).toString("base64"), permissions: 0o644 },
      },
    });
    assert.deepEqual(doc.entries["docs/notes.txt"], { type: "file", content_b64: b64("kept private\n"), permissions: 0o640 });
    assert.deepEqual(doc.entries["tight.txt"], { type: "file", content_b64: b64("kept private\n"), permissions: 0o600 },
      "the entry's permissions win over the host file's");
    assert.deepEqual(doc.entries["code"], {
      type: "dir",
      children: {
        "hello.txt": { type: "file", content_b64: b64("two\n"), permissions: 0o644 },
        sub: { type: "dir", children: { "inner.txt": { type: "file", content_b64: b64("inner two\n"), permissions: 0o644 } } },
      },
    }, "the branch's tree, without .git");
    assert.deepEqual(doc.entries["old"], {
      type: "dir", children: { "inner.txt": { type: "file", content_b64: b64("inner one\n"), permissions: 0o644 } },
    }, "an abbreviated commit's subpath");
    assert.deepEqual(doc.entries["nested"], { type: "dir", children: { bin: { type: "dir", children: { "run.sh": runSh } } } });
  } finally {
    await sources.close();
  }
  assert.deepEqual(clones(), before, "the clones are removed");
});

test("past 8 MiB the request carries empty files, and their bytes follow through the fs API, streamed from the sources", async () => {
  files({ "big/small.txt": "small\n", "big/large.bin": ["", 0o600] });
  const large = path.join(base, "big/large.bin");
  fs.truncateSync(large, INLINE_BYTES); // sparse: cheap to make, and 8 MiB to send
  const fd = fs.openSync(large, "r+");
  fs.writeSync(fd, Buffer.from("the end"), 0, 7, INLINE_BYTES - 7);
  fs.closeSync(fd);

  const manifest = nsboxManifest({ entries: { big: localDir({ src: "big", ephemeral: true }) } });
  const sources = await read(manifest);
  try {
    assert.deepEqual(serverManifest(manifest, sources).entries.big, {
      type: "dir", ephemeral: true,
      children: {
        "large.bin": { type: "file", content: "", permissions: 0o600 },
        "small.txt": { type: "file", content: "", permissions: 0o644 },
      },
    });
    const written = new Map();
    const sandbox = {
      fs: {
        async write(dest, stream, options) {
          const chunks = [];
          for await (const chunk of stream) chunks.push(chunk);
          written.set(dest, { bytes: Buffer.concat(chunks), mode: options.mode });
        },
      },
    };
    await sources.writeInto(sandbox);
    assert.deepEqual([...written.keys()].sort(), ["/workspace/big/large.bin", "/workspace/big/small.txt"]);
    assert.ok(written.get("/workspace/big/large.bin").bytes.equals(fs.readFileSync(large)));
    assert.equal(written.get("/workspace/big/large.bin").mode, 0o600);
    assert.equal(written.get("/workspace/big/small.txt").bytes.toString(), "small\n");

    fs.appendFileSync(path.join(base, "big/small.txt"), "grown\n");
    await assert.rejects(sources.writeInto(sandbox), (e) => e instanceof SandboxLocalDirReadError && /small\.txt changed/.test(e.message),
      "a file that changed since it was counted is refused");
  } finally {
    await sources.close();
  }
});

test("the bounds on members and bytes are refused naming the limit and the value", async () => {
  files({ "many/1": "12345678", "many/2": "12345678", "many/3": "12345678" });
  const manifest = nsboxManifest({ entries: { many: localDir({ src: "many" }) } });
  await assert.rejects(read(manifest, { maxMembers: 3 }),
    (e) => e instanceof SandboxLocalDirReadError && /more than 3 files and directories \(localSources\.maxMembers\)/.test(e.message));
  await assert.rejects(read(manifest, { maxBytes: 20 }),
    (e) => e instanceof SandboxLocalDirReadError && /more than 20 bytes \(localSources\.maxBytes\): 24 with .*many\/3/.test(e.message));
  const sources = await read(manifest, { maxMembers: 4, maxBytes: 24 });
  await sources.close();
});

test("symlinks, special files, and sources outside the base are refused; a path grant admits another directory", async () => {
  files({ "links/ok.txt": "ok\n", "real/x.txt": "x\n", "fifo/ok.txt": "ok\n", "elsewhere/y.txt": "y\n" });
  fs.symlinkSync("/etc/passwd", path.join(base, "links/out"));
  fs.symlinkSync(path.join(base, "real"), path.join(base, "alias"));
  execFileSync("mkfifo", [path.join(base, "fifo/pipe")]);
  const outside = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-sources-outside-")));
  try {
    fs.writeFileSync(path.join(outside, "granted.txt"), "granted\n");
    const refused = [
      [localDir({ src: "links" }), SandboxLocalDirReadError, /links\/out is a symlink/],
      [localFile({ src: "alias/x.txt" }), SandboxLocalFileReadError, /passes through a symlink/],
      [localDir({ src: "fifo" }), SandboxLocalDirReadError, /pipe is not a regular file or directory \(a FIFO/],
      [localFile({ src: "real" }), SandboxLocalFileReadError, /is not a regular file/],
      [localDir({ src: "real/x.txt" }), SandboxLocalDirReadError, /is not a directory/],
      [localDir({ src: "../" }), SandboxLocalDirReadError, /outside the base directory/],
      [localFile({ src: path.join(outside, "granted.txt") }), SandboxLocalFileReadError, /outside the base directory/],
      [localFile({ src: "missing.txt" }), SandboxLocalFileReadError, /missing\.txt: ENOENT/],
      [gitRepo({ repo: outside }), Error, /outside the base directory/],
    ];
    for (const [entry, kind, message] of refused) {
      await assert.rejects(read(nsboxManifest({ entries: { e: entry } })), (e) => e instanceof kind && message.test(e.message),
        JSON.stringify(entry));
    }
    const granted = nsboxManifest({ entries: { g: localFile({ src: path.join(outside, "granted.txt") }) }, extraPathGrants: [{ path: outside }] });
    const sources = await read(granted);
    assert.equal(serverManifest(granted, sources).entries.g.content_b64, b64("granted\n"));
    await sources.close();
  } finally {
    fs.rmSync(outside, { recursive: true, force: true });
  }
});

test("a git_repo whose ref or subpath is not there is refused, and its clone removed", async () => {
  files({ "repo2/a.txt": "a\n" });
  git(path.join(base, "repo2"), "init", "-q", "-b", "main");
  git(path.join(base, "repo2"), "add", ".");
  git(path.join(base, "repo2"), "commit", "-qm", "one");
  const before = clones();
  await assert.rejects(read(nsboxManifest({ entries: { c: gitRepo({ repo: "./repo2", ref: "no-such-branch" }) } })),
    (e) => e instanceof SandboxGitCloneError && /no-such-branch/.test(e.message));
  await assert.rejects(read(nsboxManifest({ entries: { c: gitRepo({ repo: "./repo2", subpath: "nope" }) } })),
    (e) => e instanceof SandboxGitSubpathError && /subpath nope is not in the repository/.test(e.message));
  await assert.rejects(read(nsboxManifest({ entries: { c: gitRepo({ repo: "./repo2", subpath: ".git" }) } })), SandboxGitSubpathError);
  assert.throws(() => new Manifest({ entries: { c: gitRepo({ repo: "./repo2", subpath: "../x" }) } }), /subpath/,
    "the SDK refuses a subpath out of the repository");
  assert.deepEqual(clones(), before);
});

test("bucket mounts become the create document's mounts, at their mount paths, with their credentials and nsbox's strategy", () => {
  const manifest = nsboxManifest({
    entries: {
      data: s3Mount({
        bucket: "agents", prefix: "runs/", region: "us-east-1", endpointUrl: "http://127.0.0.1:9000", readOnly: false,
        accessKeyId: KEY_ID, secretAccessKey: SECRET, mountStrategy: localBindMountStrategy(),
      }),
      r2: r2Mount({ bucket: "r", accountId: "acct123", accessKeyId: KEY_ID, secretAccessKey: SECRET }),
      g: gcsMount({ bucket: "gb", accessId: KEY_ID, secretAccessKey: SECRET, mountPath: "/gcs" }),
      az: azureBlobMount({ accountName: "acct", container: "box", accountKey: SECRET, endpointUrl: "http://127.0.0.1:10000/acct", mountPath: "blobs" }),
      nested: dir({ children: { bucket: s3Mount({ bucket: "b2", mountStrategy: inContainerMountStrategy({ pattern: { type: "rclone" } }) }) } }),
      "keep.txt": { type: "file", content: "kept" },
    },
  });
  assert.deepEqual(mountRequests(manifest), [
    { type: "gcs", bucket: "gb", mount_path: "/gcs", read_only: true, strategy: "builtin",
      credentials: { access_key_id: KEY_ID, secret_access_key: SECRET } },
    { type: "azure_blob", account: "acct", container: "box", endpoint_url: "http://127.0.0.1:10000/acct",
      mount_path: "/workspace/blobs", read_only: true, strategy: "builtin", credentials: { account_key: SECRET } },
    { type: "s3", bucket: "agents", prefix: "runs/", region: "us-east-1", endpoint_url: "http://127.0.0.1:9000",
      mount_path: "/workspace/data", read_only: false, strategy: "builtin",
      credentials: { access_key_id: KEY_ID, secret_access_key: SECRET } },
    { type: "r2", bucket: "r", account: "acct123", mount_path: "/workspace/r2", read_only: true, strategy: "builtin",
      credentials: { access_key_id: KEY_ID, secret_access_key: SECRET } },
    { type: "s3", bucket: "b2", mount_path: "/workspace/nested/bucket", read_only: true, strategy: "rclone" },
  ]);
  assert.deepEqual(serverManifest(manifest).entries, { nested: { type: "dir", children: {} }, "keep.txt": { type: "file", content: "kept" } },
    "mounts are not manifest entries");

  assert.equal(strategyOf(undefined), "builtin");
  assert.equal(strategyOf(dockerVolumeMountStrategy({ driver: "rclone" })), "rclone");
  assert.equal(strategyOf(inContainerMountStrategy({ pattern: { type: "mountpoint" } })), "builtin");
  assert.equal(strategyOf({ type: "s3fs" }), "s3fs");

  const kept = JSON.stringify(withoutMountCredentials(manifest).entries);
  assert.ok(!kept.includes(SECRET) && !kept.includes(KEY_ID), kept);
  assert.match(kept, /"bucket":"agents"/);
  assert.match(JSON.stringify(manifest.entries), new RegExp(SECRET), "the manifest given is left as it was");
});

test("mount fields nsbox cannot serve, and box, s3_files and generic mounts, are refused by name", () => {
  const refused = [
    [r2Mount({ bucket: "r", accountId: "a", customDomain: "files.example.com" }), SandboxMountConfigError, /r2_mount r2: customDomain/],
    [azureBlobMount({ account: "acct", container: "c", identityClientId: "id-1" }), SandboxMountConfigError, /identityClientId/],
    [gcsMount({ bucket: "g", serviceAccountFile: "/keys/sa.json" }), SandboxMountConfigError, /serviceAccountFile.*HMAC/],
  ];
  for (const [entry, kind, message] of refused) {
    assert.throws(() => mountRequests(nsboxManifest({ entries: { [entry.type.split("_")[0]]: entry } })),
      (e) => e instanceof kind && message.test(e.message), entry.type);
  }
  for (const entry of [boxMount({ path: "/x" }), s3FilesMount({ fileSystemId: "fs-1" }), mount({ source: "/srv" })]) {
    assert.throws(() => serverManifest(nsboxManifest({ entries: { m: entry } })),
      (e) => e instanceof SandboxUnsupportedFeatureError && e.message.includes(`of type ${entry.type}`), entry.type);
  }
});

// A stand-in for nsbox serve: what it was asked, and a sandbox document for a create.
async function fakeServer(answers = {}) {
  const requests = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      requests.push({ method: req.method, url: req.url, body });
      const key = `${req.method} ${new URL(req.url, "http://x").pathname}`;
      const [status, doc] = answers[key] ?? (key === "POST /v1/sandboxes" ? [201, { id: "sbx-fake1", status: "running" }] : [200, {}]);
      res.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(doc));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const client = new NsboxSandboxClient({ url: `http://127.0.0.1:${server.address().port}`, token: "t", env: {} });
  return {
    requests,
    client,
    async close() {
      client.close();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

test("create sends the mounts' credentials in the request alone; the session and its serialized state hold none", async () => {
  files({ "sent/hello.txt": "hello\n" });
  const server = await fakeServer();
  try {
    const manifest = new Manifest({
      entries: {
        sent: localDir({ src: "sent" }),
        data: s3Mount({ bucket: "agents", accessKeyId: KEY_ID, secretAccessKey: SECRET, readOnly: false, mountStrategy: localBindMountStrategy() }),
      },
    });
    const session = await server.client.create({ manifest, options: { localSources: { baseDir: base } } });
    const create = JSON.parse(server.requests.find((r) => r.method === "POST").body);
    assert.deepEqual(create.mounts, [{ type: "s3", bucket: "agents", mount_path: "/workspace/data", read_only: false, strategy: "builtin",
      credentials: { access_key_id: KEY_ID, secret_access_key: SECRET } }]);
    assert.equal(create.manifest.entries.sent.children["hello.txt"].content_b64, b64("hello\n"));
    const inMemory = JSON.stringify(session.state.manifest.entries);
    const serialized = JSON.stringify(await server.client.serializeSessionState(session.state));
    for (const secret of [SECRET, KEY_ID]) {
      assert.ok(!inMemory.includes(secret), `${secret} is in the session's manifest: ${inMemory}`);
      assert.ok(!serialized.includes(secret), `${secret} is in the serialized state: ${serialized}`);
    }
    assert.match(serialized, /"bucket":"agents"/, "the mount's topology is kept");
  } finally {
    await server.close();
  }
});

test("a refused source makes nothing; bytes the server refuses after create remove the sandbox", async () => {
  files({ "big2/large.bin": "" });
  fs.truncateSync(path.join(base, "big2/large.bin"), INLINE_BYTES + 1);
  fs.symlinkSync("/etc", path.join(base, "big2-link"));
  const server = await fakeServer({ "PUT /v1/sandboxes/sbx-fake1/fs": [413, { error: { code: "limit_exceeded", message: "too large" } }] });
  try {
    await assert.rejects(server.client.create({ manifest: new Manifest({ entries: { l: localDir({ src: "big2-link" }) } }),
      options: { localSources: { baseDir: base } } }), SandboxLocalDirReadError);
    assert.deepEqual(server.requests, [], "nothing was asked of the server");

    await assert.rejects(server.client.create({ manifest: new Manifest({ entries: { big: localDir({ src: "big2" }) } }),
      options: { localSources: { baseDir: base } } }), /too large/);
    assert.deepEqual(server.requests.map((r) => `${r.method} ${r.url.split("?")[0]}`),
      ["POST /v1/sandboxes", "PUT /v1/sandboxes/sbx-fake1/fs", "DELETE /v1/sandboxes/sbx-fake1"]);
  } finally {
    await server.close();
  }
});
