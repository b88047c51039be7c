#!/usr/bin/env bash
# One short GPU check: decoding speed in fp32, bf16 and fp16 (ours against transformers, same weights),
# then a few hundred steps of training the paper's base model in bf16 (tokens/s, peak memory).
# Usage: bash benchmarks/gpu_check.sh [OUT_DIR]     (needs CUDA; nothing is downloaded)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"

for dtype in float32 bfloat16 float16; do
    echo "== decode base, $dtype"
    python3 benchmarks/decode.py --shape base --device cuda --dtype "$dtype" --engines ours,transformers \
        --sentences 256 --batch-size 64 --repeats 2 --json "$OUT/decode-$dtype.json" | tail -6
done

echo "== continuous beam search on CUDA: sentences joining mid-search equal their search alone (float32)"
python3 benchmarks/continuous_check.py --device cuda

echo "== serve base on CUDA (bf16): continuous batching with up to 256 texts, forced 32-token outputs"
python3 benchmarks/serve.py --device cuda --shape base --clients 64,256 --batch-size 256 --requests-per-client 4 \
    --no-batch-1 --out-tokens 32 --json "$OUT/serve.json" | tail -8

echo "== serve base on CUDA with the embedded queue's worker in a child process (TRANSFORMER_WORKER_PROCESSES=true)"
TRANSFORMER_WORKER_PROCESSES=true python3 benchmarks/serve.py --device cuda --shape base --clients 64 \
    --batch-size 256 --requests-per-client 4 --no-batch-1 --out-tokens 32 | tail -4

echo "== train base, bf16"
python3 - "$OUT/train-corpus.jsonl" <<'PY'
import json, random, sys
rng = random.Random(0)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(6000)]
with open(sys.argv[1], "w") as f:
    for _ in range(60000):
        src = [rng.choice(words) for _ in range(rng.randint(8, 40))]
        f.write(json.dumps({"source": " ".join(src), "target": " ".join(reversed(src))}) + "\n")
PY
python3 -m service.cli train run_dir="$OUT/run-base" preset=base data.corpus=jsonl "data.paths=[$OUT/train-corpus.jsonl]" \
    vocab.size=8000 split.dev=0.002 split.test=0.002 split.max_dev=64 split.max_test=64 \
    batch_tokens=12500 accumulate=2 max_steps=300 log_every=50 eval_every=100000 save_every=100000 \
    device=cuda dtype=bfloat16 progress=false
grep '"loss"' "$OUT/run-base/metrics.jsonl" | tail -3

echo "== documents on CUDA: sentences, kept spans and inline tags placed by the word alignment (the base run)"
best=$(ls -d "$OUT/run-base/best" "$OUT/run-base/checkpoints/"* 2>/dev/null | head -1)
python3 benchmarks/html_tags.py --model "$best" --jsonl "$OUT/run-base/data/test.jsonl" --device cuda

echo "== files on CUDA: a text file and a Markdown file through transformer translate --file (the base run)"
head -c 200000 "$OUT/train-corpus.jsonl" | python3 -c "import json,sys; [print(json.loads(l)['source']) for l in sys.stdin if l.endswith('}\n')]" > "$OUT/file.txt"
printf '# %s\n\nSome **%s** words, a [link](http://x.org) and `code`.\n' "$(head -1 "$OUT/file.txt")" "$(sed -n 2p "$OUT/file.txt")" > "$OUT/file.md"
for f in file.txt file.md; do
    python3 -m service.cli translate --model "$best" --device cuda --file "$OUT/$f" --out "$OUT/out-$f" 2>&1 | tail -1
done
test "$(wc -l < "$OUT/out-file.txt")" = "$(wc -l < "$OUT/file.txt")" && grep -q '\*\*' "$OUT/out-file.md" && echo "files: structure kept"
