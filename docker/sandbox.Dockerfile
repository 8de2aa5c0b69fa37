# The docker backend's sandbox image: a Debian bookworm minbase (built offline by
# build-images.sh, no registry needed) plus python3, git, bash and coreutils.
# Finders and archive extractors (BLOCKED_TOOLS, taken from sandbox/models.py) and
# all their hard-link aliases are deleted by sandbox/harden_image.sh (the build context),
# so they are absent from the view, not masked.
ARG BASE_IMAGE=swe-openenv-base:bookworm
FROM ${BASE_IMAGE}
ARG BLOCKED_TOOLS="find unzip zipinfo"
ARG SANDBOX_UID=1000

SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
COPY harden_image.sh /tmp/harden_image.sh
RUN export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 git bash coreutils procps patch >/dev/null; \
    apt-get clean; rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/*; \
    groupadd -g "$SANDBOX_UID" swe; \
    useradd -u "$SANDBOX_UID" -g "$SANDBOX_UID" -M -d /workspace -s /bin/bash swe; \
    mkdir -p /workspace /.swe/template; \
    bash /tmp/harden_image.sh $BLOCKED_TOOLS; rm -f /tmp/harden_image.sh

USER ${SANDBOX_UID}:${SANDBOX_UID}
WORKDIR /workspace
CMD ["/bin/bash"]
