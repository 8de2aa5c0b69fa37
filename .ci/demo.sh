#!/usr/bin/env bash
# The main job on embedded defaults, all three loss channels live: mine two real SWE tasks
# (historical fixes between consecutive cachetools releases on PyPI, source: release-diff: the
# maintainers' own patch, their tests hidden, their changelog entry as the issue) and build four
# synthetic ones (one-token mutations, source: synthetic-mutation: short fixes the tiny model can
# learn), start a local env server (bwrap sandbox) on loopback, record demonstrations through that
# server (gold-patch edits, lazy submits and a stumble that starts with a failing view, so GRPO
# groups mix rewards and error sites occur) and warm-start the tiny Qwen2 smoke model on them in ONE
# SFT run that also yields two local teachers (its gold-only first stage, saved at two steps), then
# run a short GRPO training run on the CPU against the server: channel 1 GRPO, channel 2 hint
# distillation at the error sites, channel 3 DPO on pairs the replay loop mines while the run goes
# on (the teachers behind `transformers serve` over HTTP; each proposed action executed in a fork
# of the episode and graded by the hidden tests). Then evaluate the policy before and after training as
# an agent on the same tasks (trainer-client evaluate: a report each).
#
# Built once per machine and reused: the tasks (.cache/demo-tasks-v3) and the warm start
# (.cache/demo-warmstart/<key>: the policy and its teachers, keyed by the task file, warmstart.py
# and the recipe). Every phase is timed; the times are printed at the end.
#
# DEMO_WARMSTART=0 trains the random smoke model as it is (it makes no tool calls, no teachers).
# DEMO_OUTPUT_DIR (runs/demo), DEMO_STEPS (8), DEMO_TASKS_DIR, DEMO_CACHE (.cache: where the warm
# start is kept; point it elsewhere to time a fresh one), DEMO_VERIFY (fork).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
# `make setup` installs without compiling (--no-compile): Python writes each module's bytecode the first
# time a program imports it. With PYTHONDONTWRITEBYTECODE set (some shells and images set it), every
# process would compile torch, transformers and TRL again: the suite took 52 min instead of 28 here.
unset PYTHONDONTWRITEBYTECODE
# no per-file "Loading weights" / "Writing model shards" bars between the step lines (the step bar stays)
export HF_HUB_DISABLE_PROGRESS_BARS=1
# transformers' own deprecation notices (gradient_checkpointing -> activation_checkpointing, raised
# inside TRL/transformers, nothing a user of the demo can act on) would bury the demo's output
export PYTHONWARNINGS="ignore::FutureWarning"
# One compute thread per torch process. The demo runs several at once (the trainer, two teachers and
# the evaluated policy behind `transformers serve`, the sandboxes' test runs), and a newcomer's machine
# has other work too: torch's default (a thread per core) then waits at every operation for a thread
# that is not running. The tiny model's operations are too small to gain from a second thread: beside
# one busy loop on 2 cores the evaluation took 144-160 s with 2 threads, 36-49 s with one; at load 5-7
# a warm-start SFT step took 6-9 s with 2 threads, 0.9 s with one.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
BIN=.venv/bin
TASKS_DIR=${DEMO_TASKS_DIR:-.cache/demo-tasks-v3}
OUT=${DEMO_OUTPUT_DIR:-runs/demo}
STEPS=${DEMO_STEPS:-8}
WARMSTART=${DEMO_WARMSTART:-1}
CACHE=${DEMO_CACHE:-.cache}
mkdir -p "$OUT"

# ------------------------------------------------------------------ phase times
T_START=$EPOCHREALTIME
T_PHASE=$T_START
TIMES=()
if [ -n "${DEMO_SETUP_S:-}" ]; then  # the Makefile's `demo` target timed `make setup`
  TIMES+=("$(printf '   %-30s %7.1f s  %s' "install (make setup)" "$DEMO_SETUP_S" "${DEMO_SETUP_NOTE:-}")")
