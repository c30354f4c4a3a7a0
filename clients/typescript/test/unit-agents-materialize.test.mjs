// nsbox/agents' materializeEntry and applyManifest without a server: a stand-in sandbox
// records the fs calls (and the chmod commands) the session makes, and keeps the files
// they make, so what lands where, with which mode, and what is refused before anything is
// made can be looked at.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Readable } from "node:stream";
import { after, before, test } from "node:test";

import {
  Manifest,
  SandboxMountError,
  SandboxUnsupportedFeatureError,
  azureBlobMount,
  dir,
  file,
  gcsMount,
  gitRepo,
  localDir,
  localFile,
  r2Mount,
  s3Mount,
} from "@openai/agents/sandbox";
import { NsboxSandboxSession } from "nsbox/agents";

let base; // host sources, removed after the file's tests

before(() => {
  base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-materialize-unit-")));
});

after(() => {
  fs.rmSync(base, { recursive: true, force: true });
});

/**
 * A sandbox of the fs routes' rules, in memory: `PUT .../fs` makes parents and replaces a
 * file, refuses a directory; `fs:mkdir?parents=true` keeps an existing directory and
 * refuses a file; `fs:stat`; `commands` runs `chmod` alone. `calls` is what was asked,
 * each ending in `as NAME` when it named an account (`runAs`).
 */
function standIn() {
  const calls = [];
  const as = (options) => (options?.runAs === undefined ? [] : [`as ${options.runAs}`]);
  const nodes = new Map([["/workspace", { type: "dir", mode: 0o755 }]]);
  const makeParents = (p) => {
    for (let d = path.posix.dirname(p); !nodes.has(d); d = path.posix.dirname(d)) nodes.set(d, { type: "dir", mode: 0o755 });
  };
  const sandbox = {
    id: "sbx-unit",
    fs: {
      async write(p, data, options = {}) {
        calls.push(["write", p, options.mode, ...as(options)]);
        if (nodes.get(p)?.type === "dir") throw new Error(`${p} is a directory`);
        const chunks = [];
        if (data instanceof Readable) for await (const c of data) chunks.push(c);
        else chunks.push(Buffer.from(data));
        makeParents(p);
        nodes.set(p, { type: "file", mode: options.mode ?? 0o644, data: Buffer.concat(chunks) });
        return { path: p, size: Buffer.concat(chunks).length };
      },
      async mkdir(p, options = {}) {
        calls.push(["mkdir", p, options.parents === true, ...as(options)]);
        if (nodes.has(p) && nodes.get(p).type !== "dir") throw new Error(`a part of ${p} is not a directory`);
        makeParents(p);
        if (!nodes.has(p)) nodes.set(p, { type: "dir", mode: 0o755 });
        return p;
      },
      async stat(p, options = {}) {
        calls.push(["stat", p, ...as(options)]);
        const node = nodes.get(p);
        if (!node) throw new Error(`${p}: not found`);
        return { path: p, type: node.type, mode: node.mode, size: node.data?.length ?? 0 };
      },
    },
    commands: {
      async run(argv, options = {}) {
        calls.push(["run", ...argv, ...as(options)]);
        assert.equal(argv[0], "chmod", "only chmod is run");
        nodes.get(argv[3]).mode = parseInt(argv[1], 8);
        return { ok: true, exit_code: 0, stderr: Buffer.alloc(0) };
      },
    },
  };
  return { sandbox, calls, nodes, text: (p) => nodes.get(p)?.data?.toString("utf8") };
}

function sessionOn(sandbox, manifest = new Manifest(), environment = {}) {
  return new NsboxSandboxSession(sandbox, { manifest, sandboxId: "sbx-unit", server: "unix:/run/x/api.sock", workspaceReady: true,
    environment }, { localSources: { baseDir: base } });
}

function hostFiles(spec) {
  for (const [rel, [content, mode]] of Object.entries(spec)) {
    const p = path.join(base, rel);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, content);
    fs.chmodSync(p, mode);
  }
}

const bucketMount = (extra = {}) => s3Mount({ bucket: "agents", prefix: "p/", endpointUrl: "http://127.0.0.1:9", readOnly: false, ...extra });

