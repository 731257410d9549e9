"""The ASGI application object granian imports in each worker."""

from gateway.app import build_app

app = build_app()
