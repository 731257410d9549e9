"""The flash-sale gateway: the HTTP edge that answers buyers and the admin API."""
