# Tandem image: CPython 3.10, the pinned stack, `tandem` as entrypoint.
#   docker build -t tandem .                                  # CPU (actors, CPU learner)
#   docker build -t tandem-gpu --build-arg ACCELERATOR=cuda12 .  # CUDA JAX for a GPU learner
#   mkdir -p runs; docker run --rm --network none --stop-timeout 75 --user "$(id -u):$(id -g)" -e HOME=/tmp \
#       -v $PWD/runs:/tandem/runs tandem train --config configs/mpo.py:cartpole
#   (a GPU learner: tandem-gpu and --gpus all)
# (README, Cloud deployment: why each flag.)
FROM python:3.10.13-slim-bookworm

ARG ACCELERATOR=cpu
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MUJOCO_GL=disable

# Mesa's software OpenGL (OSMesa), for `tandem render` off-screen.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libosmesa6 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /tandem
COPY requirements.lock requirements-cuda12.lock ./
RUN python -m pip install "pip==24.3.1" "setuptools==75.6.0" "wheel==0.45.1" \
 && python -m pip install --require-hashes -r requirements.lock \
 && if [ "$ACCELERATOR" = "cuda12" ]; then \
      python -m pip install --require-hashes -r requirements-cuda12.lock -c requirements.lock; \
    elif [ "$ACCELERATOR" != "cpu" ]; then \
      echo "ACCELERATOR must be cpu or cuda12, got $ACCELERATOR" >&2; exit 1; \
    fi

COPY pyproject.toml README.md ./
COPY agents ./agents
COPY launch ./launch
COPY configs ./configs
RUN python -m pip install --no-deps --no-build-isolation -e . \
 && useradd --system --uid 10001 --no-create-home --home-dir /tmp tandem

# Not root: a node taken over through its port (docs/security.md) gets an
# unprivileged account. `docker run --user` may pick another, as the recipe
# above does so that runs/ belongs to you.
USER 10001
ENV HOME=/tmp

ENTRYPOINT ["tandem"]
CMD ["--help"]
