#!/bin/sh
# Helpers for the rig guest's RDMA test scripts (guest-mlx5-ib.sh, guest-interop.sh), sourced
# inside the guest from /bin/guest-ib-lib.sh. Busybox sh. Every wait here is bounded: an mlx5
# command that never completes costs 60 s in the kernel, and a pingpong server whose peer died
# would wait forever.
#
# Output markers (the host-side tests grep them):
#   RIG-IB <step> ...                  a step and its result
#   RIG-OUT <name> srv|cli| <line>     output of one side of a server/client pair
#   RIG-PAIR <name> server=RC client=RC  exit statuses of a pair (0 = success)
#   RIG-DMESG <line>                   kernel messages about mlx5 and RDMA, at the end

FAILS=0
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "RIG-IB $*"; }
fail() {
  echo "RIG-IB FAIL $*"
  FAILS=$((FAILS + 1))
}

# bg_wait SECS NAME CMD...: run CMD in the background and wait at most SECS for it. A module
# load or unload can block in the kernel for minutes and cannot be killed, so the script moves
# on instead. Prints "RIG-IB NAME rc=N (T s)" or "RIG-IB NAME still running after SECS s";
# returns CMD's status, or 124 while it still runs.
bg_wait() {
  _secs=$1 _name=$2
  shift 2
  _f=/tmp/bg.$_name
  rm -f "$_f.rc"
  _t0=$(up)
  ("$@"
    echo $? >"$_f.tmp"
    mv "$_f.tmp" "$_f.rc") &
  _i=0
  while [ ! -e "$_f.rc" ] && [ "$_i" -lt $((_secs * 5)) ]; do
    sleep 0.2
    _i=$((_i + 1))
  done
  if [ -e "$_f.rc" ]; then
    _rc=$(cat "$_f.rc")
    say "$_name rc=$_rc ($(awk -v a="$_t0" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }') s)"
    return "$_rc"
  fi
  say "$_name still running after $_secs s"
  return 124
}

# Load the modules of /m/GROUP.order up to, not including, module file STOP.ko.
load_group_before() {
  while read -r _m; do
    [ "$_m" = "$2.ko" ] && return 0
    _n=$(echo "${_m%.ko}" | tr - _)
    [ -d "/sys/module/$_n" ] && continue
    insmod "/m/$_m" || { fail "insmod $_m"; return 1; }
  done <"/m/$1.order"
}

# insmod_bounded SECS MODULE (file name without .ko): loads MODULE's dependencies from the
# group files, then MODULE itself in the background.
insmod_bounded() {
  _n=$(echo "$2" | tr - _)
  if [ -d "/sys/module/$_n" ]; then
    say "insmod $2 already loaded"
    return 0
  fi
  for _g in mlx5 rdma vfio; do
    grep -qx "$2.ko" "/m/$_g.order" 2>/dev/null || continue
    load_group_before "$_g" "$2" || return 1
    break
  done
  bg_wait "$1" "insmod-$2" insmod "/m/$2.ko"
}

# rmmod_bounded SECS MODULE: unload, printing the kernel messages it caused as RIG-RMMOD lines.
rmmod_bounded() {
  _n=$(echo "$2" | tr - _)
  if [ ! -d "/sys/module/$_n" ]; then
    say "rmmod-$2 not loaded"
    return 0
  fi
  _mark=$(dmesg | wc -l)
  bg_wait "$1" "rmmod-$2" rmmod "$2"
  _rc=$?
  sleep 1
  dmesg | tail -n +"$((_mark + 1))" | sed "s/^/RIG-RMMOD $2: /"
  return "$_rc"
}

# wait_listen PORT SECS PID: true once a TCP socket listens on PORT (IPv4 or IPv6); false
# after SECS, or as soon as process PID has exited.
wait_listen() {
  _hex=$(printf '%04X' "$1")
  _i=0
  while [ "$_i" -lt $(($2 * 5)) ]; do
    if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
      awk -v p=":$_hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'; then
      return 0
    fi
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.2
    _i=$((_i + 1))
  done
  return 1
}

# wait_exit PID SECS: wait for PID (a child of this shell) at most SECS; sets WAIT_RC to its
# status, or to 124 (after SIGKILL) if it was still running. Not in $(...): a subshell cannot
# wait for its parent's children.
wait_exit() {
  _i=0
  while kill -0 "$1" 2>/dev/null && [ "$_i" -lt $(($2 * 5)) ]; do
    sleep 0.2
    _i=$((_i + 1))
  done
  if kill -0 "$1" 2>/dev/null; then
    kill -9 "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    WAIT_RC=124
    return
  fi
  wait "$1"
  WAIT_RC=$?
}

