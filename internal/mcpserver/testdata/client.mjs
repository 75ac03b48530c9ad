// The official MCP TypeScript SDK (@modelcontextprotocol/sdk) as a client of
// the control plane's MCP server, for TestTypeScriptClient. It prints one
// JSON object with what it saw; the Go test checks it, and the control
// plane's own state, through the REST API.
//
//   MCP_SDK_DIR      the SDK's package directory (node_modules/@modelcontextprotocol/sdk)
//   MCP_URL          the server's endpoint (http://host:port/mcp)
//   MEMBER_TOKEN     a token that may deploy
//   VIEWER_TOKEN     a token with projects:read alone
//   OVERREACH_TOKEN  a viewer's token that carries deployments:write
//   IMAGE            the image to deploy
import path from "node:path";
import { pathToFileURL } from "node:url";

const sdk = process.env.MCP_SDK_DIR;
const { Client } = await import(pathToFileURL(path.join(sdk, "dist/esm/client/index.js")).href);
const { StreamableHTTPClientTransport } = await import(pathToFileURL(path.join(sdk, "dist/esm/client/streamableHttp.js")).href);

async function connect(token) {
  const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "nebulactrl-ts-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

function textOf(res) {
  return (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

const target = { org: "acme", project: "shop", environment: "staging", service: "api" };
const out = {};

const member = await connect(process.env.MEMBER_TOKEN);
out.server = member.getServerVersion();
out.memberTools = (await member.listTools()).tools.map((t) => ({
  name: t.name, readOnly: t.annotations?.readOnlyHint === true, destructive: t.annotations?.destructiveHint === true,
  required: t.inputSchema?.required || [],
}));
const orgs = await member.callTool({ name: "list_organisations", arguments: {} });
out.orgs = orgs.structuredContent.body.items.map((o) => o.name);
const services = await member.callTool({ name: "list_services", arguments: { org: "acme", project: "shop" } });
out.services = services.structuredContent.body.items.map((s) => s.name);
const state = await member.callTool({ name: "get_environment_state", arguments: { org: "acme", project: "shop", environment: "staging" } });
out.state = { isError: state.isError === true, text: textOf(state).slice(0, 200) };
const deploy = await member.callTool({ name: "deploy", arguments: { ...target, image: process.env.IMAGE } });
out.deploy = { isError: deploy.isError === true, status: deploy.structuredContent?.status, deploymentId: deploy.structuredContent?.body?.deployment?.id };
const invalid = await member.callTool({ name: "deploy", arguments: { ...target, image: 42 } });
out.invalid = { isError: invalid.isError === true, text: textOf(invalid) };
await member.close();

const viewer = await connect(process.env.VIEWER_TOKEN);
out.viewerTools = (await viewer.listTools()).tools.map((t) => t.name);
try {
  const res = await viewer.callTool({ name: "deploy", arguments: { ...target, image: process.env.IMAGE } });
  out.viewerDeploy = { isError: res.isError === true, text: textOf(res) };
} catch (e) {
  out.viewerDeploy = { thrown: true, code: e.code, message: String(e.message) };
}
await viewer.close();

const overreach = await connect(process.env.OVERREACH_TOKEN);
const refused = await overreach.callTool({ name: "deploy", arguments: { ...target, image: process.env.IMAGE } });
out.overreachDeploy = { isError: refused.isError === true, status: refused.structuredContent?.status, code: refused.structuredContent?.error?.code, text: textOf(refused) };
await overreach.close();

process.stdout.write(JSON.stringify(out) + "\n");
