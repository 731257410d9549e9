"""The ASGI application object granian imports in each worker."""

from .app import build_app

app = build_app()
