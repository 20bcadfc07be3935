"""Framework integrations, each a small module on the tool kit (wakeful/agent/kit.py); they
import wakeful.agent, never Celery or tasks/."""