test("materializeEntry makes files and directories under the root through the fs routes, with the SDK's modes, and adds each to the manifest", async () => {
  const { sandbox, calls, nodes, text } = standIn();
  const session = sessionOn(sandbox);
  await session.materializeEntry({ path: "notes/a.txt", entry: file({ content: "A" }) });
  await session.materializeEntry({ path: "/workspace/b.bin", entry: file({ content: new Uint8Array([0, 255]), permissions: "-rw-------" }) });
  await session.materializeEntry({ path: "private", entry: dir({ permissions: "drwx------", children: { "c.txt": file({ content: "C" }) } }) });
  assert.deepEqual(calls, [
    ["write", "/workspace/notes/a.txt", 0o755],          // the SDK's default mode of an entry
    ["write", "/workspace/b.bin", 0o600],
    ["mkdir", "/workspace/private", true],
    ["stat", "/workspace/private"],
    ["run", "chmod", "0700", "--", "/workspace/private"],  // the fs routes have no chmod
    ["write", "/workspace/private/c.txt", 0o755],
  ]);
  assert.equal(text("/workspace/notes/a.txt"), "A");
  assert.deepEqual(nodes.get("/workspace/b.bin").data, Buffer.from([0, 255]));
  assert.equal(nodes.get("/workspace/private").mode, 0o700);
  assert.deepEqual(Object.keys(session.state.manifest.entries).sort(), ["b.bin", "notes/a.txt", "private"]);
});

test("what is there already is merged into as the SDK's clients do: a directory keeps its files, a file is replaced; " +
  "a directory of the right mode is not chmodded", async () => {
  const { sandbox, calls, text } = standIn();
  const session = sessionOn(sandbox);
  await session.materializeEntry({ path: "d", entry: dir({ children: { "old.txt": file({ content: "old" }) } }) });
  await session.materializeEntry({ path: "d", entry: dir({ permissions: "drwxr-xr-x", children: { "new.txt": file({ content: "new" }) } }) });
  await session.materializeEntry({ path: "d/old.txt", entry: file({ content: "replaced" }) });
  assert.equal(text("/workspace/d/old.txt"), "replaced");
  assert.equal(text("/workspace/d/new.txt"), "new");
  assert.ok(!calls.some(([verb]) => verb === "run"), JSON.stringify(calls));
  // A file where a directory is, and the other way round, are the fs routes' refusals.
  await assert.rejects(session.materializeEntry({ path: "d", entry: file({ content: "x" }) }), /is a directory/);
  await assert.rejects(session.materializeEntry({ path: "d/old.txt", entry: dir() }), /not a directory/);
});

test("local_file, local_dir and git_repo are read on this side, confined as at create, and written as files with their modes", async () => {
  hostFiles({
    "skill/SKILL.md": ["# skill\n", 0o644],
    "skill/scripts/run.sh": ["echo run\n", 0o755],
    "single.txt": ["one\n", 0o640],
    "repo/lib/util.txt": ["util\n", 0o644],
  });
  const repo = path.join(base, "repo");
  const git = (...args) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], { cwd: repo });
  git("init", "-q", "-b", "main");
  git("add", ".");
  git("commit", "-qm", "first");
  const { sandbox, nodes, text } = standIn();
  const session = sessionOn(sandbox);
  await session.materializeEntry({ path: ".agents/skill", entry: localDir({ src: "skill" }) });
  await session.materializeEntry({ path: "one.txt", entry: localFile({ src: "single.txt" }) });
  await session.materializeEntry({ path: "code", entry: gitRepo({ repo: "./repo", ref: "main" }) });
  assert.equal(text("/workspace/.agents/skill/SKILL.md"), "# skill\n");
  assert.equal(nodes.get("/workspace/.agents/skill/scripts/run.sh").mode, 0o755);
  assert.equal(nodes.get("/workspace/one.txt").mode, 0o640);
  assert.equal(text("/workspace/code/lib/util.txt"), "util\n");
  assert.ok(![...nodes.keys()].some((p) => p.includes(".git/") || p.endsWith(".git")), "the repository's .git is not written");
  assert.deepEqual(Object.keys(session.state.manifest.entries).sort(), [".agents/skill", "code", "one.txt"]);
  // A source outside the base directory is refused before anything is made.
  const before = nodes.size;
  await assert.rejects(session.materializeEntry({ path: "etc", entry: localDir({ src: "/etc" }) }), /outside the base directory/);
  assert.equal(nodes.size, before);
});

