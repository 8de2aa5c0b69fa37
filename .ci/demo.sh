#!/usr/bin/env bash
# The main job on embedded defaults, all three loss channels live: mine two real SWE tasks
# (historical fixes between consecutive cachetools releases on PyPI, source: release-diff: the
# maintainers' own patch, their tests hidden, their changelog entry as the issue) and build four
# synthetic ones (one-token mutations, source: synthetic-mutation: short fixes the tiny model can
# learn), start a local env server (bwrap sandbox) on loopback, warm-start the tiny Qwen2 smoke
# model on demonstrations recorded through that server (gold-patch edits, lazy submits and a
# stumble that starts with a failing view, so GRPO groups mix rewards and error sites occur;
# cached), fine-tune two local teachers (gold demonstrations only, two training stages; cached),
# and run a short GRPO training run on the CPU against the server: channel 1 GRPO, channel 2
# hint distillation at the error sites, channel 3 DPO on pairs the replay loop mines while the
# run goes on (the teachers behind `transformers serve` over HTTP; each proposed action executed
# in a fork of the episode and graded by the hidden tests).
# DEMO_WARMSTART=0 trains the random smoke model as it is (it makes no tool calls, no teachers).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
# no per-file "Loading weights" / "Writing model shards" bars between the step lines (the step bar stays)
export HF_HUB_DISABLE_PROGRESS_BARS=1
# transformers' own deprecation notices (gradient_checkpointing -> activation_checkpointing, raised
# inside TRL/transformers, nothing a user of the demo can act on) would bury the demo's output
export PYTHONWARNINGS="ignore::FutureWarning"
BIN=.venv/bin
TASKS_DIR=${DEMO_TASKS_DIR:-.cache/demo-tasks-v2}
OUT=${DEMO_OUTPUT_DIR:-runs/demo}
STEPS=${DEMO_STEPS:-8}
WARMSTART=${DEMO_WARMSTART:-1}

echo "== 1/5 tasks (cached): 2 real fixes (source: release-diff) mined from consecutive cachetools releases"
echo "   on PyPI (gold patch = the maintainers' change, hidden tests = theirs, issue = their changelog),"
echo "   and 4 synthetic bugs (source: synthetic-mutation: one-token mutations of inflection and idna),"
echo "   short enough for the tiny demo model to learn to fix"
$BIN/task-factory mine --out "$TASKS_DIR/real" --packages cachetools --max-tasks 2 --min-tasks 2 \
  --max-patch-lines 8 --quiet
$BIN/task-factory build --out "$TASKS_DIR/synthetic" --packages inflection,idna --max-tasks 4 --min-tasks 2 \
  --quiet
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
PORT=$($BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT"

echo "== 2/5 env server on $URL (bwrap sandbox)"
mkdir -p "$OUT"
$BIN/env-server serve --host 127.0.0.1 --port "$PORT" --tasks "$TASKS_DIR/tasks.jsonl" --backend bwrap \
  --data-dir "$OUT/env-data" --log-level warning > "$OUT/env-server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fsS "$URL/health" >/dev/null 2>&1 && break
  kill -0 $SERVER 2>/dev/null || { cat "$OUT/env-server.log"; exit 1; }
  sleep 0.2
done
curl -fsS "$URL/health" >/dev/null || { echo "env server did not become healthy" >&2; exit 1; }

MODEL=()
if [ "$WARMSTART" = 1 ]; then
  # cached per task set and recipe (a fresh SFT takes a minute or two on 2 cores)
  WARM_STEPS=300  # full-batch SFT steps: the model must reproduce each demonstrated edit token for token
  # one cached SFT per task set and recipe: warmstart NAME EXTRA-FLAGS...
  warmstart() {
    local name=$1; shift
    local key dir
    key=$( { cat "$TASKS_DIR/tasks.jsonl" trainer_client/warmstart.py; echo "$WARM_STEPS $*"; } | sha256sum | cut -c1-12)
    dir=.cache/demo-$name/$key
    if [ ! -f "$dir/warmstart.json" ]; then
      rm -rf "$dir.tmp"
      $BIN/trainer-client warmstart --config trainer_client/configs/cpu_smoke.yaml --env-url "$URL" \
        --tasks "$TASKS_DIR/tasks.jsonl" --out "$dir.tmp" --steps "$WARM_STEPS" "$@" > "$OUT/$name.log" 2>&1 \
        || { tail -20 "$OUT/$name.log"; exit 1; }
      mv "$dir.tmp" "$dir"
    fi
    echo "$dir"
  }
  echo "== 3/5 warm start (cached): SFT on gold edits, lazy submits and a stumble (a failing view, then the fix)"
  WARM=$(warmstart warmstart --stumble)
  echo "   policy: $WARM"
  echo "== 4/5 local teachers (cached): SFT on gold demonstrations only; two training stages (150 and 300 steps)"
  TEACH=$(warmstart teachers --no-lazy --stages 150)
  echo "   teachers: $TEACH/stage-150 and $TEACH, served by \`transformers serve\` on loopback during training"
  MODEL=(--set "model.name_or_path=$WARM" --set grpo.max_completion_length=384
         --set loss.beta=0.5 --set replay.enabled=true --set replay.verify="${DEMO_VERIFY:-fork}"
         --set "replay.local_models=[\"stage150=$TEACH/stage-150\", \"stage300=$TEACH\"]" --set replay.min_agreeing=1
         --set replay.states_per_episode=2)
else
  echo "== 3/5 warm start: skipped (DEMO_WARMSTART=0); 4/5 no teachers"
fi

echo "== 5/5 trainer-client train: $STEPS GRPO steps on the CPU, channels 1-3 (per step: each channel's loss and inputs)"
$BIN/trainer-client train --config trainer_client/configs/cpu_smoke.yaml --env-url "$URL" \
  --tasks "$TASKS_DIR/tasks.jsonl" --output-dir "$OUT/train" --max-steps "$STEPS" "${MODEL[@]}"
echo "== done: metrics in $OUT/train/metrics.jsonl, plot in $OUT/train/metrics.png, traces in $OUT/env-data,"
echo "   the pairs channel 3 trained on, with their provenance, in $OUT/train/pairs.jsonl"
