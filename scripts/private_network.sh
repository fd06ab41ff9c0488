#!/bin/sh
# Runs a command in a network namespace of its own, with only its loopback
# interface up, so no server it starts can be reached from outside it and
# nothing it sends leaves it:
#
#     scripts/private_network.sh PYTHON COMMAND [ARGS...]
#
# PYTHON is an interpreter with tandem installed (launch/network.py brings
# loopback up without iproute2). Where namespaces are not available (no
# `unshare`, a kernel or container that forbids user namespaces) the command
# runs on the host's network after a one-line warning. `make test` runs the
# test suite this way: Reverb and Courier servers bind every interface.
set -eu
py="$1"
shift
flags='--user --map-root-user --net'
# shellcheck disable=SC2086  # the flags are words
if command -v unshare >/dev/null 2>&1 && unshare $flags -- true 2>/dev/null; then
  # shellcheck disable=SC2016  # expanded by the inner shell
  exec unshare $flags -- sh -c \
    '"$0" -c "from tandem.launch import network; network.bring_loopback_up()" && exec "$@"' \
    "$py" "$@"
fi
echo "warning: no private network namespace here (unshare $flags failed);" \
  "servers started by this command listen on every interface" >&2
exec "$@"
