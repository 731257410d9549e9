"""The background jobs: expiry and reconciliation (the arming they use lives in domain/)."""
