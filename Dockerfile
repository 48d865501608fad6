# The web service of docker-compose.yml: the demo project with the same virtualenv and the same
# scripts/demo.sh as on a laptop. Not built by CI (no docker engine on the build machines).
FROM python:3.11-slim-bookworm

# mysqlclient compiles against MariaDB Connector/C; pkg-config finds it.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       build-essential libmariadb-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# Requirements first, so editing the code does not reinstall them.
COPY requirements.txt requirements-dev.txt ./
COPY scripts/ scripts/
RUN scripts/setup.sh .venv python3

# Only what the site needs: never a local .venv or ./var from the build context.
COPY manage.py ./
COPY schemaless_store/ schemaless_store/
COPY project/ project/
COPY templates/ templates/

ENV PYTHONUNBUFFERED=1 HOST=0.0.0.0 PORT=8000
EXPOSE 8000
CMD ["bash", "scripts/demo.sh"]
