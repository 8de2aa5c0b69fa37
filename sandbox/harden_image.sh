#!/usr/bin/env bash
# Harden an image's filesystem for sandbox sessions, run as root at image build time:
#   harden_image.sh TOOL...
# - no setuid/setgid programs (no-new-privileges blocks them too; belt and braces);
# - every path of a blocked tool (finders, archive extractors: sandbox/models.py
#   DEFAULT_BLOCKED_TOOLS) in the usual bin folders and every hard link to it
#   (Debian's unzip/zipinfo share an inode) is deleted, so the tools are absent,
#   not masked; `find` is used before it is deleted itself;
# - fails if a blocked tool is still on PATH.
# Used by docker/sandbox.Dockerfile and by the derived images of image-resident tasks
# (sandbox/image_workspace.py), whose PATH may also hold an environment's bin folder.
set -euo pipefail
find / -xdev -type f -perm /6000 -exec chmod a-s {} + 2>/dev/null || true
dirs=(/usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin /usr/lib/jvm)
IFS=: read -r -a path_dirs <<<"${PATH:-}"
dirs+=("${path_dirs[@]}")
victims=()
for tool in "$@"; do
    for dir in "${dirs[@]}"; do
        [ -n "$dir" ] || continue
        p="$dir/$tool"
        if [ -e "$p" ] || [ -L "$p" ]; then
            victims+=("$p")
            if [ -f "$p" ]; then
                while IFS= read -r alias; do victims+=("$alias"); done \
                    < <(find / -xdev -samefile "$(readlink -f "$p")" 2>/dev/null)
            fi
        fi
    done
done
for p in "${victims[@]}"; do rm -f "$p"; done
hash -r
for tool in "$@"; do
    if command -v "$tool" >/dev/null; then echo "still present: $tool" >&2; exit 1; fi
done
echo "${#victims[@]} blocked tool paths removed"
