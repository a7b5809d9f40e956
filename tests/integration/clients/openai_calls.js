// The OpenAI Node SDK through idemgate: POSTs each PATH with BODY on an
// OpenAI-style base URL and prints the answer or the APIError it threw.
//   node openai_calls.js PROXY_URL BASE_URL BODY_JSON PATH [PATH ...]
const OpenAI = require('openai');
const { ProxyAgent, fetch } = require('undici');

const [proxy, baseURL, body, ...paths] = process.argv.slice(2);
const dispatcher = new ProxyAgent({ uri: proxy, proxyTunnel: false });
const client = new OpenAI({
  apiKey: 'sk-idemgate-test',
  baseURL,
  fetch: (url, init) => fetch(url, { ...init, dispatcher }),
  maxRetries: 0,
});

(async () => {
  const out = [];
  for (const path of paths) {
    try {
      const { data, response } = await client.post(path, { body: JSON.parse(body) }).withResponse();
      out.push({ ok: true, id: data.id, decision: response.headers.get('idemgate-decision') });
    } catch (e) {
      out.push({ ok: false, api_error: e instanceof OpenAI.APIError, class: e.constructor.name, status: e.status,
                 code: e.code, type: e.type, message: e.message });
    }
  }
  await dispatcher.close();
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
