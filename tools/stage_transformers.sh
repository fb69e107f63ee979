#!/usr/bin/env bash
# Pack a trimmed copy of the pure-Python transformers package (5.24 here) for the GPU machine,
# which has transformers 5.17 installed (too old for replayssm_lp.integrations.transformers,
# which needs >= 5.21), no network, and a transfer budget of 64 MiB of which the CuTe DSL
# bundle takes 57.
#
#   tools/stage_transformers.sh [--test]
#
# writes .device/hf/transformers.tar.xz (<= 5 MiB; .device/ is git-ignored and carried to the
# GPU machine). The archive holds one folder, transformers/, with everything the package needs
# to import and run, and of transformers/models/ only `auto` and the model families the
# integration and its tests use (KEEP_MODELS below). Unused top-level parts (CLI, trainer,
# pipelines, exporters, data collators, tests helpers) and every __pycache__ are left out.
# Nothing in the kept files is modified.
#
# On the GPU machine (after `source .device/gpu_env.sh`):
#   mkdir -p /tmp/hf && tar xJf .device/hf/transformers.tar.xz -C /tmp/hf
#   export PYTHONPATH=/tmp/hf:$PYTHONPATH     # first on the path: shadows the installed 5.17
#   python -m pytest -q -rs tests/test_gpu_integration.py
#
# transformers checks the versions of its dependencies when imported
# (dependency_versions_check.py). The script checks those pins against the versions the GPU
# machine has (GPU_VERSIONS below) and stops if one would fail, instead of editing the package.
# For 5.24 they all pass: huggingface-hub >=1.31,<3 (1.33.0), tokenizers >=0.23.1,<0.24
# (0.23.2), safetensors >=0.8.0 (0.8.0), regex >=2025.10.22 (2026.9.3), tqdm >=4.60 (4.70.1),
# numpy >=1.17 (2.5.2), packaging >=20 (26.3), pyyaml >=5.1 (6.0.3), accelerate >=1.1 (1.15),
# python >=3.11 (3.12.3), filelock (any). `typer` (a 5.24 requirement) is only imported by the CLI, which is left out.
#
# --test: unpack the archive into a temporary folder, put it first on PYTHONPATH and run the CPU
# integration tests against it (and check that the copy, not the installed package, was used).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-/work/venv/bin/python}"
[ -x "$PY" ] || PY=python3
SRC="${TRANSFORMERS_SRC:-$("$PY" -c 'import os, transformers; print(os.path.dirname(transformers.__file__))')}"
OUT_DIR="$ROOT/.device/hf"
OUT="$OUT_DIR/transformers.tar.xz"
MAX_BYTES=$((5 * 1024 * 1024))

# model families the integration and its tests use (+ llama and mamba: the refusal tests)
KEEP_MODELS="auto mamba2 nemotron_h qwen3_next qwen3_5 qwen3_5_moe llama mamba"
# top-level parts no import of a causal LM needs
DROP_TOP="cli pipelines exporters data commands trainer.py trainer_callback.py trainer_optimizer.py
trainer_pt_utils.py trainer_seq2seq.py trainer_utils.py training_args.py training_args_seq2seq.py
testing_utils.py modelcard.py debug_utils.py hyperparameter_search.py"
# the GPU machine's versions of the packages transformers checks at import
# (filelock: any version; installed there per .library/device/KINDS.md, version not read)
GPU_VERSIONS="python=3.12.3 tqdm=4.70.1 regex=2026.9.3 packaging=26.3
numpy=2.5.2 tokenizers=0.23.2 huggingface-hub=1.33.0 safetensors=0.8.0 accelerate=1.15.0
pyyaml=6.0.3"

VERSION="$("$PY" -c "import sys; sys.path.insert(0, '$(dirname "$SRC")'); import transformers; print(transformers.__version__)")"
echo "stage_transformers: transformers $VERSION from $SRC"

