"""The ASGI application object granian imports in each worker: the app, timed by route
(gateway/observed.py)."""

from gateway.app import build_app
from gateway.observed import observe

app = observe(build_app())
