#!/usr/bin/env bash
# Prints the path of a CPython 3.10 interpreter, or explains where to get one.
# dm-launchpad 0.5 ships wheels only for CPython <= 3.10 and needs TF 2.8, so 3.10 it is.
set -u
is310() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 10) else 1)' 2>/dev/null; }
candidates=()
[ -n "${PYTHON310:-}" ] && candidates+=("$PYTHON310")
candidates+=("$(command -v python3.10 2>/dev/null || true)")
root="${PYENV_ROOT:-}"
[ -z "$root" ] && command -v pyenv >/dev/null 2>&1 && root="$(pyenv root)"
[ -z "$root" ] && root="$HOME/.pyenv"
for p in $(ls -d "$root"/versions/3.10.*/bin/python3.10 2>/dev/null | sort -V -r); do candidates+=("$p"); done
candidates+=(/usr/bin/python3.10 /usr/local/bin/python3.10)
for c in "${candidates[@]}"; do
  if [ -n "$c" ] && [ -x "$c" ] && is310 "$c"; then echo "$c"; exit 0; fi
done
cat >&2 <<'MSG'
error: no CPython 3.10 found.
Tandem needs CPython 3.10 exactly (dm-launchpad 0.5 has wheels only for <= 3.10; TF 2.8 needs <= 3.10).
Looked at: $PYTHON310, python3.10 on PATH, $(pyenv root)/versions/3.10.*, /usr/bin, /usr/local/bin.
Install one, e.g. `pyenv install 3.10.13`, or set PYTHON310=/path/to/python3.10.
MSG
exit 1
