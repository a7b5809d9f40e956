// Node fetch through undici's proxy agents: POSTs `body` to `url` `count`
// times and prints every answer as JSON.
//   node undici_fetch.js proxy|env tunnel|absolute|default URL BODY RUN COUNT [PROXY]
// "proxy": new ProxyAgent({ uri: PROXY, proxyTunnel }); "env": new
// EnvHttpProxyAgent({ proxyTunnel }) reading HTTP_PROXY / HTTPS_PROXY.
const { ProxyAgent, EnvHttpProxyAgent, fetch } = require('undici');

const [kind, tunnel, url, body, run, count, proxy] = process.argv.slice(2);
const options = tunnel === 'default' ? {} : { proxyTunnel: tunnel === 'tunnel' };

(async () => {
  const dispatcher = kind === 'env' ? new EnvHttpProxyAgent(options) : new ProxyAgent({ uri: proxy, ...options });
  const out = [];
  for (let i = 0; i < Number(count); i++) {
    const r = await fetch(url, {
      method: 'POST', body, dispatcher,
      headers: { 'content-type': 'application/json', 'idemgate-run': run },
    });
    out.push({ status: r.status, headers: Object.fromEntries(r.headers.entries()), body: await r.text() });
  }
  await dispatcher.close();
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e && e.cause ? e.cause : e); process.exit(1); });
