# syntax=docker/dockerfile:1
# kairosmq container images (how to use them: docs/docker.md).
#
#   docker build -t kairosmq .                                  # broker (the last stage)
#   docker build --target spark-report -t kairosmq-spark .      # Spark report job, Java 17
#
# Stages: build (venv with the broker + clients + prometheus-client, its native core built
# with Cython), build-spark (+ pyspark), spark-report (JRE 17 + that venv), broker (slim
# runtime). Both runtimes run as the non-root user "kairosmq" (uid/gid 10001) and keep
# their state in volumes.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# a C compiler for the native core (setup.py: Cython twins of the hot modules); the
# runtime stages copy only the venv, so they carry no build tools
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/kairosmq
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY protocol/ protocol/
COPY server/ server/
COPY client/ client/
COPY console/ console/
COPY spark/ spark/
RUN /opt/kairosmq/bin/pip install ".[metrics,acl]" \
    && /opt/kairosmq/bin/python -c "import kairosmq.server.broker; \
from kairosmq.protocol import native; assert native.core() == 'native', native.describe()"

FROM build AS build-spark
RUN /opt/kairosmq/bin/pip install ".[spark]"

FROM ${PYTHON_IMAGE} AS spark-report
# man1 must exist for the JRE's post-install alternatives on slim images
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java \
    && groupadd --system --gid 10001 kairosmq \
    && useradd --system --uid 10001 --gid kairosmq --create-home kairosmq \
    && mkdir -p /logs /reports && chown kairosmq:kairosmq /logs /reports
COPY --from=build-spark /opt/kairosmq /opt/kairosmq
ENV PATH=/opt/kairosmq/bin:$PATH JAVA_HOME=/opt/java PYTHONUNBUFFERED=1
USER kairosmq
WORKDIR /home/kairosmq
VOLUME ["/logs", "/reports"]
ENTRYPOINT ["kairosmq", "report"]
CMD ["/logs", "--output", "/reports"]

FROM ${PYTHON_IMAGE} AS broker
RUN groupadd --system --gid 10001 kairosmq \
    && useradd --system --uid 10001 --gid kairosmq --create-home kairosmq \
    && mkdir -p /data /logs && chown kairosmq:kairosmq /data /logs
COPY --from=build /opt/kairosmq /opt/kairosmq
# the demo clients (docker-compose services "producer" and "consumer")
COPY examples/ /app/examples/
ENV PATH=/opt/kairosmq/bin:$PATH PYTHONUNBUFFERED=1
USER kairosmq
WORKDIR /home/kairosmq
VOLUME ["/data", "/logs"]
# name server, broker, VIP channel (broker port - 2, for Java clients 4.0-4.5), metrics
EXPOSE 9876 10911 10909 9877
# asks the name server and the broker over the remoting protocol (exit 0 = both answer)
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["kairosmq", "admin", "--namesrv", "127.0.0.1:9876", "--broker", "127.0.0.1:10911", "--timeout", "3", "health"]
ENTRYPOINT ["kairosmq", "broker", "--host", "0.0.0.0", "--data-dir", "/data", "--log-dir", "/logs"]
CMD []