# pair NAME SECS PORT "SERVER-COMMAND" "CLIENT-COMMAND": start the server, wait until it
# listens on PORT, run the client against 127.0.0.1, each side under its own SECS deadline
# (SIGKILL). A server whose client failed would wait for it forever: it gets 5 s, then SIGKILL.
# Prints both outputs and "RIG-PAIR NAME server=RC client=RC"; sets PAIR_SRV and PAIR_CLI to
# the statuses; true if both are 0. The commands are split on spaces.
pair() {
  _name=$1 _secs=$2 _port=$3 _srv=$4 _cli=$5
  echo "RIG-IB pair $_name: server: $_srv"
  echo "RIG-IB pair $_name: client: $_cli 127.0.0.1"
  _t0=$(up)
  # shellcheck disable=SC2086 # split on purpose
  timeout -s KILL "$_secs" $_srv >"/tmp/$_name.srv" 2>&1 &
  _spid=$!
  if wait_listen "$_port" 30 "$_spid"; then
    # shellcheck disable=SC2086
    timeout -s KILL "$_secs" $_cli 127.0.0.1 >"/tmp/$_name.cli" 2>&1
    _crc=$?
  else
    echo "server did not listen on port $_port (exited or 30 s passed)" >"/tmp/$_name.cli"
    _crc=255
  fi
  # The server's own timeout bounds it; the margin covers a verbs call stuck in the kernel.
  if [ "$_crc" = 0 ]; then wait_exit "$_spid" $((_secs + 70)); else wait_exit "$_spid" 5; fi
  _src=$WAIT_RC
  # rdma-core's --chk reports bad data on stdout ("invalid data in page N") and still exits 0.
  if grep -q 'invalid data' "/tmp/$_name.srv"; then _src=97; fi
  if grep -q 'invalid data' "/tmp/$_name.cli"; then _crc=97; fi
  # shellcheck disable=SC2034 # read by the scripts that source this file
  PAIR_SRV=$_src PAIR_CLI=$_crc
  sed "s/^/RIG-OUT $_name srv| /" "/tmp/$_name.srv"
  sed "s/^/RIG-OUT $_name cli| /" "/tmp/$_name.cli"
  echo "RIG-PAIR $_name server=$_src client=$_crc ($(awk -v a="$_t0" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }') s)"
  [ "$_src" = 0 ] && [ "$_crc" = 0 ]
}

# wait_ports_active SECS DEV...: wait until every port of each IB device reads ACTIVE.
wait_ports_active() {
  _secs=$1
  shift
  _i=0
  for _d in "$@"; do
    [ -d "/sys/class/infiniband/$_d" ] || _secs=0 # nothing to wait for
  done
  while :; do
    _ok=1
    for _d in "$@"; do
      for _s in /sys/class/infiniband/"$_d"/ports/*/state; do
        [ -e "$_s" ] || { _ok=0; break; }
        grep -q ACTIVE "$_s" || _ok=0
      done
    done
    [ "$_ok" = 1 ] && break
    [ "$_i" -ge $((_secs * 5)) ] && break
    sleep 0.2
    _i=$((_i + 1))
  done
  for _d in "$@"; do
    for _s in /sys/class/infiniband/"$_d"/ports/*/state; do
      [ -e "$_s" ] || { say "port $_d: no ports"; continue; }
      _p=${_s%/state}
      say "port $_d/${_p##*/} state=$(tr -d '\n' <"$_s") lid=$(cat "$_p/lid" 2>/dev/null) link_layer=$(cat "$_p/link_layer" 2>/dev/null)"
    done
  done
  [ "$_ok" = 1 ]
}

# names_in DIR: the entries of DIR, space-separated, sorted (empty if none).
names_in() {
  _l=""
  for _x in "$1"/*; do [ -e "$_x" ] && _l="$_l ${_x##*/}"; done
  echo "${_l# }"
}

# Show the RDMA view of the guest: IB devices, uverbs nodes, libibverbs' device list.
show_rdma() {
  say "ibdevs=$(names_in /sys/class/infiniband)"
  say "uverbs=$(names_in /dev/infiniband)"
  ibv_devices >/tmp/ibv_devices.out 2>&1
  _rc=$?
  sed 's/^/RIG-OUT ibv_devices| /' /tmp/ibv_devices.out
  say "ibv_devices rc=$_rc"
  return "$_rc"
}

# The kernel's messages about mlx5 and RDMA (why mlx5_ib did or did not come up).
dmesg_rdma() {
  dmesg | grep -iE 'mlx5|infiniband|ib_core|ib_uverbs|uverbs|rdma' |
    grep -viE 'command line|^\[ *[0-9.]+\]     [A-Z_]+=' | sed 's/^/RIG-DMESG /'
}
