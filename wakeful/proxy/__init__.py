"""The egress proxy (``wakeful proxy``): the only process that holds the routes' secrets.

Workers call ``{WAKEFUL_PROXY_URL}/{route}/{path}`` with a grant the runtime minted for their
run or effect (wakeful/agent/egress.py); the proxy checks it against the store (store/grants.py), the
route's allowlist (wakeful/proxy/routes.py), puts the secret on the way out, scrubs it from the way
back (wakeful/proxy/scrub.py) and writes an audit row. It imports the store, never Celery or the
agent kit. See docs/proxy.md.
"""
