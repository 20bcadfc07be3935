"""Agent loops built on wakeful's tool kit (agent/kit.py); docs/agent.md walks through them."""
