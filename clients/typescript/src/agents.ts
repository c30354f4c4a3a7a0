/**
 * `nsbox/agents`: the OpenAI Agents SDK's sandbox client (`NsboxSandboxClient`, backend
 * id `nsbox`) will live here (issue 34, section 2). It is not written yet: the SDK's
 * session needs from the server what it does not serve yet (processes that outlive a
 * request, for `yieldTimeMs` and `writeStdin`; exposed ports; users for `runAs`; a
 * workspace root other than /home/user; workspace archives). The subpath is exported
 * now so that its place in `exports` (import and require) is fixed and tested; importing
 * it fails at once with this explanation rather than with an undefined export later.
 */
import { Unsupported } from "./errors.js";

throw new Unsupported(
  "nsbox/agents (the OpenAI Agents SDK's NsboxSandboxClient) is not in this version of the nsbox package: " +
    "it comes once nsbox serve has processes, exposed ports, users and a workspace root (issue 34, section 2); " +
    "use the Sandbox class of 'nsbox' meanwhile",
);
