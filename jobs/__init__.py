"""Order lifecycle and the background jobs: arm / warm-up, expiry, reconciliation."""
