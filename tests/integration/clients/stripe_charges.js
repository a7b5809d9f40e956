// stripe-node through idemgate's HTTPS interception: creates the charges
// given as JSON and prints, per call, the charge or the error it threw.
//   node stripe_charges.js PROXY_URL API_PORT RETRIES CHARGE_JSON [CHARGE_JSON ...]
// PROXY_URL names the run in its user name (http://run-1:x@127.0.0.1:8080);
// NODE_EXTRA_CA_CERTS must hold idemgate's CA.
const Stripe = require('stripe');
const { HttpsProxyAgent } = require('https-proxy-agent');

const [proxy, port, retries, ...charges] = process.argv.slice(2);
const stripe = new Stripe('sk_test_idemgate', {
  host: 'localhost',           // a local Stripe-like provider; api.stripe.com in real use
  port: Number(port),
  protocol: 'https',
  httpAgent: new HttpsProxyAgent(proxy),
  maxNetworkRetries: Number(retries),
  timeout: 20000,
});

(async () => {
  const out = [];
  for (const charge of charges) {
    try {
      const c = await stripe.charges.create(JSON.parse(charge));
      const h = c.lastResponse.headers;
      out.push({ ok: true, id: c.id, object: c.object, decision: h['idemgate-decision'],
                 replayed: h['idempotent-replayed'] || null });
    } catch (e) {
      out.push({ ok: false, stripe_error: e instanceof Stripe.errors.StripeError, class: e.constructor.name,
                 type: e.type, raw_type: e.raw && e.raw.type, code: e.code, status: e.statusCode,
                 message: e.message, decision: e.headers && e.headers['idemgate-decision'] });
    }
  }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
