#!/usr/bin/env bash
# heartbeat.sh LABEL DIR COMMAND...: run COMMAND; while it runs, a line every HEARTBEAT_S seconds
# (default 20) with LABEL, the time so far and DIR's size, so a quiet command (`pip install -q` spends
# minutes unpacking and compiling on a busy machine without a word) never leaves the console silent
# for long, on a terminal, a pipe or a log file alike. Exits with COMMAND's status.
set -uo pipefail
label=$1 dir=$2
shift 2
every=${HEARTBEAT_S:-20}
start=$SECONDS
"$@" &
cmd=$!
trap 'kill "$cmd" 2>/dev/null; exit 130' INT TERM  # a background command would ignore a Ctrl-C
next=$((start + every))
while kill -0 "$cmd" 2>/dev/null; do
  sleep 0.5
  if [ "$SECONDS" -ge "$next" ] && kill -0 "$cmd" 2>/dev/null; then
    size=$(du -sm "$dir" 2>/dev/null | cut -f1)
    echo "   $label: still running, $((SECONDS - start)) s${size:+, $dir holds $size MB}"
    next=$((SECONDS + every))
  fi
done
wait "$cmd"
