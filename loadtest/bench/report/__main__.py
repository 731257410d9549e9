"""``python -m loadtest.bench.report [results.json] [bench.md]``: re-render bench.md;
``--standalone-only [bench.md]``: refresh only its standalone measurements."""

from loadtest.bench.report import main

main()
