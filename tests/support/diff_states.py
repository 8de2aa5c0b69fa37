"""The workspace states an agent's shell can leave that the diff must read (issue 33, guarantee 4):
shared by tests/sandbox/test_diff_states.py (sandbox level) and tests/env_server/test_workspace_blame.py
(through the episode)."""

FIX = "echo '# the fix' >> pkg/core.py"

# name -> (shell command making the state, a part of the workspace it must leave out with its reason)
STATES = {
    "embedded repository without a commit": (
        "git init -q vendor/empty && echo v > vendor/empty/f", "vendor/empty (an embedded repository"),
    "embedded repository with a commit": (
        "git init -q vendor/full && echo v > vendor/full/f && git -C vendor/full add f && "
        "git -C vendor/full -c user.name=a -c user.email=a@a commit -qm x", "vendor/full (an embedded repository"),
    "submodule-like gitlink": (
        "printf '[submodule \"m\"]\\n\\tpath = vendor/sub\\n\\turl = ../x\\n\\tupdate = !touch /tmp/pwned\\n' "
        "> .gitmodules && mkdir -p vendor/sub && printf 'gitdir: ../../.git\\n' > vendor/sub/.git && "
        "echo s > vendor/sub/s", "vendor/sub (an embedded repository"),
    ".git file naming a FIFO": (
        "mkfifo /tmp/gitdir-fifo && mkdir -p lib/a && echo y > lib/a/y && printf 'gitdir: /tmp/gitdir-fifo\\n' "
        "> lib/a/.git", "lib/a (an embedded repository"),
    ".git dir whose HEAD is a FIFO": (
        "mkdir -p lib/b/.git/objects lib/b/.git/refs && mkfifo lib/b/.git/HEAD && echo y > lib/b/y",
        "lib/b (an embedded repository"),
    ".git named with other case": ("mkdir -p .GIT && echo c > .GIT/config", ".GIT (named like .git)"),
    "unreadable file": ("echo junk > junk.txt && chmod 000 junk.txt", "junk.txt (unreadable file)"),
    "unreadable directory": ("mkdir locked && echo q > locked/q && chmod 000 locked", "locked (unreadable directory)"),
    "FIFO": ("mkfifo a-fifo", "a-fifo (a FIFO)"),
    "socket": ("python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('a-socket')\"", "a-socket (a socket)"),
    "FIFO .gitignore below the top": (
        "mkdir -p blocked && echo z > blocked/z && mkfifo blocked/.gitignore", "blocked (its .gitignore is a FIFO)"),
    "symlinked .gitattributes to a FIFO below the top": (
        "mkdir -p linked && echo z > linked/z && mkfifo /tmp/attr-fifo && ln -s /tmp/attr-fifo linked/.gitattributes",
        "linked (its .gitattributes is a symbolic link to a FIFO)"),
    "path past PATH_MAX": (
        "python3 -c \"import os\nfor i in range(160):\n os.mkdir('d' * 40); os.chdir('d' * 40)\nopen('deep', 'w')"
        ".write('deep')\"", "(its path is over 3800 bytes)"),
    "huge untracked file": ("head -c 20000000 /dev/urandom > huge.bin", "huge.bin (an untracked file over the"),
}

# states the diff holds as ordinary content: (command, text the diff must show)
HELD = {
    "working-tree-encoding, filters, eol, diff drivers": (
        "printf '* working-tree-encoding=UTF-16 filter=lfs diff=evil eol=crlf ident\\n' > .gitattributes && "
        "printf 'not utf-16 \\377\\n$Id$\\r\\n' > enc.txt && git config filter.lfs.required true && "
        "git config filter.lfs.clean false && git config diff.evil.textconv false", "+++ b/enc.txt"),
    "names with a newline and bytes that are not UTF-8": (
        "printf x > \"$(printf 'new\\nline')\" && printf y > \"$(printf 'bad\\377name')\"", "new\\nline"),
    "binary file": ("head -c 3000 /dev/urandom > small.bin", "small.bin"),
    "the workspace's .git replaced by a file": ("rm -rf .git && printf 'gitdir: /tmp/nowhere\\n' > .git", None),
}
