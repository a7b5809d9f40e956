"""stripe-python (Debian's python3-stripe) through idemgate's HTTPS
interception: creates the charges given as JSON and prints, per call, the
charge or the error it raised (the same shape as stripe_charges.js).
  /usr/bin/python3 stripe_charges.py PROXY_URL API_PORT RETRIES CA_FILE CHARGE_JSON [CHARGE_JSON ...]
PROXY_URL names the run in its user name (http://run-1:x@127.0.0.1:8080);
CA_FILE is idemgate's CA (from `idemgate ca init`)."""
import json
import sys

import stripe

proxy, port, retries, ca_file, *charges = sys.argv[1:]
stripe.api_key = "sk_test_idemgate"
stripe.api_base = "https://localhost:%d" % int(port)  # a local Stripe-like provider; api.stripe.com in real use
stripe.proxy = proxy
stripe.ca_bundle_path = ca_file
stripe.max_network_retries = int(retries)

out = []
for charge in charges:
    try:
        c = stripe.Charge.create(**json.loads(charge))
        h = c.last_response.headers
        out.append({"ok": True, "id": c.id, "object": c.object, "decision": h.get("idemgate-decision"),
                    "replayed": h.get("idempotent-replayed")})
    except stripe.error.StripeError as e:
        err = e.error  # the body's `error` member, as stripe-python parsed it
        out.append({"ok": False, "stripe_error": True, "class": type(e).__name__,
                    "raw_type": err.type if err else None, "code": err.code if err else e.code,
                    "status": e.http_status, "message": e.user_message or str(e),
                    "decision": (e.headers or {}).get("idemgate-decision")})
print(json.dumps(out))
