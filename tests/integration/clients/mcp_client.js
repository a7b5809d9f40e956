// MCP clients built with the official TypeScript SDK, talking Streamable
// HTTP to a server through idemgate (undici ProxyAgent as the SDK's fetch).
//   node mcp_client.js PROXY_URL SERVER_BASE RUN PLAN_JSON
// PLAN is a list of steps run in order, each on a named client:
//   {"op":"connect","client":"a","path":"/json"}   initialize (+ initialized)
//   {"op":"list","client":"a"}                     tools/list
//   {"op":"call","client":"a","tool":"create_ticket","args":{...},"mirror":true}
//       tools/call; mirror adds the Mcp-Method / Mcp-Name headers of 2026-07-28
//   {"op":"close","client":"a"}
// Prints one JSON result per step; a call's result carries the
// Idemgate-Decision of its POST.
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { ProxyAgent, fetch } = require('undici');

const [proxy, base, run, planJson] = process.argv.slice(2);
const dispatcher = new ProxyAgent({ uri: proxy, proxyTunnel: false });
const clients = {};

function open(name, path) {
  const entry = { last: null, mirror: false };
  const proxiedFetch = async (url, init) => {
    const headers = new Headers(init && init.headers);
    headers.set('idemgate-run', run);
    let call = false;
    if (init && typeof init.body === 'string') {
      const message = JSON.parse(init.body);
      call = message.method === 'tools/call';
      if (entry.mirror && message.method) {
        headers.set('mcp-method', message.method);
        if (message.params && message.params.name) headers.set('mcp-name', message.params.name);
      }
    }
    const response = await fetch(url, { ...init, headers, dispatcher });
    if (call) {
      entry.last = { status: response.status, decision: response.headers.get('idemgate-decision'),
                     replayed: response.headers.get('idempotent-replayed'),
                     content_type: response.headers.get('content-type') };
    }
    return response;
  };
  entry.transport = new StreamableHTTPClientTransport(new URL(base + path), { fetch: proxiedFetch });
  entry.client = new Client({ name: 'idemgate-test-' + name, version: '1.0.0' });
  clients[name] = entry;
  return entry;
}

(async () => {
  const out = [];
  for (const step of JSON.parse(planJson)) {
    try {
      if (step.op === 'connect') {
        const entry = open(step.client, step.path);
        await entry.client.connect(entry.transport);
        out.push({ op: 'connect', session: entry.transport.sessionId });
      } else if (step.op === 'list') {
        const entry = clients[step.client];
        const listed = await entry.client.listTools(undefined, { timeout: 10000 });
        out.push({ op: 'list', tools: listed.tools.map((t) => t.name), session: entry.transport.sessionId });
      } else if (step.op === 'call') {
        const entry = clients[step.client];
        entry.mirror = !!step.mirror;
        entry.last = null;
        const result = await entry.client.callTool({ name: step.tool, arguments: step.args }, undefined,
                                                    { timeout: 10000 });
        out.push({ op: 'call', result, http: entry.last, session: entry.transport.sessionId });
      } else if (step.op === 'close') {
        await clients[step.client].client.close();
        out.push({ op: 'close' });
      }
    } catch (e) {
      out.push({ op: step.op, error: String(e && e.message ? e.message : e),
                 http: clients[step.client] ? clients[step.client].last : null });
    }
  }
  for (const entry of Object.values(clients)) await entry.client.close().catch(() => {});
  await dispatcher.close();
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
