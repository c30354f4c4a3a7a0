// nsbox/agents without a server: what its session state holds, and how the SDK's manifest
// becomes the create document's (its root, the entries, what is refused).
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { Manifest, Permissions, dir, file } from "@openai/agents/sandbox";
import { NsboxSandboxClient } from "nsbox/agents";
import { serverManifest } from "../dist/esm/agents/manifest.js";

function stateFor(client, manifest = new Manifest()) {
  return { manifest, sandboxId: "sbx-0123abcd", server: client.server, workspaceReady: true,
    environment: { API_KEY: "sk-from-the-environment" } };
}

test("the serialized state names the sandbox and the server's socket, and no token or token file", async () => {
  const dirPath = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-agents-unit-"));
  try {
    const tokenFile = path.join(dirPath, "token");
    fs.writeFileSync(tokenFile, "secret-token-value\n");
    const client = new NsboxSandboxClient({ env: { NSBOX_SOCKET: "/run/x/api.sock", NSBOX_TOKEN_FILE: tokenFile } });
    const record = JSON.parse(JSON.stringify(await client.serializeSessionState(stateFor(client))));
    assert.deepEqual(Object.keys(record).sort(), ["manifest", "sandboxId", "server"]);
    assert.equal(record.server, "unix:/run/x/api.sock");
    assert.equal(record.sandboxId, "sbx-0123abcd");
    const text = JSON.stringify(record);
    for (const secret of ["secret-token-value", tokenFile, "token", "sk-from-the-environment"]) {
      assert.ok(!text.includes(secret), `${secret} is in ${text}`);
    }
    client.close();
  } finally {
    fs.rmSync(dirPath, { recursive: true, force: true });
  }
});

test("a TCP client's state names its URL, and deserializing gives the same sandbox and root back", async () => {
  const client = new NsboxSandboxClient({ url: "http://127.0.0.1:8765", token: "tok-123", env: {} });
  const manifest = new Manifest({ entries: { "a.txt": file({ content: "x" }) } });
  const record = JSON.parse(JSON.stringify(await client.serializeSessionState(stateFor(client, manifest))));
  assert.equal(record.server, "http://127.0.0.1:8765");
  assert.ok(!JSON.stringify(record).includes("tok-123"));
  const state = await client.deserializeSessionState(record);
  assert.equal(state.sandboxId, "sbx-0123abcd");
  assert.equal(state.server, "http://127.0.0.1:8765");
  assert.equal(state.manifest.root, "/workspace");
  assert.deepEqual(Object.keys(state.manifest.entries), ["a.txt"]);
  client.close();
});

test("a state whose sandbox id is not one is refused", async () => {
  const client = new NsboxSandboxClient({ url: "http://127.0.0.1:8765", token: "t", env: {} });
  await assert.rejects(client.deserializeSessionState({ sandboxId: "../../v1/info", server: client.server, manifest: {} }), /not a sandbox id/);
  await assert.rejects(client.deserializeSessionState({ server: client.server, manifest: {} }));
  client.close();
});

test("the manifest's root is the create document's, as written: the server makes it the workspace root", () => {
  assert.equal(serverManifest(new Manifest()).root, "/workspace");
  assert.equal(serverManifest(new Manifest({ root: "/srv/app/" })).root, "/srv/app");  // the server judges it
});

test("file and dir entries become the server's, under the root, with their bytes and mode", () => {
  const manifest = new Manifest({
    root: "/home/user/proj",
    entries: {
      "README.md": file({ content: "# hi\n", permissions: "-rw-r--r--" }),
      "bin": dir({ children: { "data.bin": file({ content: new Uint8Array([0, 255, 1]) }) }, ephemeral: true }),
    },
  });
  const doc = serverManifest(manifest);
  assert.equal(doc.root, "/home/user/proj");
  assert.deepEqual(doc.entries["README.md"], { type: "file", content: "# hi\n", permissions: 0o644 });
  assert.deepEqual(doc.entries["bin"], {
    type: "dir", ephemeral: true,
    children: { "data.bin": { type: "file", content_b64: Buffer.from([0, 255, 1]).toString("base64") } },
  });
  assert.equal(new Permissions("-rw-r--r--").toMode() & 0o7777, 0o644);
});

test("the manifest's users and groups go to the server by name; `user`, the sandbox's own, is not sent as a new account", () => {
  const sent = serverManifest(new Manifest({
    users: ["alice", { name: "bob" }, "user"],
    groups: [{ name: "team", users: ["alice", { name: "carol" }] }, { name: "empty" }],
  }));
  assert.deepEqual(sent.users, ["alice", "bob"]);
  assert.deepEqual(sent.groups, [{ name: "team", users: ["alice", "carol"] }, { name: "empty", users: [] }]);
  const none = serverManifest(new Manifest());
  assert.ok(!("users" in none) && !("groups" in none), JSON.stringify(none));
});

test("an entry's group is refused at create naming the entry and the way to own it (materializeEntry with runAs)", () => {
  const manifest = new Manifest({ users: ["alice"], entries: { docs: dir({ children: { "a.txt": file({ content: "a", group: { name: "alice" } }) } }) } });
  assert.throws(() => serverManifest(manifest),
    (e) => e.details?.feature === "manifest.entry.group" && e.details?.path === "docs/a.txt" &&
      /manifest entry docs\/a\.txt names the group alice.*runAs/s.test(e.message));
});

test("host path grants, and mounts nsbox does not map are refused naming the capability and issue 34", () => {
  const refused = [
    [{ extraPathGrants: [{ path: "/data", hostPath: "/srv/data" }] }, /hostPath.*issue 34/s],
    [{ entries: { box: { type: "box_mount", path: "/shared" } } }, /box_mount.*issue 34/s],
    [{ entries: { efs: { type: "s3_files_mount", fileSystemId: "fs-1" } } }, /s3_files_mount.*issue 34/s],
  ];
  for (const [init, message] of refused) {
    assert.throws(() => serverManifest(new Manifest(init)), message, JSON.stringify(init));
  }
});
