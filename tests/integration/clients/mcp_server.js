// An MCP server over Streamable HTTP built with the official TypeScript SDK,
// stateful (one Mcp-Session-Id per client). /json answers tools/call with
// application/json, /sse with text/event-stream. It records every effect
// (ticket created) and every request's session, for the tests to count.
//   node mcp_server.js PORT_FILE
// Control: POST /control {"drop_next": true} makes the next create_ticket
// create its ticket and then drop the connection; GET /state returns
// {"tickets": [...], "requests": [{"path","session","method"}]}.
const http = require('node:http');
const fs = require('node:fs');
const { randomUUID } = require('node:crypto');
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const { isInitializeRequest } = require('@modelcontextprotocol/sdk/types.js');
const { z } = require('zod');

const state = { tickets: [], requests: [], dropNext: false };
let currentSocket = null;

function makeServer() {
  const server = new McpServer({ name: 'idemgate-test-desk', version: '1.0.0' });
  server.registerTool('create_ticket', {
    description: 'Creates a support ticket (a write).',
    inputSchema: { title: z.string() },
  }, async ({ title }) => {
    const id = 'T-' + (state.tickets.length + 1);
    state.tickets.push({ id, title });
    if (state.dropNext) {
      state.dropNext = false;
      currentSocket.destroy();  // the effect happened; its answer is lost
    }
    return { content: [{ type: 'text', text: id }], structuredContent: { id, title } };
  });
  server.registerTool('fail_ticket', {
    description: 'Always fails as a tool (isError).',
    inputSchema: { title: z.string() },
  }, async () => ({ content: [{ type: 'text', text: 'desk is read-only today' }], isError: true }));
  return server;
}

const transports = { '/json': {}, '/sse': {} };

function readBody(req) {
  return new Promise((resolve) => {
    let data = '';
    req.on('data', (c) => { data += c; });
    req.on('end', () => resolve(data ? JSON.parse(data) : undefined));
  });
}

const httpServer = http.createServer(async (req, res) => {
  const path = req.url.split('?')[0];
  if (path === '/control') {
    const body = await readBody(req);
    state.dropNext = !!body.drop_next;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    return;
  }
  if (path === '/state') {
    res.writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ tickets: state.tickets, requests: state.requests }));
    return;
  }
  const sessions = transports[path];
  if (!sessions) { res.writeHead(404).end(); return; }
  const body = req.method === 'POST' ? await readBody(req) : undefined;
  const sid = req.headers['mcp-session-id'];
  state.requests.push({ path, session: sid || null, method: body && body.method ? body.method : req.method });
  currentSocket = req.socket;
  let transport = sid ? sessions[sid] : undefined;
  if (!transport && body && isInitializeRequest(body)) {
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: path === '/json',
      onsessioninitialized: (id) => { sessions[id] = transport; },
    });
    await makeServer().connect(transport);
  }
  if (!transport) {
    res.writeHead(400, { 'content-type': 'application/json' })
      .end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'no session' } }));
    return;
  }
  await transport.handleRequest(req, res, body);
});

httpServer.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(process.argv[2], String(httpServer.address().port));
});
