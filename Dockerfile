# The demo project's production image (docker-compose.yml's web and cleaner services), in two
# stages. "build" compiles mysqlclient and installs requirements.txt from this source tree into
# /opt/venv: the package (built into a wheel, not an editable checkout) with the demo's extras
# (rest, cache, serve: gunicorn, uvicorn, WhiteNoise) and the demo's own requirements. The final
# stage holds that virtualenv, MariaDB's client library and the demo project: no compiler, no
# test kit (requirements-dev.txt), no tests, no source tree. It runs as an unprivileged user and
# serves the demo with gunicorn and project.production (scripts/serve.sh), which needs SECRET_KEY
# and ALLOWED_HOSTS from the environment. Not built by CI (no docker engine on the build
# machines): tests/package/test_dockerfile.py reads this file and resolves what the final stage
# installs, and finds no dev requirement in it.

FROM python:3.11-slim-bookworm AS build
# mysqlclient compiles against MariaDB Connector/C; pkg-config finds it.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       build-essential libmariadb-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md LICENSE requirements.txt ./
COPY schemaless_store/ schemaless_store/
# requirements.txt, with the package installed from here (`.[extras]`) instead of editable.
RUN python -m venv /opt/venv \
    && sed 's/^-e //' requirements.txt > /tmp/requirements.txt \
    && /opt/venv/bin/pip install --no-cache-dir -r /tmp/requirements.txt

FROM python:3.11-slim-bookworm
# mysqlclient's shared library, without the headers and the compiler it was built with.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libmariadb3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --uid 10001 app
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# Only what the site needs: the demo project, its templates and its two scripts.
COPY manage.py ./
COPY project/ project/
COPY templates/ templates/
COPY scripts/demo.sh scripts/serve.sh scripts/
# collectstatic's output and the embedded SQLite default's files, writable by the app's user.
RUN mkdir -p staticfiles var && chown app:app staticfiles var
ENV PATH=/opt/venv/bin:$PATH \
    PYTHON=/opt/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=project.production \
    BIND=0.0.0.0:8000
USER app
EXPOSE 8000
# collectstatic, then gunicorn (SERVER=asgi: uvicorn's workers). docker-compose.yml's web
# service runs scripts/demo.sh instead: migrations, the admin user and the seed first.
CMD ["bash", "scripts/serve.sh"]
