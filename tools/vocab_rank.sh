#!/bin/sh
# vocab_rank.sh - recreate models/qwen3-tokenizer/vocab_rank.txt, the Qwen3
# draft-vocabulary ranking --draft-vocab freq:N reads (bench/NOTES.md, "The
# draft's vocabulary").
#
# Corpus (the "A" halves; the "B" halves are held out for measuring):
#   prose: npm nlp-corpus@4.4.0 (100,000 English sentences), shuffled with
#          a fixed LCG (seed 1), the first 50,000;
#   code:  this machine's Python standard library (/usr/lib/python3.11/**/*.py,
#          tests excluded) and C headers (/usr/include/*.h, sys/, bits/),
#          sorted by path, every other file;
# minus every file that defines a function a held-out code prompt
# (bench/prompts/code.jsonl) asks for, so the prompt sets stay held out.
# Needs npm and node (for the JSON sentences) and a built ./dflash.
# Usage: sh tools/vocab_rank.sh OUT_DIR   (writes OUT_DIR/vocab_rank.txt and the halves)
set -e
out=${1:?usage: tools/vocab_rank.sh OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cd "$out"
[ -f nlp-corpus-4.4.0.tgz ] || npm pack nlp-corpus@4.4.0 >/dev/null
tar xzf nlp-corpus-4.4.0.tgz package/builds
node -e '
const fs=require("fs");let s=[];for(const f of fs.readdirSync("package/builds")) if(/^doc-\d+\.json$/.test(f)) s=s.concat(JSON.parse(fs.readFileSync("package/builds/"+f)));
let x=1;function r(){x=(x*1103515245+12345)%2147483648;return x/2147483648;}
for(let i=s.length-1;i>0;i--){const j=Math.floor(r()*(i+1));[s[i],s[j]]=[s[j],s[i]];}
const h=s.length>>1;fs.writeFileSync("prose_A.txt",s.slice(0,h).join("\n")+"\n");fs.writeFileSync("prose_B.txt",s.slice(h).join("\n")+"\n");'
# the function names the held-out code prompts ask for
node -e '
const fs=require("fs");const L=fs.readFileSync(process.argv[1],"utf8").split("\n").filter(x=>x.trim());
let n=[];for(const l of L){const p=JSON.parse(l).prompt;let m=p.match(/function `([\w.]+)/);if(m){n.push(m[1].split(".").pop());continue;}
m=p.match(/```\w*\n[\s\S]*?(\w+)\s*\(/);if(m)n.push(m[1]);}
fs.writeFileSync("names.txt",n.join("\n")+"\n");' "$root/bench/prompts/code.jsonl"
find /usr/lib/python3.11 -name "*.py" -not -path "*/test/*" -not -path "*__pycache__*" | sort >py_all.txt
grep -lE "def ($(paste -sd'|' names.txt))\(" $(cat py_all.txt) >py_held.txt || true
grep -vxFf py_held.txt py_all.txt >py_clean.txt
ls /usr/include/*.h /usr/include/x86_64-linux-gnu/sys/*.h /usr/include/x86_64-linux-gnu/bits/*.h >h_all.txt
grep -lE "\b($(paste -sd'|' names.txt))\b *\(" $(cat h_all.txt) >h_held.txt || true
grep -vxFf h_held.txt h_all.txt >h_clean.txt
awk 'NR%2==1' py_clean.txt | xargs cat >code_A.txt
awk 'NR%2==0' py_clean.txt | xargs cat >code_B.txt
awk 'NR%2==1' h_clean.txt | xargs cat >c_A.txt
awk 'NR%2==0' h_clean.txt | xargs cat >c_B.txt
"$root/dflash" vocab-rank -m "$root/models/demo/target" -o vocab_rank.txt prose_A.txt code_A.txt c_A.txt