# 1. the dependency pins of this version against the GPU machine's versions
"$PY" - "$SRC" "$GPU_VERSIONS" <<'PY'
import ast, pathlib, sys
from packaging.requirements import Requirement
src, have = pathlib.Path(sys.argv[1]), dict(kv.split("=") for kv in sys.argv[2].split())
tree = ast.parse((src / "dependency_versions_table.py").read_text())
deps = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign))
chk = ast.parse((src / "dependency_versions_check.py").read_text())
pkgs = next(ast.literal_eval(n.value) for n in chk.body if isinstance(n, ast.Assign)
            and getattr(n.targets[0], "id", "") == "pkgs_to_check_at_runtime")
bad = []
for p in pkgs:
    req = Requirement(deps[p])
    v = have.get(p)
    if v is None:
        print(f"  {p}: needs '{req.specifier or 'any'}' (GPU version not listed: not checked)")
        continue
    ok = req.specifier.contains(v, prereleases=True)
    print(f"  {p}: needs '{req.specifier or 'any'}', GPU has {v}: {'ok' if ok else 'FAILS'}")
    if not ok:
        bad.append(f"{p} {v} vs {req}")
if bad:
    sys.exit("stage_transformers: the import-time dependency check of this transformers would fail "
             "on the GPU machine: " + "; ".join(bad) + ". Stage a version whose pins fit (set "
             "TRANSFORMERS_SRC; 5.24.0 fits: pip download --no-deps transformers==5.24.0 -d /tmp/tf "
             "&& (cd /tmp/tf && unzip -q transformers-5.24.0-py3-none-any.whl 'transformers/*') && "
             "TRANSFORMERS_SRC=/tmp/tf/transformers tools/stage_transformers.sh --test), or stage the "
             "missing package versions as well.")
PY

# 2. trimmed copy
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
DST="$TMP/transformers"
mkdir -p "$DST/models"
( cd "$SRC" && tar cf - --exclude=__pycache__ --exclude='*.pyc' --exclude=./models \
    $(for d in $DROP_TOP; do printf -- '--exclude=./%s ' "$d"; done) . ) | tar xf - -C "$DST"
cp "$SRC/models/__init__.py" "$DST/models/"
for m in $KEEP_MODELS; do
  ( cd "$SRC/models" && tar cf - --exclude=__pycache__ --exclude='*.pyc' --exclude='modular_*.py' "$m" ) \
    | tar xf - -C "$DST/models"
done
mkdir -p "$OUT_DIR"
tar cf - -C "$TMP" transformers | xz -9e -T0 > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
SIZE=$(stat -c %s "$OUT")
echo "stage_transformers: wrote $OUT ($SIZE bytes, $(find "$DST" -name '*.py' | wc -l) .py files)"
if [ "$SIZE" -gt "$MAX_BYTES" ]; then
  echo "stage_transformers: $OUT is larger than 5 MiB" >&2
  exit 1
fi

# 3. optional: the trimmed copy imports and runs the integration tests
if [ "${1:-}" = "--test" ]; then
  T="$TMP/unpack"
  mkdir -p "$T"
  tar xJf "$OUT" -C "$T"
  ( cd "$ROOT" && PYTHONPATH="$T:$ROOT${PYTHONPATH:+:$PYTHONPATH}" CUTE_DSL_ARCH=sm_90a "$PY" - "$T" <<'PY'
import sys, transformers
assert transformers.__file__.startswith(sys.argv[1]), transformers.__file__
for n in ("Mamba2ForCausalLM", "NemotronHForCausalLM", "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM",
          "Qwen3_5MoeForCausalLM", "StaticCache", "AutoModelForCausalLM"):
    getattr(transformers, n)
print("stage_transformers: the trimmed copy imports:", transformers.__version__, transformers.__file__)
PY
  )
  ( cd "$ROOT" && PYTHONPATH="$T:$ROOT${PYTHONPATH:+:$PYTHONPATH}" CUTE_DSL_ARCH=sm_90a \
      "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_transformers_integration.py \
      tests/test_gpu_integration.py )
fi
