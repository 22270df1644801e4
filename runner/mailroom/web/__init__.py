"""The HTTP services: the operator console, one-click unsubscribe and
provider webhooks (Flask apps for gunicorn), and the development servers'
shared --host/--port options."""
