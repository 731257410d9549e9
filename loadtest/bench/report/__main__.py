"""``python -m loadtest.bench.report [results.json] [bench.md]``: re-render bench.md."""

from loadtest.bench.report import main

main()
