// The OpenAI Agents SDK drives nsbox: a SandboxAgent's shell tool runs in an isolated
// sandbox of a local `nsbox serve`. The model is the SDK's own scripted test model, so
// this runs offline and without a key; swap in a real model and nothing else changes.
//
//   NSBOX_SOCKET=/path/api.sock NSBOX_TOKEN_FILE=/path/token node examples/agents-demo.mjs
import { Runner, setTracingDisabled } from "@openai/agents";
import { Manifest, SandboxAgent, file, shell } from "@openai/agents/sandbox";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents/testing";
import { NsboxSandboxClient } from "nsbox/agents";

setTracingDisabled(true);  // no network: traces would go to OpenAI

const model = new ScriptedModel([
  [functionCall("exec_command", { cmd: "paste -sd+ data/numbers.txt | bc; whoami; pwd" }, { callId: "sum" })],
  [functionCall("exec_command", { cmd: "echo /etc/shadow holds $(wc -c < /etc/shadow) bytes here; curl -sS -m 3 https://example.com 2>&1 | tail -1" }, { callId: "probe" })],
  [assistantMessage("The numbers add up to 8, and the sandbox kept the host's secrets and network out.")],
]);
const agent = new SandboxAgent({ name: "analyst", model, instructions: "Work in the sandbox.", capabilities: [shell()] });
const client = new NsboxSandboxClient();  // NSBOX_URL/NSBOX_TOKEN or NSBOX_SOCKET (+ token file)
try {
  const result = await new Runner().run(agent, "Add up data/numbers.txt.", {
    sandbox: { client, manifest: new Manifest({ entries: { "data/numbers.txt": file({ content: "3\n1\n4\n" }) } }) },
  });
  for (const item of result.newItems) {
    if (item.type === "tool_call_item") console.log(`tool call: ${item.rawItem.name} ${item.rawItem.arguments}`);
    if (item.type === "tool_call_output_item") console.log(String(item.output).replace(/^/gm, "    "));
  }
  console.log(`final output: ${result.finalOutput}`);
} finally {
  client.close();
}
