#!/usr/bin/env bash
# Downloads Tiny Shakespeare (the 1,115,394 bytes of plays from Andrej Karpathy's char-rnn
# repository, the text nanoGPT and many tutorials start from) to data/tinyshakespeare.txt, or OUT,
# and checks its SHA-256. A download that does not match is removed, not kept.
#
#   data/get-tinyshakespeare.sh [OUT]
#
# TINYSHAKESPEARE_URL takes it from elsewhere (a mirror, or file:///path of a copy); the check is
# the same.
set -euo pipefail
url=${TINYSHAKESPEARE_URL:-https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt}
want=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
out=${1:-$(dirname "$0")/tinyshakespeare.txt}
if [ -f "$out" ] && [ "$(sha256sum <"$out" | cut -d' ' -f1)" = "$want" ]; then
  echo "$out: already here, SHA-256 verified"
  exit 0
fi
command -v curl >/dev/null || { echo "get-tinyshakespeare: curl is missing: apt-get install curl" >&2; exit 1; }
part=$out.part
if ! curl -fsSL --retry 3 -o "$part" "$url"; then
  rm -f "$part"
  echo "get-tinyshakespeare: cannot download $url (no network here? set TINYSHAKESPEARE_URL to a mirror or a copy)" >&2
  exit 1
fi
got=$(sha256sum <"$part" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  rm -f "$part"
  echo "get-tinyshakespeare: $url has SHA-256 $got, not $want: not the expected text; removed it" >&2
  exit 1
fi
mv "$part" "$out"
echo "$out: $(wc -c <"$out") bytes, SHA-256 verified"
