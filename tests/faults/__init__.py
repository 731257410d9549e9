"""The fault matrix of docs/reliability.md, run as a whole system (tests/support/system.py):
gateways, writer, expiry and reconciliation under a steady open-loop load while a server is
killed, paused, restarted or slowed; the invariant checker judges each row afterwards."""
