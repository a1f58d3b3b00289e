#!/usr/bin/env bash
# A few GRPO steps on a single-GPU machine, within about 10 minutes (configs/single-gpu.yaml: vLLM
# colocated with the trainer on the one GPU). Without a GPU it runs configs/tiny-cpu.yaml instead,
# through the same code path (Ray actors, rollouts, GRPO), in about a minute.
#
#   MODEL=/models/Qwen3-1.7B scripts/train_single_gpu.sh     # GPU machine, local weights
#   scripts/train_single_gpu.sh                              # CPU: tiny model built locally
#
# Environment: CONFIG (a training YAML), MODEL (model folder or hub id), STEPS, OUTPUT (run folder),
# AWM_HOME (artifact store; default <project>/.awm_home), CORPUS (an AWM JSONL folder imported when the
# store has no catalog yet, e.g. ../shared/awm-corpus/generated), RAY_ADDRESS (join a cluster), PYTHON.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
export AWM_HOME="${AWM_HOME:-$ROOT/.awm_home}"
export TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
[ -n "${RAY_ADDRESS:-}" ] || export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"

if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  CONFIG="${CONFIG:-$ROOT/configs/single-gpu.yaml}"
  echo "GPU: $("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))'); config $CONFIG"
else
  CONFIG="${CONFIG:-$ROOT/configs/tiny-cpu.yaml}"
  export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"  # the tiny model is built locally: nothing to download
  echo "no GPU visible: running $CONFIG on CPU"
fi

if [ ! -f "$AWM_HOME/catalog.json" ]; then
  if [ -z "${CORPUS:-}" ]; then
    echo "no environment catalog in $AWM_HOME: set CORPUS=<AWM JSONL folder> to import one, or materialize" \
         "environment_catalog in Dagster first" >&2
    exit 2
  fi
  echo "importing $CORPUS into $AWM_HOME and materializing environment_catalog"
  "$PY" -m awm_assets.cli import "$CORPUS" --no-dagster >/dev/null
  "$PY" - <<'PYEOF'
import dagster as dg
from awm_assets.defs.catalog.catalog_asset import environment_catalog
from awm_resources.store_resource import StoreResource
result = dg.materialize([environment_catalog], resources={"store": StoreResource()})
assert result.success, "environment_catalog failed"
PYEOF
fi

ARGS=(--config "$CONFIG")
[ -n "${MODEL:-}" ] && ARGS+=(--model "$MODEL")
[ -n "${STEPS:-}" ] && ARGS+=(--steps "$STEPS")
[ -n "${OUTPUT:-}" ] && ARGS+=(--output "$OUTPUT")
exec "$PY" -m awm_assets.cli train "${ARGS[@]}"
