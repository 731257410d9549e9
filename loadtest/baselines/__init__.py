"""Reference servers the gateway is measured against (never part of the product)."""
