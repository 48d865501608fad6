"""The load test of the demo served as production does (docs/deployment.md): ``locustfile``
(the users), ``run`` (servers, gunicorn, locust, one fault, the checks and the report)."""
