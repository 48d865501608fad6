"""One module per leg; each ``run(bench)`` returns JSON-ready records."""