fi
seconds_since() { awk -v a="$EPOCHREALTIME" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }
phase_done() {  # LABEL NOTE: the phase that started at T_PHASE ends now
  TIMES+=("$(printf '   %-30s %7s s  %s' "$1" "$(seconds_since "$T_PHASE")" "${2:-}")")
  T_PHASE=$EPOCHREALTIME
}
# a command's full output to LOG; the lines matching PATTERN (its progress) also on the console
show() {  # LOG PATTERN COMMAND...
  local log=$1 pattern=$2; shift 2
  if ! "$@" 2>&1 | tee -a "$log" | { grep --line-buffered -E "$pattern" || true; } | sed -u 's/^/   /'; then
    echo "   FAILED: $* (last lines of $log:)" >&2
    tail -20 "$log" | sed 's/^/   | /' >&2
    exit 1
  fi
}

# ------------------------------------------------------------------ 1 tasks
if [ -f "$TASKS_DIR/tasks.jsonl" ]; then
  echo "== 1/5 tasks: cached in $TASKS_DIR: 2 real fixes (source: release-diff) mined from consecutive"
  echo "   cachetools releases on PyPI, 4 synthetic bugs (source: synthetic-mutation) in inflection and idna"
  phase_done "1 tasks" "cached"
else
  echo "== 1/5 tasks (a minute or two, once per machine): 2 real fixes (source: release-diff) mined from consecutive"
  echo "   cachetools releases on PyPI (gold patch = the maintainers' change, hidden tests = theirs, issue = their"
  echo "   changelog), and 4 synthetic bugs (source: synthetic-mutation: one-token mutations of inflection and"
  echo "   idna), short enough for the tiny demo model to learn to fix; each task's tests run with and without"
  echo "   its patch (full output: $OUT/tasks.log)"
  : > "$OUT/tasks.log"
  show "$OUT/tasks.log" 'running the suite|\] task |baseline' \
    $BIN/task-factory mine --out "$TASKS_DIR/real" --packages cachetools --max-tasks 2 --min-tasks 2 --max-patch-lines 8
  show "$OUT/tasks.log" 'running the suite|\] task |baseline' \
    $BIN/task-factory build --out "$TASKS_DIR/synthetic" --packages inflection,idna --max-tasks 4 --min-tasks 2
  # one task file for the server: each record's paths are relative to its own folder
  $BIN/python - "$TASKS_DIR" <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
