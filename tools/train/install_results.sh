#!/bin/sh
# Install what `sh tools/train/gpu.sh ...` sent back (the run tool's files_at
# folder: target.st.part*, draft.safetensors, meta.tar.xz, log.txt) as the demo
# pair and its card material:
#   sh tools/train/install_results.sh FILES_AT
# -> models/demo/target/ (MLX 4-bit target, tokenizer links), models/demo/draft/
#    (model.safetensors and the model.safetensors.xz git tracks),
#    docs/demo-models/ (loss CSVs and SVG plots, eval results, token counts).
set -eu
src=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
tmp=$(mktemp -d)
tar xJf "$src/meta.tar.xz" -C "$tmp"
t="$root/models/demo/target"
d="$root/models/demo/draft"
mkdir -p "$t" "$d" "$root/docs/demo-models"
cat "$src"/target.st.part* > "$t/model.safetensors"
want=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['sha_target'])" "$tmp/logs/train_info.json")
got=$(sha256sum "$t/model.safetensors" | cut -d' ' -f1)
[ "$want" = "$got" ] || { echo "install_results: target sha256 mismatch" >&2; exit 1; }
cp "$tmp/models/target/config.json" "$tmp/models/target/generation_config.json" "$t/"
ln -sf ../../qwen3-tokenizer/tokenizer.json "$t/tokenizer.json"
ln -sf ../../qwen3-tokenizer/tokenizer_config.json "$t/tokenizer_config.json"
cp "$src/draft.safetensors" "$d/model.safetensors"
cp "$tmp/models/draft/config.json" "$d/"
chmod 644 "$t"/*.json "$t/model.safetensors" "$d"/*
# git tracks the weights as .xz (Makefile: UNPACKED); -k keeps the plain files
xz -9e -k -f -T1 "$t/model.safetensors" "$d/model.safetensors"
o="$root/docs/demo-models"
for f in target_loss.csv draft_loss.csv gen_samples.txt hf_parity.json; do
    [ -f "$tmp/logs/$f" ] && cp "$tmp/logs/$f" "$o/"
done
if grep -q '"target"' "$tmp/logs/train_info.json"; then # a run that trained the target
    cp "$tmp/logs/train_info.json" "$o/"
    cp "$tmp/tok/stats.json" "$o/token_counts.json"
else # a draft-only run (--target-dir): keep the target's records, file the draft as a new stage
    $py - "$tmp/logs/train_info.json" "$o/train_info.json" <<'EOF2'
import json, os, sys
new = json.load(open(sys.argv[1]))
out = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else {}
n = 1
while f"draft_stage{n}" in out:
    n += 1
if "draft" in out:
    out[f"draft_stage{n}"] = out["draft"]
out["draft"] = dict(new["draft"], note="continued from the previous stage (--target-dir, --init-draft)")
out["sha_target"] = new["sha_target"]
json.dump(out, open(sys.argv[2], "w"), indent=1)
EOF2
fi
$py - "$tmp/logs/eval.json" "$o/eval.json" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))
keep = ("domain", "prompt", "prompt_ids", "greedy", "identical", "tau", "rounds")
out = {k: e[k] for k in ("max_new", "block_size", "domains", "seconds")}
out["note"] = ("tools/train/pipeline.py stage eval: fp32 dequantized target, greedy by full recompute "
               "vs the DFlash loop of spec 3.2; tau = mean(a+1) per prompt, then mean over prompts")
out["per_prompt"] = [{k: p[k] for k in keep} for p in e["per_prompt"]]
json.dump(out, open(sys.argv[2], "w"), separators=(",", ":"))
EOF
p="$root/tools/train/plot_loss.py"
qat=$($py -c "import csv,sys; r=[x for x in csv.DictReader(open(sys.argv[1])) if x['qat']=='1']; print(r[0]['step'] if r else '-')" "$o/target_loss.csv")
$py "$p" "$o/target_loss.csv" "$o/target_loss.svg" step loss "Demo target: training loss per batch (16 x 1024 tokens); 4-bit QAT from step $qat"
$py "$p" "$o/draft_loss.csv" "$o/draft_loss.svg" step loss "Demo draft: weighted block loss (gamma 7), from step 25" 25
$py "$p" "$o/draft_loss.csv" "$o/draft_acc.svg" step acc_k1,acc_all "Demo draft: top-1 accuracy (slot 1, all slots)"
rm -rf "$tmp"
ls -l "$t" "$d"
