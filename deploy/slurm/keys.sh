# shellcheck shell=bash
# make_keys BUILD DIR IDS: the CURVE keys of a fleet in DIR, in diloco-ctl keys' layout
# (server.secret/.public, worker-ID.secret/.public, authorized_keys; docs/security.md). Keys
# already in DIR are kept (a restarted job reuses them); ids of IDS (comma-separated) missing
# from DIR are added. diloco-keygen makes the same layout where diloco-ctl has no keys command.
make_keys() {
  local build=$1 dir=$2 ids=$3 ctl=$1/ctl/diloco-ctl id usage
  [[ $ids =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "keys: bad worker ids '$ids'" >&2; return 1; }
  # The usage text, read whole: diloco-ctl without a command exits 2, which under pipefail made
  # a `diloco-ctl | grep -q` test false whatever it printed.
  usage=$("$ctl" 2>&1 || true)
  if [[ $usage == *"diloco-ctl keys --out"* ]]; then
    if [[ ! -s $dir/server.secret ]]; then
      "$ctl" keys --out="$dir" --worker_ids="$ids" >/dev/null || return 1
    fi
    for id in ${ids//,/ }; do
      [[ -s $dir/worker-$id.secret ]] || "$ctl" keys --out="$dir" --add="$id" >/dev/null ||
        return 1
    done
  else
    local gen=$build/schema/diloco-keygen
    [[ -x $gen ]] || { echo "keys: neither diloco-ctl keys nor $gen" >&2; return 1; }
    mkdir -p "$dir"
    chmod 700 "$dir"
    [[ -s $dir/server.secret ]] || "$gen" --out="$dir/server" >/dev/null || return 1
    for id in ${ids//,/ }; do
      [[ -s $dir/worker-$id.secret ]] && continue
      "$gen" --out="$dir/worker-$id" --worker_id="$id" >>"$dir/authorized_keys" || return 1
    done
  fi
  [[ -s $dir/server.public && -s $dir/authorized_keys ]]
}
