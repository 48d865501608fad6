"""gunicorn's settings for the demo (scripts/serve.sh; docs/deployment.md). Each can be set in
the environment."""

import os

bind = os.environ.get("BIND", "0.0.0.0:8000")
# Sync workers, one request at a time each: the store's calls block on MariaDB, so a worker is
# idle while a shard answers, and more workers than cores keep the CPUs busy. 2 x cores (4 on a
# 2-core machine) is gunicorn's advice and what the load test measured best; past that the CPU
# is the bound and more workers only add connections (each holds one per shard it read).
workers = int(os.environ.get("WEB_CONCURRENCY", 2 * (os.cpu_count() or 1)))
# "sync" (WSGI, project.wsgi) or "uvicorn.workers.UvicornWorker" (ASGI, project.asgi).
worker_class = os.environ.get("WORKER_CLASS", "sync")
# A request that takes longer is a stuck worker: gunicorn kills and replaces it. A move's flip
# holds writes at most MOVE_WAIT (10 s) and a read retries within it: 30 s covers both.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 30))
graceful_timeout = 30
keepalive = 5  # behind a proxy that keeps connections open
# Replace each worker after about this many requests (jittered so they do not all restart at
# once): a slow leak in any library cannot grow without bound.
max_requests = int(os.environ.get("MAX_REQUESTS", 5000))
max_requests_jitter = max_requests // 10
# Not preloaded: each worker imports the app and opens its own connections after the fork (a
# connection opened before it would be shared by every worker's socket).
preload_app = False
accesslog = os.environ.get("ACCESS_LOG", "-") or None
errorlog = "-"