out = []
for part in ("real", "synthetic"):
    for line in (root / part / "tasks.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for key in ("repo_path", "python_env"):
            if rec.get(key):
                rec[key] = f"{part}/{rec[key]}"
        out.append(json.dumps(rec))
(root / "tasks.jsonl").write_text("\n".join(out) + "\n")
PY
  phase_done "1 tasks" "built"
fi

# ------------------------------------------------------------------ 2 env server
PORT=$($BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT"
echo "== 2/5 env server on $URL (bwrap sandbox; log: $OUT/env-server.log)"
# Sandboxes at normal CPU priority (a server's default is idle, docs/deploy.md "CPU priority"): idle
# keeps a busy session from slowing a server's other sessions, and the demo is its only client; where
# normal-priority work (the trainer, `transformers serve`, whatever else the machine runs) takes every
# core, idle sandboxes would get only what it leaves. (Beside one or two busy loops on 2 cores the two
# timed the same here: recording the demonstrations 43-63 s, the evaluation 36-49 s.)
$BIN/env-server serve --host 127.0.0.1 --port "$PORT" --tasks "$TASKS_DIR/tasks.jsonl" --backend bwrap \
  --sandbox-cpu normal --data-dir "$OUT/env-data" --log-level warning > "$OUT/env-server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fsS "$URL/health" >/dev/null 2>&1 && break
  kill -0 $SERVER 2>/dev/null || { cat "$OUT/env-server.log"; exit 1; }
  sleep 0.2
done
curl -fsS "$URL/health" >/dev/null || { echo "env server did not become healthy" >&2; exit 1; }
phase_done "2 env server"

# ------------------------------------------------------------------ 3 warm start
MODEL=()
if [ "$WARMSTART" = 1 ]; then
  # ONE SFT run (trainer_client/warmstart.py): first the gold demonstrations alone (the teachers, saved at
  # TEACHERS steps), then every demonstration for WARM_STEPS more steps (the policy): the model must reproduce
  # each demonstrated edit token for token, and sample gold, stumble and lazy in about equal shares
  WARM_STEPS=100 TEACHERS=100,150
  key=$( { cat "$TASKS_DIR/tasks.jsonl" trainer_client/warmstart.py; echo "$WARM_STEPS $TEACHERS --stumble"; } \
         | sha256sum | cut -c1-12)
  WARM=$CACHE/demo-warmstart/$key
  TEACH1=$WARM/teacher-${TEACHERS%,*} TEACH2=$WARM/teacher-${TEACHERS#*,}
  if [ -f "$WARM/warmstart.json" ]; then
    echo "== 3/5 warm start: cached in $WARM (the policy; teachers in teacher-${TEACHERS%,*}/ and teacher-${TEACHERS#*,}/)"
    phase_done "3 warm start" "cached"
  else
    echo "== 3/5 warm start (about 2 min on 2 cores, once per machine): record demonstrations through the env server"
    echo "   (gold edits, lazy submits, a stumble: a failing view, then the fix), then ONE SFT run: two teachers on"
    echo "   the gold demonstrations alone (steps ${TEACHERS/,/ and }), then the policy on all of them ($WARM_STEPS more steps)"
    echo "   (full output: $OUT/warmstart.log)"
    rm -rf "$WARM"
    : > "$OUT/warmstart.log"
    show "$OUT/warmstart.log" '^\[(warmstart|sft)' \
      $BIN/trainer-client warmstart --config trainer_client/configs/cpu_smoke.yaml --env-url "$URL" \
        --tasks "$TASKS_DIR/tasks.jsonl" --out "$WARM" --steps "$WARM_STEPS" --teachers "$TEACHERS" --stumble
    phase_done "3 warm start" "$($BIN/python -c "import json, sys; s = json.load(open(sys.argv[1]))['seconds']; \
print('built: recording %.0f s, SFT %.0f s' % (s['record'], s['sft']))" "$WARM/warmstart.json")"
  fi
  MODEL=(--set "model.name_or_path=$WARM" --set grpo.max_completion_length=384
         --set loss.pairs.weight=0.5 --set replay.enabled=true --set replay.verify="${DEMO_VERIFY:-fork}"
         --set "replay.local_models=[\"teacher${TEACHERS%,*}=$TEACH1\", \"teacher${TEACHERS#*,}=$TEACH2\"]"
         --set replay.min_agreeing=1 --set replay.states_per_episode=2)
else
  echo "== 3/5 warm start: skipped (DEMO_WARMSTART=0): the random model, no teachers"
  phase_done "3 warm start" "skipped"
fi

# ------------------------------------------------------------------ 4 GRPO training
echo "== 4/5 trainer-client train: $STEPS GRPO steps on the CPU, channels 1-3, one table row per step"
[ "$WARMSTART" = 1 ] && echo "   (the two teachers start behind \`transformers serve\` first; the replay loop asks them in the background)"
mkdir -p "$OUT/env-data/traces" && ls "$OUT/env-data/traces" > "$OUT/.traces-before-train"
# a progress line every 20 s inside a longer step (the default 30 s would leave 30 s and a little quiet)
$BIN/trainer-client train --config trainer_client/configs/cpu_smoke.yaml --env-url "$URL" \
  --tasks "$TASKS_DIR/tasks.jsonl" --output-dir "$OUT/train" --max-steps "$STEPS" --set output.heartbeat_s=20 \
  "${MODEL[@]}"
phase_done "4 GRPO training"
ls "$OUT/env-data/traces" > "$OUT/.traces-after-train"

# ------------------------------------------------------------------ 5 evaluate
EVAL_BEFORE="" EVAL_AFTER=""
if [ "$WARMSTART" = 1 ]; then
  echo "== 5/5 trainer-client evaluate: the policy before and after training, run as an agent on the 6 demo tasks"
  echo "   (2 samples each, served by \`transformers serve\`; these are the training tasks: 6 tasks make no held-out"
  echo "   set, docs/evaluation.md shows one; full output: $OUT/evaluate.log)"
  : > "$OUT/evaluate.log"
  EVAL_BEFORE=$WARM/eval-demo-v2 EVAL_AFTER=$OUT/eval-after
  for which in before after; do
    if [ "$which" = before ]; then
      ckpt=$WARM dest=$EVAL_BEFORE fresh=()  # the warm start's evaluation is kept with it: a rerun runs nothing
      echo "   before training (the warm start):"
      if [ -f "$dest/report.json" ]; then  # nothing left to run: no need to serve the model
        $BIN/python -c "import json, sys; o = json.load(open(sys.argv[1]))['summary']['overall']; \
print('   resolved %d/%d, lost %d (cached); report: %s' % (o['resolved'], o['scored'], o['lost'], sys.argv[2]))" \
          "$dest/report.json" "$dest/report.md"
        continue
      fi
    else
      ckpt=$OUT/train/final dest=$EVAL_AFTER fresh=(--fresh)
      echo "   after $STEPS GRPO steps:"
    fi
    # its progress on the console: the model served (a line every 20 s while it starts), then a line per
    # finished episode (and every 20 s without one), then the result
    show "$OUT/evaluate.log" '^resolved |^\[[0-9]+/[0-9]+\] |served as|^\[serve\] ' $BIN/trainer-client evaluate --model "$ckpt" \
      --env-url "$URL" --tasks "$TASKS_DIR/tasks.jsonl" --samples 2 --concurrency 4 \
      --config trainer_client/configs/cpu_smoke.yaml --out "$dest" "${fresh[@]}"
  done
  phase_done "5 evaluate"
fi

# ------------------------------------------------------------------ what was shown, where to look, times
$BIN/python - "$OUT" "$TASKS_DIR/tasks.jsonl" "$WARMSTART" "$EVAL_BEFORE" "$EVAL_AFTER" <<'PY'
import json, sys
from pathlib import Path

from trainer_client.metrics import step_records

out, tasks_file = Path(sys.argv[1]), Path(sys.argv[2])
source = {r["instance_id"]: r.get("source", "?") for r in map(json.loads, tasks_file.read_text().splitlines())}
names = {"release-diff": "real fixes", "synthetic-mutation": "synthetic bugs"}
before = set((out / ".traces-before-train").read_text().split())
after = set((out / ".traces-after-train").read_text().split())
episodes: dict[str, list[int]] = {}  # source -> [episodes, resolved]
for trace in (out / "env-data" / "traces").glob("*.jsonl"):
    if trace.name in before or trace.name not in after:
        continue  # the warm start's recordings, earlier runs, the evaluation's episodes
    lines = trace.read_text().splitlines()
    head = json.loads(lines[0]) if lines else {}
    if head.get("kind") != "reset" or "fork_of" in head:
        continue  # forks: the replay loop's verification
    last = json.loads(lines[-1])
    counts = episodes.setdefault(source.get(head.get("instance_id"), "?"), [0, 0])
    counts[0] += 1
    counts[1] += (last.get("observation") or {}).get("reward") == 1.0
rows = step_records(out / "train" / "metrics.jsonl")

def at(key):  # the steps where a metric was non-zero
    return [r["step"] for r in rows if r.get(key)]

pairs = [json.loads(l) for l in (out / "train" / "pairs.jsonl").read_text().splitlines()] \
    if (out / "train" / "pairs.jsonl").exists() else []
forked = sum(p["provenance"].get("verification") == "fork" for p in pairs)
missing = []
print("== what the demo showed")
print("   tasks: " + ", ".join(f"{sum(s == k for s in source.values())} {names.get(k, k)} ({k})"
                                for k in sorted(set(source.values()))))
print("   GRPO rollouts resolved (every hidden test passes): " + "; ".join(
    f"{names.get(k, k)} {r}/{n}" for k, (n, r) in sorted(episodes.items())) or "no rollout traced")
for k in sorted(set(source.values())):
    if not episodes.get(k, [0, 0])[1]:
        missing.append(f"no resolved rollout on the {names.get(k, k)}")
def steps_text(steps):  # 1, 2, 3, 5 -> "steps 1-3, 5"
    runs = []
    for s in steps:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return "steps " + ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs) if runs else "no step"

if rows:
    first, last = rows[0], rows[-1]
    print(f"   {len(rows)} GRPO steps: reward {first.get('reward', 0):.3f} at step {first['step']}, "
          f"{last.get('reward', 0):.3f} at step {last['step']}")
    grpo, hints, dpo = at("channels/grpo"), at("channels/hints"), at("channels/pairs")
    sites = sum(r.get("channels/hints/sites", 0) for r in rows)
    per_step = sorted({int(r.get("channels/pairs/used", 0)) for r in rows if r.get("channels/pairs")})
    print(f"   channel 1 grpo:  non-zero at {steps_text(grpo)}")
    print(f"   channel 2 hints: non-zero at {steps_text(hints)} ({sites:g} error site(s) in all)")
    print(f"   channel 3 pairs: non-zero at {steps_text(dpo)}"
          + (f" ({per_step[0]}-{per_step[-1]} pair(s) a step, from {len(pairs)} distinct pair(s))" if per_step else ""))
    for label, steps in (("1 grpo", grpo), ("2 hints", hints), ("3 pairs", dpo)):
        if not steps:
            missing.append(f"channel {label} was zero at every step")
if pairs:
    print(f"   fork-verified pairs: {forked} of {len(pairs)} (the teacher's action and the student's each executed"
          " in a fork of the episode and graded by the hidden tests; the teacher's scored higher)")
if (out / "train" / "pairs.jsonl").exists() and not forked:
    missing.append("no fork-verified pair")
evaluated = {}
for label, folder in (("before training", sys.argv[4]), ("after training", sys.argv[5])):
    report = Path(folder) / "report.json" if folder else None
    if report is not None and report.exists():
        evaluated[label] = json.loads(report.read_text())["summary"]["overall"]
if evaluated:
    print("   evaluated as an agent (trainer-client evaluate, 2 samples per task): " + "; ".join(
        f"{label} {o['resolved']}/{o['scored']} resolved, pass@1 {100 * (o.get('pass@1') or 0):.0f}%"
        + (f", {o['lost']} lost" if o.get("lost") else "") for label, o in evaluated.items()))
    if len(evaluated) == 2:  # say what the numbers support: at 12 samples a difference rarely is one
        (_, a), (_, b) = evaluated.items()
        (a_lo, a_hi), (b_lo, b_hi) = a.get("ci95") or (0, 1), b.get("ci95") or (0, 1)
        if a_lo <= b_hi and b_lo <= a_hi:
            print(f"   the two 95% intervals overlap ({100 * a_lo:.0f}%-{100 * a_hi:.0f}% and {100 * b_lo:.0f}%-"
                  f"{100 * b_hi:.0f}%, {a['scored']} and {b['scored']} samples): no difference can be read at this "
                  "size; it shows that evaluation runs, not what training did (more samples: evaluate --samples N)")
        else:
            print(f"   the two 95% intervals do not overlap ({100 * a_lo:.0f}%-{100 * a_hi:.0f}% and "
                  f"{100 * b_lo:.0f}%-{100 * b_hi:.0f}%)")
if sys.argv[3] != "1":
    print("   (DEMO_WARMSTART=0: the random model makes no tool calls: no rewards, error sites or pairs to expect)")
    missing = []
for m in missing:
    print(f"   NOT shown this run: {m}")
print("== where to look")
for path, what in ((out / "train" / "metrics.jsonl", "every metric per step; the last record is the run summary "
                                                      '("kind": "summary")'),
                   (out / "train" / "metrics.png", "the curves: the three channels in one panel, their inputs in the next"),
                   (out / "train" / "pairs.jsonl", "channel 3's pairs with their provenance (fork rewards, teachers)"),
                   (out / "train" / "samples.jsonl", "one rollout of every step: its tool calls, reward and trace"),
                   (out / "eval-after" / "report.md", "the trained policy's evaluation (the warm start's: "
                                                       + (f"{sys.argv[4]}/report.md)" if sys.argv[4] else "none)")),
                   (out / "env-data" / "traces", "one trace per episode (rollouts, forks, the warm start's recordings)"),
                   (out / "tasks.log", "task-factory's full output"),
                   (out / "warmstart.log", "the warm start's full output"),
                   (out / "env-server.log", "the env server's log")):
    if path.exists():
        print(f"   {str(path):<34} {what}")
PY
rm -f "$OUT/.traces-before-train" "$OUT/.traces-after-train"
echo "== phase times ($(env -u OMP_NUM_THREADS nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%s\n' "${TIMES[@]}"
total=$(awk -v a="$(seconds_since "$T_START")" -v b="${DEMO_SETUP_S:-0}" 'BEGIN { printf "%.1f", a + b }')
t=${total%.*}
printf '   %-30s %7s s  (%d min %02d s)\n' "total" "$total" $((t / 60)) $((t % 60))
