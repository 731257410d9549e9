"""What the tests and the load tools share, below both: a free port (``ports``), a Redis Cluster
of one's own (``cluster``), the checker of a sale's invariants (``invariants``), and a sale
driven through real processes (``sale``: a gateway, a writer, a sale created and armed). Waiting
is ``kernel.waiting``'s, re-exported by ``waiting``. Nothing here runs on its own."""
