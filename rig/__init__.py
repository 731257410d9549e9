"""What the tests and the load tools share, below both: a free port (``ports``), waiting with a
deadline (``waiting``, re-exporting ``kernel.waiting``), a throwaway Redis Cluster
(``cluster``), the admin API's sale and voucher calls (``admin``), a gateway, a writer and a sale
driven through real processes (``sale``), the checker of a sale's invariants (``invariants``)
and a connection-starvation attack (``attack``, also ``python -m rig.attack``)."""
