"""Agent loops built on wakeful's tool kit (wakeful/agent/kit.py); docs/agent.md walks through them."""
