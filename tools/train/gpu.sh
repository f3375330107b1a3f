#!/bin/sh
# Drive tools/train/pipeline.py on the GPU machine across several `run` calls.
#   sh tools/train/gpu.sh start [pipeline args]  copy code+data to $W, launch the
#                                                pipeline in its own session, then wait
#   sh tools/train/gpu.sh wait                   wait (<= ~9.5 min) for it
# BUNDLE names the corpus bundle (default .dev/train_bundle/corpus.tar.xz; a
# draft-only run can use the prompts-only bundle, see docs/demo-models.md).
# Both end by printing the log tail; once the pipeline is done they pack the
# results (models, logs) into $OUT. Stages resume, so `start` after a failure
# continues where it stopped (delete $W/... outputs to redo a stage).
W=${W:-/root/dfl}
limit=${LIMIT:-560}
if [ "$1" = start ]; then
    shift
    mkdir -p "$W/src/tools" "$W/src/models" "$W/src/bench"
    rm -rf "$W/src/tools/train" "$W/src/tools/reference"
    cp -r tools/train tools/reference "$W/src/tools/" 2>/dev/null || cp -r tools/train "$W/src/tools/"
    # the tokenizer and the demo weights are committed as .xz (Makefile: UNPACKED)
    make -s DFLASH_NO_DEPS=1 unpack || exit 1
    cp -r models/qwen3-tokenizer "$W/src/models/"
    cp -r bench/prompts "$W/src/bench/"
    [ -d models/demo ] && cp -r models/demo "$W/src/models/"  # for --target-dir / --init-draft
    [ -f "$W/corpus.tar.xz" ] || cp "${BUNDLE:-.dev/train_bundle/corpus.tar.xz}" "$W/corpus.tar.xz"
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
    rm -f "$W/DONE" "$W/FAILED"
    (cd "$W/src" && PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true setsid python3 tools/train/pipeline.py \
        --work "$W" --bundle "$W/corpus.tar.xz" "$@" >> "$W/log.txt" 2>&1 < /dev/null &)
    sleep 5
fi
t0=$(date +%s)
while [ ! -f "$W/DONE" ] && [ ! -f "$W/FAILED" ] && [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do
    sleep 3
done
tail -c 7000 "$W/log.txt"
if [ -n "${OUT:-}" ]; then
    (cd "$W/src" && python3 tools/train/pipeline.py --work "$W" --stages pack --out "$OUT")
    cp "$W/log.txt" "$OUT/log.txt" 2>/dev/null
fi
[ -f "$W/FAILED" ] && { echo PIPELINE FAILED; exit 1; }
exit 0
