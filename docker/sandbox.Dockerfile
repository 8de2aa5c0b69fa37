# The docker backend's sandbox image: a Debian bookworm minbase (built offline by
# build-images.sh, no registry needed) plus python3, git, bash and coreutils.
# Finders and archive extractors (BLOCKED_TOOLS, taken from sandbox/models.py) and
# all their hard-link aliases are deleted, so they are absent from the view, not masked.
ARG BASE_IMAGE=swe-openenv-base:bookworm
FROM ${BASE_IMAGE}
ARG BLOCKED_TOOLS="find unzip zipinfo"
ARG SANDBOX_UID=1000

SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
RUN export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 git bash coreutils procps patch >/dev/null; \
    apt-get clean; rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/*; \
    groupadd -g "$SANDBOX_UID" swe; \
    useradd -u "$SANDBOX_UID" -g "$SANDBOX_UID" -M -d /workspace -s /bin/bash swe; \
    mkdir -p /workspace /.swe/template; \
    # no setuid/setgid programs (no-new-privileges blocks them too; belt and braces)
    find / -xdev -type f -perm /6000 -exec chmod a-s {} +; \
    # every path of a blocked tool and every hard link to it (Debian's unzip/zipinfo
    # share an inode); find is collected before it is deleted itself
    victims=(); \
    for tool in $BLOCKED_TOOLS; do \
        for dir in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin /usr/lib/jvm; do \
            p="$dir/$tool"; \
            if [ -e "$p" ] || [ -L "$p" ]; then \
                victims+=("$p"); \
                if [ -f "$p" ]; then \
                    while IFS= read -r alias; do victims+=("$alias"); done \
                        < <(find / -xdev -samefile "$(readlink -f "$p")" 2>/dev/null); \
                fi; \
            fi; \
        done; \
    done; \
    for p in "${victims[@]}"; do rm -f "$p"; done; hash -r; \
    for tool in $BLOCKED_TOOLS; do \
        if command -v "$tool" >/dev/null; then echo "still present: $tool" >&2; exit 1; fi; \
    done; \
    echo "${#victims[@]} blocked tool paths removed"

USER ${SANDBOX_UID}:${SANDBOX_UID}
WORKDIR /workspace
CMD ["/bin/bash"]
