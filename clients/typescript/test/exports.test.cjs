// The package as a CommonJS user requires it: `require('nsbox')` gets the CommonJS build,
// and `require('nsbox/agents')` resolves (and says it is not written yet).
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

test("require('nsbox/agents') resolves to the CommonJS build and fails with the reason", () => {
  assert.match(require.resolve("nsbox/agents"), /dist[\\/]cjs[\\/]agents\.js$/);
  assert.throws(() => require("nsbox/agents"), (e) => e.code === "unsupported" && /section 2/.test(e.message));
});
