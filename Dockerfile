# harbor_ray's image: one image for every Ray node of a KubeRay cluster (head, CPU
# rollout hosts, GPU engine workers; deploy/kuberay/). Build: docker build -t harbor-ray .
# (--build-arg EXTRA=gpu on the GPU workers' image: docs/these-machines.md, "Python, uv
# and the engine extra"). Every build step is scripts/build_image.sh, which CI also runs on its own
# machine into a fresh prefix (tests/test_build_image.py).

# The official image's Python 3.12 interpreter, carried into the runtime stage inside
# PREFIX (the build copies it there), so that the venv's interpreter link resolves there.
ARG PYTHON_IMAGE=python:3.12-slim-bookworm
FROM ${PYTHON_IMAGE} AS build
ARG EXTRA=cpu
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY harbor_ray ./harbor_ray
COPY scripts/build_image.sh ./scripts/
RUN scripts/build_image.sh /opt/harbor-ray --python /usr/local/bin/python3.12 --extra ${EXTRA}

# The same Debian release as the build stage (its glibc), without the build's tools.
FROM debian:bookworm-slim
COPY scripts/build_image.sh /usr/local/lib/harbor-ray/build_image.sh
RUN /usr/local/lib/harbor-ray/build_image.sh --system-packages
COPY --from=build /opt/harbor-ray /opt/harbor-ray
# libpython lives in the prefix; `ray`, `python` and `harbor-ray` are the venv's.
ENV LD_LIBRARY_PATH=/opt/harbor-ray/python/lib \
    PATH=/opt/harbor-ray/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/harbor-ray/venv
# What a job runs from its working dir (jobs/sweep.py, the Serve configs).
WORKDIR /opt/harbor-ray/app
COPY jobs ./jobs
COPY serve_configs ./serve_configs
# Again after the copy across stages: the check that fails on a dangling interpreter.
RUN /usr/local/lib/harbor-ray/build_image.sh --check /opt/harbor-ray