test("a path outside the root, or with .., is refused before anything is made", async () => {
  const { sandbox, calls } = standIn();
  const session = sessionOn(sandbox);
  await assert.rejects(session.materializeEntry({ path: "/etc/passwd", entry: file({ content: "x" }) }), /must stay within \/workspace/);
  await assert.rejects(session.materializeEntry({ path: "/workspace/../etc/x", entry: file({ content: "x" }) }), /must stay within/);
  await assert.rejects(session.materializeEntry({ path: "a/../../x", entry: file({ content: "x" }) }), /parent segments/);
  assert.deepEqual(calls, []);
  assert.deepEqual(session.state.manifest.entries, {});
});

test("a mount entry after create is refused naming its type and path, by both calls; nothing is made", async () => {
  const mounts = {
    s3_mount: bucketMount(),
    r2_mount: r2Mount({ bucket: "b", accountId: "acct" }),
    gcs_mount: gcsMount({ bucket: "b" }),
    azure_blob_mount: azureBlobMount({ container: "c", account: "acct" }),
  };
  for (const [type, entry] of Object.entries(mounts)) {
    const { sandbox, calls } = standIn();
    const session = sessionOn(sandbox);
    const refused = (e) => e instanceof SandboxUnsupportedFeatureError && e.message.includes(`manifest entry data of type ${type} cannot be added ` +
      "to a running nsbox sandbox") && e.details?.path === "data" && e.details?.type === type;
    await assert.rejects(session.materializeEntry({ path: "data", entry }), refused, type);
    await assert.rejects(session.applyManifest(new Manifest({ entries: { "x.txt": file({ content: "x" }), data: entry } })), refused, type);
    // Inside a directory too.
    await assert.rejects(session.materializeEntry({ path: "box", entry: dir({ children: { data: entry } }) }),
      (e) => e instanceof SandboxUnsupportedFeatureError && /box\/data of type/.test(e.message), type);
    assert.deepEqual(calls, [], type);
    assert.deepEqual(session.state.manifest.entries, {}, type);
  }
});

test("applyManifest leaves a mount the sandbox serves as it is and makes the rest; a changed mount is the SDK's SandboxMountError", async () => {
  const { sandbox, calls, text } = standIn();
  // The session's manifest, as the client keeps it: the mount without its credentials.
  const session = sessionOn(sandbox, new Manifest({ entries: { data: bucketMount() } }));
  await session.applyManifest(new Manifest({
    entries: { data: bucketMount({ accessKeyId: "AKIA-UNIT", secretAccessKey: "sEcReT" }), "x.txt": file({ content: "x" }) },
  }));
  assert.deepEqual(calls, [["write", "/workspace/x.txt", 0o755]]);
  assert.equal(text("/workspace/x.txt"), "x");
  assert.deepEqual(Object.keys(session.state.manifest.entries).sort(), ["data", "x.txt"]);
  assert.ok(!JSON.stringify(session.state.manifest.entries).includes("sEcReT"), "the credentials went into the session's manifest");
  await assert.rejects(session.applyManifest(new Manifest({ entries: { data: s3Mount({ bucket: "another" }), "y.txt": file({ content: "y" }) } })),
    (e) => e instanceof SandboxMountError && /\bdata\b/.test(e.message));
  assert.equal(calls.length, 1, "the refused manifest made something");
});

test("an ephemeral entry is refused after create, unless it is under an ephemeral entry the sandbox was made with", async () => {
  const { sandbox, calls, text } = standIn();
  const session = sessionOn(sandbox, new Manifest({ entries: { scratch: dir({ ephemeral: true }) } }));
  await assert.rejects(session.materializeEntry({ path: "secret.txt", entry: file({ content: "s", ephemeral: true }) }),
    (e) => e instanceof SandboxUnsupportedFeatureError && /ephemeral manifest entry secret\.txt \(file\)/.test(e.message));
  assert.deepEqual(calls, []);
  await session.materializeEntry({ path: "scratch/tmp.txt", entry: file({ content: "t", ephemeral: true }) });
  assert.equal(text("/workspace/scratch/tmp.txt"), "t");
});

