"""What the tests share besides fixtures: ``gateway`` and ``writer`` (processes and helpers),
``kafka`` (topics of a test's own), ``stack`` (the stack's servers), ``constants`` (ports and
settings). The stop of every child process is ``flashsale.stack.processes.stop_group``."""
