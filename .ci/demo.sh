#!/usr/bin/env bash
# The main job on embedded defaults: build a few real SWE tasks from PyPI sdists,
# start a local env server (bwrap sandbox) on loopback, and run a short GRPO
# training run on the CPU against it (tiny Qwen2 + the real Qwen2 tokenizer).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
BIN=.venv/bin
TASKS_DIR=${DEMO_TASKS_DIR:-.cache/demo-tasks}
OUT=${DEMO_OUTPUT_DIR:-runs/demo}
STEPS=${DEMO_STEPS:-3}

echo "== 1/3 tasks: real bug-fix tasks from PyPI source distributions (cached after the first run)"
$BIN/env-server tasks build --out "$TASKS_DIR" --packages inflection,idna --max-tasks 4 --min-tasks 2 --quiet
PORT=$($BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT"

echo "== 2/3 env server on $URL (bwrap sandbox)"
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

echo "== 3/3 trainer-client train: $STEPS GRPO steps on the CPU"
$BIN/trainer-client train --config trainer_client/configs/cpu_smoke.yaml --env-url "$URL" \
  --tasks "$TASKS_DIR/tasks.jsonl" --output-dir "$OUT/train" --max-steps "$STEPS"
echo "== done: metrics in $OUT/train/metrics.jsonl, plot in $OUT/train/metrics.png, traces in $OUT/env-data"