test("runAs makes every file, directory and chmod of materializeEntry and applyManifest as that account", async () => {
  const { sandbox, calls, text } = standIn();
  const session = sessionOn(sandbox, new Manifest({ users: ["alice", "bob"] }));
  await session.materializeEntry({ path: "notes/a.txt", entry: file({ content: "A" }), runAs: "alice" });
  await session.applyManifest(new Manifest({ entries: { private: dir({ permissions: "drwx------", children: { "c.txt": file({ content: "C" }) } }) } }), "bob");
  assert.deepEqual(calls, [
    ["write", "/workspace/notes/a.txt", 0o755, "as alice"],
    ["mkdir", "/workspace/private", true, "as bob"],
    ["stat", "/workspace/private", "as bob"],
    ["run", "chmod", "0700", "--", "/workspace/private", "as bob"],
    ["write", "/workspace/private/c.txt", 0o755, "as bob"],
  ]);
  assert.equal(text("/workspace/notes/a.txt"), "A");
  assert.deepEqual(Object.keys(session.state.manifest.entries).sort(), ["notes/a.txt", "private"]);
});

test("applyManifest takes the users and groups the sandbox was made with, and refuses new ones naming them", async () => {
  const { sandbox, calls } = standIn();
  const session = sessionOn(sandbox, new Manifest({ users: ["alice"], groups: [{ name: "team", users: ["alice"] }] }));
  // The SDK's runAs user (manifestWithRunAsUser) and the sandbox's own `user` are no change.
  await session.applyManifest(new Manifest({ users: ["alice", "user"], groups: [{ name: "team", users: ["alice"] }],
    entries: { "a.txt": file({ content: "a" }) } }), "alice");
  assert.deepEqual(calls, [["write", "/workspace/a.txt", 0o755, "as alice"]]);
  calls.length = 0;
  const cases = [
    [new Manifest({ users: ["alice", "carol"] }), /cannot add the users carol to a running nsbox sandbox/],
    [new Manifest({ groups: [{ name: "team", users: ["alice", "dave"] }] }), /cannot add the users dave and the groups team/],
    [new Manifest({ groups: [{ name: "ops", users: ["alice"] }] }), /cannot add the groups ops.*manifest the session is created with/s],
  ];
  for (const [manifest, message] of cases) {
    await assert.rejects(session.applyManifest(manifest, "alice"),
      (e) => e instanceof SandboxUnsupportedFeatureError && e.details?.feature === "applyManifest.users" && message.test(e.message),
      message.source);
  }
  assert.deepEqual(calls, []);
});

test("an entry's group, hostPath grants and new environment values are refused naming them; nothing is made", async () => {
  const { sandbox, calls } = standIn();
  const session = sessionOn(sandbox, new Manifest(), { MARKER: "at-create" });
  const cases = [
    [session.materializeEntry({ path: "a.txt", entry: file({ content: "a", group: { name: "staff" } }), runAs: "alice" }),
      /manifest entry a\.txt names the group staff.*materializeEntry\(\{path, entry, runAs\}\)/s],
    [session.applyManifest(new Manifest({ extraPathGrants: [{ path: "/data", hostPath: "/srv/data" }] })), /hostPath.*issue 34/s],
    [session.applyManifest(new Manifest({ environment: { MARKER: "changed", OTHER: "x" } })), /cannot set MARKER, OTHER/],
  ];
  for (const [promise, message] of cases) await assert.rejects(promise, (e) => e instanceof SandboxUnsupportedFeatureError && message.test(e.message));
  assert.deepEqual(calls, []);
  // The environment the sandbox has is no change.
  await session.applyManifest(new Manifest({ environment: { MARKER: "at-create" }, entries: { "b.txt": file({ content: "b" }) } }));
  assert.deepEqual(calls, [["write", "/workspace/b.txt", 0o755]]);
});

test("applyManifest's path grants join the session's, and admit a host source under them", async () => {
  const granted = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-materialize-grant-")));
  try {
    fs.writeFileSync(path.join(granted, "g.txt"), "granted\n");
    const { sandbox, text } = standIn();
    const session = sessionOn(sandbox);
    await assert.rejects(session.materializeEntry({ path: "g.txt", entry: localFile({ src: path.join(granted, "g.txt") }) }), /outside the base directory/);
    await session.applyManifest(new Manifest({
      extraPathGrants: [{ path: granted, readOnly: true }],
      entries: { "g.txt": localFile({ src: path.join(granted, "g.txt") }) },
    }));
    assert.equal(text("/workspace/g.txt"), "granted\n");
    assert.deepEqual(session.state.manifest.extraPathGrants.map((g) => g.path), [granted]);
  } finally {
    fs.rmSync(granted, { recursive: true, force: true });
  }
});
