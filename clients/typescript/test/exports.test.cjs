// The package as a CommonJS user requires it: `require('nsbox')` gets the CommonJS build,
// and `require('nsbox/agents')` gets the CommonJS build of the Agents SDK's client.
const assert = require("node:assert/strict");
const { test } = require("node:test");

test("require('nsbox') gives the CommonJS build with every class", () => {
  const nsbox = require("nsbox");
  assert.match(require.resolve("nsbox"), /dist[\\/]cjs[\\/]index\.js$/);
  for (const name of ["Sandbox", "Session", "Client", "NsboxError", "NotFound", "Execution", "CommandResult", "ToolCallServer"]) {
    assert.equal(typeof nsbox[name], "function", name);
  }
  assert.equal(nsbox.VERSION, require("nsbox/package.json").version);
});

test("require('nsbox/agents') resolves to the CommonJS build: the SDK's client, backend id nsbox", () => {
  assert.match(require.resolve("nsbox/agents"), /dist[\\/]cjs[\\/]agents\.js$/);
  const { NsboxSandboxClient } = require("nsbox/agents");
  assert.equal(new NsboxSandboxClient({ socket: "/nonexistent/api.sock", token: "t", env: {} }).backendId, "nsbox");
});
